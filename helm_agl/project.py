"""HelmRelease -> Application: what a user reads back, its status, and its Table row.

The storage's reads, its watch and its write responses all project through here, so ``get``,
``list``, ``watch`` and ``kubectl get`` show the same Application for the same HelmRelease.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from shared.api import ownership
from shared.api.fieldmanager import from_annotation
from shared.api.readiness import (
    READY,
    RECONCILING,
    STALLED,
    BackendReport,
    Signal,
    condition_signal,
    latest_transition,
    readiness,
)
from shared.api.rest import Column
from shared.bodies import JSON
from shared.schema.defaults import apply_defaults

from .definition import HelmDefinitionView
from .names import (
    CONTROLLER_FINALIZERS,
    LABEL_PREFIX,
    MANAGED_FIELDS_ANNOTATION,
    VERSION,
    application_name,
    is_application,
)

#: Application metadata copied from the HelmRelease as it is (the server-owned fields).
COPIED_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds")
#: Flux conditions a user sees as helm-controller wrote them; history, failures and the inventory stay hidden.
#: ``Ready``, ``Reconciling`` and ``Stalled`` are derived (:func:`backend_report`), keeping their meaning.
SHOWN_CONDITIONS = ("Released",)
CONTROLLER = "helm-controller"

#: Table columns of every Application kind.  AGE has type "date": the shared Table renderer is
#: expected to turn the creationTimestamp cell into an age, as kubectl does for built-in kinds.
COLUMNS: tuple[Column, ...] = (
    Column("NAME", "string", "Name of the application", format="name"),
    Column("READY", "string", "Ready condition of the backing HelmRelease (True, False or Unknown)"),
    Column("AGE", "date", "Time since the application was created"),
    Column("VERSION", "string", "Chart revision Flux last attempted"),
)


def to_application(defn: HelmDefinitionView, backing: Mapping[str, Any], *, group: str,
                   defaulted: bool = True, spec: JSON | None = None) -> JSON | None:
    """The Application a HelmRelease represents, or None if it is not one of this kind.

    A HelmRelease without this definition's kind and group labels, or whose name lacks the
    prefix (it could not be addressed by name), is not an Application.  ``spec`` hides the
    top-level ``_`` keys the platform injects and has schema defaults applied, unless
    ``defaulted`` is False: then it is the Application as stored, the object patches apply to.
    ``metadata.managedFields`` come from the service's annotation.  ``spec``, when given, is that spec
    already projected from a HelmRelease with the same values (a create projects its spec once).
    """
    if not is_application(backing, defn.kind, group):
        return None
    meta = backing.get("metadata") or {}
    name = application_name(defn, str(meta.get("name") or ""))
    if name is None:
        return None
    app_meta: JSON = {"name": name, "namespace": meta.get("namespace")}
    for key in COPIED_METADATA:
        if meta.get(key) is not None:
            app_meta[key] = meta[key]
    labels = _deprefixed(meta.get("labels"))
    if labels:
        app_meta["labels"] = labels
    annotations = _deprefixed(meta.get("annotations"))
    if annotations:
        app_meta["annotations"] = annotations
    ownership.to_application(meta, app_meta, CONTROLLER_FINALIZERS)
    managed = from_annotation((meta.get("annotations") or {}).get(MANAGED_FIELDS_ANNOTATION))
    if managed:
        app_meta["managedFields"] = managed
    return {
        "apiVersion": f"{group}/{VERSION}",
        "kind": defn.kind,
        "metadata": app_meta,
        "spec": _spec(defn, backing, defaulted) if spec is None else spec,
        "status": project_status(backing),
    }


def backend_report(backing: Mapping[str, Any]) -> BackendReport:
    """helm-controller's own words, which already follow kstatus: its ``Reconciling`` (installing,
    upgrading, ``ProgressingWithRetry`` between the retries of a failed install, which ``RetryOnFailure``
    repeats forever) and its ``Stalled`` (set when it gives up, e.g. remediation retries exhausted, or
    a chart reference it cannot use) are kept as they are.  A retry's message ("retrying after 30s")
    is prefixed with the failure it retries, so the reason kstatus reports says what went wrong."""
    hr_status = backing.get("status") or {}
    conds = {c.get("type"): c for c in hr_status.get("conditions") or [] if isinstance(c, dict)}
    observed = hr_status.get("observedGeneration")
    ready = conds.get(READY)
    reconciling = condition_signal(conds.get(RECONCILING))
    if reconciling is not None and ready is not None and ready.get("status") == "False" and ready.get("message"):
        reconciling = Signal(reconciling.reason, f"{ready['message']} ({reconciling.message})", reconciling.since)
    return BackendReport(
        controller=CONTROLLER,
        observed_generation=observed if isinstance(observed, int) and not isinstance(observed, bool) else None,
        ready=ready, reconciling=reconciling, stalled=condition_signal(conds.get(STALLED)))


def project_status(backing: Mapping[str, Any]) -> JSON:
    """``status`` of the Application: the generation helm-controller finished, the chart revision it last
    attempted, ``Ready``/``Reconciling``/``Stalled`` as kstatus must read them (:mod:`shared.api.readiness`)
    and ``Released``."""
    hr_status = backing.get("status") or {}
    meta = backing.get("metadata") or {}
    generation = meta.get("generation")
    derived = readiness(generation if isinstance(generation, int) else None, backend_report(backing),
                        since=latest_transition(hr_status.get("conditions"), meta.get("creationTimestamp")))
    status: JSON = {}
    if derived.observed_generation is not None:
        status["observedGeneration"] = derived.observed_generation
    if hr_status.get("lastAttemptedRevision"):
        status["version"] = hr_status["lastAttemptedRevision"]
    # Conditions hold scalars only (metav1.Condition; the HelmRelease CRD's schema prunes anything else), so a
    # shallow copy is a whole one; ``derived``'s are new already.
    status["conditions"] = [*derived.conditions, *(
        dict(c) for c in hr_status.get("conditions") or [] if c.get("type") in SHOWN_CONDITIONS)]
    return status


def ready_status(app: Mapping[str, Any]) -> str:
    """``True``, ``False`` or ``Unknown`` from the Application's Ready condition."""
    for cond in (app.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            value = cond.get("status")
            return value if value in ("True", "False") else "Unknown"
    return "Unknown"


def table_cells(app: Mapping[str, Any]) -> list[Any]:
    """Cells in :data:`COLUMNS` order; AGE is the raw creationTimestamp (None if unset)."""
    meta = app.get("metadata") or {}
    version = (app.get("status") or {}).get("version") or ""
    return [meta.get("name", ""), ready_status(app), meta.get("creationTimestamp"), version]


def _spec(defn: HelmDefinitionView, backing: Mapping[str, Any], defaulted: bool) -> JSON:
    """The values without the platform's top-level ``_`` keys, with schema defaults applied (if ``defaulted``)."""
    values = (backing.get("spec") or {}).get("values")
    visible = (
        {k: copy.deepcopy(v) for k, v in values.items() if not k.startswith("_")}
        if isinstance(values, dict)
        else {}
    )
    return apply_defaults(defn.schema, visible) if defn.schema and defaulted else visible


def _deprefixed(entries: Mapping[str, Any] | None) -> dict[str, str]:
    return {k[len(LABEL_PREFIX) :]: v for k, v in (entries or {}).items() if k.startswith(LABEL_PREFIX)}
