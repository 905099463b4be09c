"""The attributes of one admission request, as policies and webhooks see them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from shared.api.attributes import ResourceAttributes
from shared.api.rest import RequestContext, ResourceInfo, User, WriteOptions
from shared.schema.defaults import with_spec_defaults, without_added_defaults

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

    @property
    def refused_name(self) -> str:
        """The name kube-apiserver's admission refusals give: the request's, else the object's (or its
        generateName), else ``Unknown`` -- what a deletecollection's refusal of one object says."""
        if self.name:
            return self.name
        meta = (self.object or {}).get("metadata") or {}
        return str(meta.get("name") or meta.get("generateName") or "Unknown") if self.object is not None \
            else "Unknown"

    @classmethod
    def for_write(cls, operation: str, info: ResourceInfo, ctx: RequestContext, namespace: str, name: str,
                  options: WriteOptions, obj: JSON | None = None, old: JSON | None = None) -> AdmissionRequest:
        """A write to one object of a served kind, as a storage sees it."""
        target = ResourceAttributes(operation.lower(), info.group, info.version, info.plural, namespace, name)
        kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}[operation]
        write_options: JSON = {"apiVersion": "meta.k8s.io/v1", "kind": kind}
        if operation == "DELETE":
            write_options.update(options.delete_options())
        elif options.dry_run:
            write_options["dryRun"] = ["All"]
        if options.field_manager and operation != "DELETE":
            write_options["fieldManager"] = options.field_manager
        return cls(operation, target, info.kind, ctx.user, obj, old, options.dry_run, write_options)

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


#: Admits one request or raises the denial (an ``ApiError``): what a storage calls after its own
#: validation and before it writes anything.
Admit = Callable[[AdmissionRequest], Awaitable[None]]


async def admit_all(request: AdmissionRequest) -> None:
    """The :data:`Admit` of a server without policies (unit tests, tools)."""


#: Runs the mutating admission of one create or update and returns the object to go on with (the
#: request's own when nothing changed it): what a storage calls first, before its own validation.
Mutate = Callable[[AdmissionRequest], Awaitable[JSON | None]]


async def mutate_nothing(request: AdmissionRequest) -> JSON | None:
    """The :data:`Mutate` of a server without mutating webhooks (unit tests, tools)."""
    return request.object


async def mutate_as_crd(mutate: Mutate, schema: JSON | None, request: AdmissionRequest) -> JSON | None:
    """Run ``mutate`` on ``request`` (its object as the client sent it, in its namespace) the way
    kube-apiserver runs mutating admission on a CRD: the object is seen with the spec schema's
    defaults. Returns the object to go on with, or None when nothing changed it.

    What the mutation changed goes on; the defaults it left alone are dropped again, so they stay
    the kind's defaults (applied where the kind applies them) instead of becoming stored values.
    """
    return (await mutate_with_defaults(mutate, schema, request))[0]


async def mutate_with_defaults(mutate: Mutate, schema: JSON | None,
                               request: AdmissionRequest) -> tuple[JSON | None, JSON | None]:
    """:func:`mutate_as_crd`, and the sent spec with the schema's defaults when nothing changed the object
    (None when something did, or the spec is not an object): the defaulting the webhooks needed is the one
    validation needs, so a write defaults the spec it was sent once."""
    sent = request.object or {}
    defaulted = with_spec_defaults(schema, sent)
    mutated = await mutate(replace(request, object=defaulted))
    if mutated is None or mutated is defaulted or mutated == defaulted:
        spec = defaulted.get("spec")
        return None, spec if defaulted is not sent and isinstance(spec, dict) else None
    return {**mutated, "spec": without_added_defaults(sent.get("spec"), defaulted.get("spec"),
                                                      mutated.get("spec"))}, None
