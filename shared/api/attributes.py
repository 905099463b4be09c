"""What a request asks to do, as a SubjectAccessReview and an admission request describe it.

Plain data on the lowest floor (as ``authorizer.Attributes`` sits apart from any authorizer in
``k8s.io/apiserver``): the HTTP layer builds it, :mod:`shared.security.authz` asks kube-apiserver
about it, admission and a kind's storage read it, and none of them has to import another to share it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceAttributes:
    """What is being done to which resource (``resourceAttributes`` of a SubjectAccessReview)."""

    verb: str
    group: str
    version: str
    resource: str
    namespace: str | None = None
    name: str | None = None
    subresource: str = ""


@dataclass(frozen=True)
class NonResourceAttributes:
    """A request for a URL that names no resource (``nonResourceAttributes``): ``/metrics``, ``/openapi/v2``.

    kube-apiserver authorizes its own non-resource paths this way, with the HTTP method as the
    verb (``get`` for GET and HEAD); RBAC grants them through ``nonResourceURLs``.
    """

    path: str
    verb: str = "get"


#: What a SubjectAccessReview can ask about.
Attributes = ResourceAttributes | NonResourceAttributes
