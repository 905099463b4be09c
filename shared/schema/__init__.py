"""Definition schemas: validation and defaulting, the structural rewrite, and the OpenAPI documents built from them."""
