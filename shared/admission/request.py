"""The attributes of one admission request, as policies and webhooks see them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.api.rest import User
from shared.security.authz import ResourceAttributes

JSON = dict[str, Any]


@dataclass(frozen=True)
class AdmissionRequest:
    """What kube-apiserver knows about a write when it runs admission.

    ``target`` is the resource the request addresses, as the server already describes it for its
    SubjectAccessReview (its ``verb`` is not used: ``operation`` is the admission operation,
    ``CREATE``, ``UPDATE`` or ``DELETE``). ``object`` is the user kind as the client sent it
    (after defaulting), ``old_object`` the stored one (update and delete).
    """

    operation: str
    target: ResourceAttributes
    kind: str
    user: User
    object: JSON | None = None
    old_object: JSON | None = None
    dry_run: bool = False
    options: JSON | None = None

    @property
    def group(self) -> str:
        return self.target.group

    @property
    def version(self) -> str:
        return self.target.version

    @property
    def resource(self) -> str:
        return self.target.resource

    @property
    def subresource(self) -> str:
        return self.target.subresource

    @property
    def namespace(self) -> str:
        return self.target.namespace or ""

    @property
    def name(self) -> str:
        return self.target.name or ""

    def as_cel(self) -> JSON:
        """The ``request`` variable: an ``admission.k8s.io/v1`` AdmissionRequest without the objects."""
        kind = {"group": self.group, "version": self.version, "kind": self.kind}
        resource = {"group": self.group, "version": self.version, "resource": self.resource}
        user: JSON = {"username": self.user.name, "uid": "", "groups": list(self.user.groups),
                      "extra": {key: list(values) for key, values in self.user.extra.items()}}
        return {
            "kind": kind, "resource": resource, "subResource": self.subresource,
            "requestKind": kind, "requestResource": resource, "requestSubResource": self.subresource,
            "name": self.name, "namespace": self.namespace, "operation": self.operation,
            "userInfo": user, "dryRun": self.dry_run, "options": self.options,
        }
