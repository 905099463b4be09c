"""Admission on the served kinds, as kube-apiserver runs it on its own resources.

:class:`ClusterAdmission` is what each storage is given: mutating webhooks first (its ``mutate``,
before the storage's own defaulting and validation), then -- once the object passed them -- the
ValidatingAdmissionPolicies and the validating webhooks (:mod:`shared.admission.callouts`), in
kube-apiserver's order (a policy's denial means no webhook is called).

ValidatingAdmissionPolicies:
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
from collections.abc import Iterator
from contextvars import ContextVar

from kubernetes_asyncio import client as kclient

from shared.admission import AdmissionRequest, CompiledPolicy, admit, compile_policy, may_apply
from shared.admission.callouts import NAMESPACES, WebhookAdmission
from shared.admission.matching import label_selector
from shared.admission.webhooks import Outcome
from shared.api import errors, ownership, selectors
from shared.bodies import JSON
from shared.client.kube import GVR, ObjectClient, request_json
from shared.client.liveset import LiveSet

log = logging.getLogger(__name__)

POLICIES = GVR("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies")
BINDINGS = GVR("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings")

#: How long a request waits for the first list of policies and bindings before it is refused
#: (503): admitting without them would let a request through that a policy denies.
SYNC_WAIT_SECONDS = 5.0

_WARNINGS: ContextVar[list[str] | None] = ContextVar("agl_admission_warnings", default=None)


class PolicyAdmission:
    """The :data:`shared.admission.Admit` of a service: every ValidatingAdmissionPolicy binding in
    the cluster, applied to the requests for the kinds it matches."""

    def __init__(self, api: kclient.ApiClient, *, sync_wait: float = SYNC_WAIT_SECONDS) -> None:
        self._api = api
        self._policies: LiveSet[CompiledPolicy] = LiveSet(ObjectClient(api, POLICIES), compile_policy)
        self._bindings: LiveSet[JSON] = LiveSet(ObjectClient(api, BINDINGS), lambda binding: binding)
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
        policies = list(self._policies.items.values())
        if not may_apply(policies, bindings, request):
            return
        namespace_object = await self._namespaces.get(None, request.namespace) if request.namespace else None
        verdict = await admit(policies, bindings, request, namespace_object, self._params)
        _report(request, verdict.warnings, verdict.audit_annotations)
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


class ClusterAdmission:
    """The :data:`shared.admission.Admit` (validating) and :data:`shared.admission.Mutate` of a
    service: the cluster's policies and webhooks, applied to the requests for the kinds they match."""

    def __init__(self, api: kclient.ApiClient, *, sync_wait: float = SYNC_WAIT_SECONDS) -> None:
        self.policies = PolicyAdmission(api, sync_wait=sync_wait)
        self.webhooks = WebhookAdmission(api, sync_wait=sync_wait)

    def start(self) -> None:
        self.policies.start()
        self.webhooks.start()

    async def stop(self) -> None:
        await self.policies.stop()
        await self.webhooks.stop()

    async def mutate(self, request: AdmissionRequest) -> JSON | None:
        """The mutating webhooks: the object the request goes on with."""
        outcome = Outcome()
        try:
            await self.webhooks.mutate(request, outcome)
        finally:
            _report(request, outcome.warnings, outcome.audit_annotations)
        return outcome.object

    async def __call__(self, request: AdmissionRequest) -> None:
        """Validating admission: the policies, then (when they allow) the validating webhooks."""
        await self.policies(request)
        outcome = Outcome()
        try:
            await self.webhooks.validate(request, outcome)
        finally:
            _report(request, outcome.warnings, outcome.audit_annotations)


def _report(request: AdmissionRequest, warnings: list[str], audit_annotations: dict[str, str]) -> None:
    _warn(warnings)
    if audit_annotations:
        log.info("admission audit annotations", extra={
            "resource": request.resource, "namespace": request.namespace, "name": request.name,
            "operation": request.operation, "user": request.user.name, "annotations": audit_annotations})


def _warn(texts: list[str]) -> None:
    warnings = _WARNINGS.get()
    if warnings is not None:
        warnings.extend(texts)


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


def warn_of_new_finalizers(app: JSON, old: JSON | None = None) -> None:
    """The warnings kube-apiserver sends for a custom resource's new finalizers, sent back for the Application
    ``app`` (``old``: what it was before an update)."""
    for text in ownership.finalizer_warnings(app.get("metadata") or {}, (old or {}).get("metadata")):
        add_warning(text)


def warning_header(text: str) -> str:
    """An RFC 7234 ``Warning`` value as kube-apiserver writes it: ``299 - "text"``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'
