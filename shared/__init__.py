"""Backend-agnostic toolkit for Python aggregated API servers.

Plays the role ``k8s.io/apiserver`` plays for Go servers: TLS, delegated authentication and
authorization, discovery, OpenAPI, Table rendering, list/watch semantics, patch handling,
``Status`` errors, Events and kube client helpers.  Nothing here knows Helm, Terraform or
definitions: each service plugs its kinds in through :class:`shared.api.rest.Storage`.

Importing it, or any module under it, changes nothing in the process: a service's entry point
calls :func:`shared.lazy_imports.install` itself, before it imports the rest.
"""
