"""Who is calling and whether they may: serving TLS, front-proxy authentication, SubjectAccessReview authorization."""
