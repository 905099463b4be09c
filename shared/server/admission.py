"""ValidatingAdmissionPolicies on the served kinds, as kube-apiserver runs them on its own resources.

kube-apiserver does not run admission for what it proxies to an aggregated server, so a policy bound
to a user kind would be silently bypassed; :class:`PolicyAdmission` runs it here instead. The
policies and bindings (``admissionregistration.k8s.io/v1``) are kept live by one informer each, so a
new policy applies within a watch event and without a restart; each policy is compiled once per
version. For each write a storage calls it after its own validation and before anything is
written: the request's namespace is read for ``namespaceSelector`` and ``namespaceObject``, the
params of the bindings that match are read from the cluster, and the decision is
:func:`shared.admission.admit`'s. A denial is raised as its Status; warnings go back to the client
as ``Warning`` headers (:func:`collect_warnings`); audit annotations are logged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from typing import Generic, TypeVar

from kubernetes_asyncio import client as kclient

from shared.admission import AdmissionRequest, CompiledPolicy, admit, compile_policy
from shared.admission.matching import label_selector
from shared.api import errors, selectors
from shared.bodies import JSON
from shared.client.informer import Informer
from shared.client.kube import GVR, ObjectClient, request_json

log = logging.getLogger(__name__)

POLICIES = GVR("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies")
BINDINGS = GVR("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings")
NAMESPACES = GVR("", "v1", "namespaces")

#: How long a request waits for the first list of policies and bindings before it is refused
#: (503): admitting without them would let a request through that a policy denies.
SYNC_WAIT_SECONDS = 5.0

_WARNINGS: ContextVar[list[str] | None] = ContextVar("agl_admission_warnings", default=None)

Item = TypeVar("Item")


class _LiveSet(Generic[Item]):
    """Every object of one cluster-scoped resource, each turned into an ``Item`` once per version.

    The informer lists and watches (with its retries and re-lists); this set sees the same list
    and the same events as they pass and keeps its own map by name.
    """

    def __init__(self, client: ObjectClient, convert: Callable[[JSON], Item]) -> None:
        self._client = client
        self._convert = convert
        self.items: dict[str, Item] = {}
        self.informer = Informer(list_fn=self._list, watch_fn=self._watch, name=client.gvr.plural)

    async def _list(self) -> JSON:
        page = await self._client.list_all(None)
        self.items = {_name(obj): self._convert(obj) for obj in page.get("items") or []}
        return page

    async def _watch(self, resource_version: str) -> AsyncIterator[JSON]:
        async for event in self._client.watch(None, "", resource_version):
            obj = event.get("object") or {}
            if event.get("type") in ("ADDED", "MODIFIED"):
                self.items[_name(obj)] = self._convert(obj)
            elif event.get("type") == "DELETED":
                self.items.pop(_name(obj), None)
            yield event


def _name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


class PolicyAdmission:
    """The :data:`shared.admission.Admit` of a service: every ValidatingAdmissionPolicy binding in
    the cluster, applied to the requests for the kinds it matches."""

    def __init__(self, api: kclient.ApiClient, *, sync_wait: float = SYNC_WAIT_SECONDS) -> None:
        self._api = api
        self._policies: _LiveSet[CompiledPolicy] = _LiveSet(ObjectClient(api, POLICIES), compile_policy)
        self._bindings: _LiveSet[JSON] = _LiveSet(ObjectClient(api, BINDINGS), lambda binding: binding)
        self._namespaces = ObjectClient(api, NAMESPACES)
        self._sync_wait = sync_wait
        #: (apiVersion, kind) of a paramKind -> its resource and whether it is namespaced.
        self._param_resources: dict[tuple[str, str], tuple[GVR, bool]] = {}

    def start(self) -> None:
        self._policies.informer.start()
        self._bindings.informer.start()

    async def stop(self) -> None:
        await self._policies.informer.stop()
        await self._bindings.informer.stop()

    async def __call__(self, request: AdmissionRequest) -> None:
        for live in (self._policies, self._bindings):
            await live.informer.require_synced(self._sync_wait)
        bindings = list(self._bindings.items.values())
        if not bindings:
            return
        namespace_object = await self._namespaces.get(None, request.namespace) if request.namespace else None
        verdict = await admit(list(self._policies.items.values()), bindings, request, namespace_object, self._params)
        if verdict.audit_annotations:
            log.info("admission audit annotations", extra={
                "resource": request.resource, "namespace": request.namespace, "name": request.name,
                "operation": request.operation, "user": request.user.name,
                "annotations": verdict.audit_annotations})
        warnings = _WARNINGS.get()
        if warnings is not None:
            warnings.extend(verdict.warnings)
        if verdict.denial is not None:
            raise verdict.denial

    async def _params(self, param_kind: JSON, ref: JSON, namespace: str) -> list[JSON]:
        """The objects a binding's ``paramRef`` names (by name or by selector) in the cluster."""
        gvr, namespaced = await self._param_resource(str(param_kind.get("apiVersion", "")),
                                                     str(param_kind.get("kind", "")))
        client = ObjectClient(self._api, gvr)
        where = namespace if namespaced else None
        if ref.get("name"):
            try:
                return [await client.get(where, str(ref["name"]))]
            except errors.ApiError as exc:
                if exc.code == 404:
                    return []
                raise
        selector = selectors.render(label_selector(ref.get("selector") or {}))
        return list((await client.list_all(where, selector)).get("items") or [])

    async def _param_resource(self, api_version: str, kind: str) -> tuple[GVR, bool]:
        """Find a paramKind's resource through discovery, once per kind."""
        key = (api_version, kind)
        if key not in self._param_resources:
            group, _, version = api_version.rpartition("/")
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            for resource in (await request_json(self._api, "GET", path)).get("resources") or []:
                if resource.get("kind") == kind and "/" not in str(resource.get("name", "")):
                    self._param_resources[key] = (GVR(group, version, resource["name"]),
                                                  bool(resource.get("namespaced")))
                    break
            else:
                raise errors.internal(f"paramKind {kind} of {api_version} is not served by kube-apiserver")
        return self._param_resources[key]


@contextlib.contextmanager
def collect_warnings() -> Iterator[list[str]]:
    """Collect the admission warnings of the request being handled (in this task)."""
    warnings: list[str] = []
    token = _WARNINGS.set(warnings)
    try:
        yield warnings
    finally:
        _WARNINGS.reset(token)


def add_warning(text: str) -> None:
    """Send ``text`` back as a ``Warning`` header of the request being handled (if it collects them)."""
    warnings = _WARNINGS.get()
    if warnings is not None:
        warnings.append(text)


def warning_header(text: str) -> str:
    """An RFC 7234 ``Warning`` value as kube-apiserver writes it: ``299 - "text"``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'
