"""The contract between the generic HTTP layer and a service's kinds.

The HTTP layer (:mod:`shared.server`) parses requests, authenticates, authorizes, negotiates
content and renders errors; everything kind-specific happens behind :class:`Storage`, one
instance per served resource.  This mirrors ``rest.Storage`` in ``k8s.io/apiserver``: the
service decides what an object *is*, the toolkit decides how it is served.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from shared.api import errors
from shared.api.attributes import ResourceAttributes
from shared.bodies import JSON, Encoded


@dataclass(frozen=True)
class Column:
    """One Table column (``meta.k8s.io/v1 TableColumnDefinition``)."""

    name: str
    type: str = "string"
    description: str = ""
    format: str = ""
    priority: int = 0


@dataclass(frozen=True)
class ResourceInfo:
    """What discovery, OpenAPI and the router need to know about one resource."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    #: OpenAPI v3 schema of the whole object (apiVersion, kind, metadata, spec, status);
    #: must be structural.
    schema: JSON
    columns: tuple[Column, ...] = ()
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    namespaced: bool = True
    #: Read-only subresources (``<plural>/<name>/<subresource>``) the storage serves through
    #: :class:`SubresourceReader`; discovery lists each as ``<plural>/<subresource>`` with verb get.
    read_only_subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


@dataclass(frozen=True)
class Content:
    """A subresource's answer as it goes on the wire: a readable document need not be an object."""

    body: bytes
    content_type: str


@dataclass(frozen=True)
class User:
    """The identity the front proxy asserted (``X-Remote-*`` headers)."""

    name: str
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ListOptions:
    """Query parameters of list and watch requests, already parsed and validated."""

    label_selector: str = ""
    #: Only ``metadata.name`` / ``metadata.namespace`` requirements reach a storage, as
    #: (field, operator, value) with operator one of "=", "!=".
    field_selector: tuple[tuple[str, str, str], ...] = ()
    limit: int | None = None
    continue_token: str | None = None
    resource_version: str | None = None
    #: ``resourceVersionMatch``: "" (absent), ``NotOlderThan`` or ``Exact`` (a list of the state at exactly
    #: ``resource_version``, which only kube-apiserver can answer).
    resource_version_match: str = ""
    timeout_seconds: int | None = None
    allow_bookmarks: bool = False

    @property
    def exact(self) -> bool:
        """A list of the state at exactly ``resource_version``: kube-apiserver's to answer, a cache keeps no past."""
        return self.resource_version_match == "Exact"


@dataclass(frozen=True)
class WriteOptions:
    """Options shared by create, update, patch and delete."""

    dry_run: bool = False
    #: The ``fieldManager`` parameter as given.
    field_manager: str | None = None
    #: The manager the write is recorded under: ``fieldManager``, else derived from the User-Agent.
    manager: str = ""
    #: ``force`` of an apply patch: take the fields other managers own.
    force: bool = False
    #: ``fieldValidation``: "" (absent), Ignore, Warn or Strict.
    field_validation: str = ""
    #: A DELETE's ``propagationPolicy``, ``orphanDependents`` and ``gracePeriodSeconds`` as stated: the backing
    #: object's delete is sent them, so kube-apiserver applies them there as it would to a custom resource.
    deletion: Mapping[str, object] = field(default_factory=dict)

    def delete_options(self) -> dict[str, object]:
        """The DeleteOptions fields of a DELETE as it goes on (to admission, to the backing object's delete)."""
        return {**self.deletion, "dryRun": ["All"]} if self.dry_run else dict(self.deletion)


@dataclass(frozen=True)
class RequestContext:
    """Who is asking, for storages that need it (approval Events, audit in logs)."""

    user: User
    request_id: str = ""
    #: Asks kube-apiserver whether this user may also do something else (a SubjectAccessReview), raising
    #: the 403 kube-apiserver would; for permissions beyond the request's own verb (approving a plan,
    #: reading the Secret a plan comes from).  Without one, nothing beyond the verb is allowed.
    authorize: Callable[[ResourceAttributes], Awaitable[None]] | None = None

    async def require(self, attrs: ResourceAttributes) -> None:
        """Return if the user may do ``attrs``, raise 403 otherwise (fail closed without an authorizer)."""
        if self.authorize is None:
            resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
            raise errors.forbidden(self.user.name, attrs.verb, resource, attrs.group, attrs.namespace, attrs.name)
        await self.authorize(attrs)


class Storage(Protocol):
    """One served resource.  Objects in and out are full Kubernetes objects as JSON dicts.

    Errors are raised as :class:`shared.api.errors.ApiError`.  The HTTP layer has already checked
    authorization, the namespace in the URL against the body, apiVersion/kind of the body and the
    body size; storages check everything that needs the kind's own rules.
    """

    info: ResourceInfo

    async def get(self, ctx: RequestContext, namespace: str, name: str,
                  resource_version: str | None = None) -> JSON | Encoded:
        """The object; with a ``resource_version`` (``"0"``: any, else not older than it) the storage may
        answer from its cache, as kube-apiserver answers such a GET from its watch cache.  It may come
        encoded (a projection kept per revision of the backing object, written to the client as it is);
        :func:`shared.bodies.plain` decodes it for a reader of its fields."""
        ...

    async def stored(self, ctx: RequestContext, namespace: str, name: str) -> JSON:
        """The object as stored, which patches apply to: the spec as written (no defaults filled in on
        read) with ``metadata.managedFields``."""
        ...

    async def list(self, ctx: RequestContext, namespace: str | None, options: ListOptions) -> JSON:
        """Return a ``<Kind>List`` with ``metadata.resourceVersion`` and ``metadata.continue``."""
        ...

    def watch(self, ctx: RequestContext, namespace: str | None, options: ListOptions) -> AsyncIterator[JSON]:
        """Yield ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}`` events."""
        ...

    async def create(self, ctx: RequestContext, namespace: str, obj: JSON, options: WriteOptions) -> JSON: ...

    async def update(
        self, ctx: RequestContext, namespace: str, name: str, obj: JSON, options: WriteOptions
    ) -> JSON:
        """Replace the object; a stale ``metadata.resourceVersion`` must raise 409 Conflict."""
        ...

    async def delete(self, ctx: RequestContext, namespace: str, name: str, options: WriteOptions, *,
                     collection: bool = False) -> JSON:
        """Delete; return the object as it is after the delete was accepted.

        ``collection`` is set for each object a ``deletecollection`` deletes: admission then sees the
        request as kube-apiserver builds it for a collection (no name, the object as ``oldObject``).
        """
        ...

    def table_cells(self, obj: JSON) -> builtins.list[Any]:
        """Cells for one Table row, in the order of ``info.columns``."""
        ...


@runtime_checkable
class SubresourceReader(Protocol):
    """The optional part of a :class:`Storage` that serves read-only subresources.

    Only storages whose ``info.read_only_subresources`` names a subresource are asked for it, and
    only after the user was authorized to ``get`` ``<plural>/<subresource>``; any other
    subresource URL is a 404, as kube-apiserver answers for a subresource a resource lacks.
    """

    async def get_subresource(self, ctx: RequestContext, namespace: str, name: str, subresource: str) -> Content:
        ...
