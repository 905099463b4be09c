"""What a changed definition does to an existing HelmRelease: the pure rollout computation.

The reconciler reads each HelmRelease, asks :func:`rollout_patch` for the merge patch, and writes
it; nothing here does I/O, so every rule of SPEC §2 "Reconciler" is unit-tested on plain data.
The wanted settings are exactly what :mod:`.build` writes for a new Application.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.api.durations import go_duration
from shared.api.patch import merge_diff
from shared.api.rollout import guarded_patch, release_label_patch
from shared.bodies import JSON

from .build import chart_ref, timeouts, values_from
from .definition import ApplicationDefinition, HelmDefinitionView
from .names import IDENTITY_LABELS, LABEL_PREFIX, is_application

#: chartRef fields that name the chart; a differing ``apiVersion`` alone is not a new chart.
CHART_IDENTITY = ("kind", "name", "namespace")


def rollout_patch(defn: HelmDefinitionView, backing: Mapping[str, Any], *,
                  group: str) -> tuple[JSON | None, list[str]]:
    """(JSON merge patch bringing ``backing`` in line with its definition or None, fields not rolled out).

    Rolled out (SPEC §2 "Reconciler"): chartRef, replaced when kind/name/namespace differ (keys
    the new reference lacks are nulled, since a merge patch would otherwise keep them) with a
    legacy ``spec.chart`` removed (the CRD forbids both at once); ``valuesFrom`` forced to the
    one Secret; ``release.labels`` added or overwritten (other labels untouched, the identity
    and users' labels never); install/upgrade timeouts and ``disableWait`` per the definition's
    annotations.  Values, user labels, health checks and strategies are not touched.  The patch
    carries the HelmRelease's ``metadata.resourceVersion`` so it fails with 409 if the object changed since it was read;
    the caller re-reads and recomputes.  A HelmRelease of another kind or group (``group`` is the
    served one) yields None.  Every
    definition field of a HelmRelease can be rolled out, so the second element is always empty.
    """
    if not is_application(backing, defn.kind, group):
        return None, []
    meta = backing.get("metadata") or {}
    label_patch = release_label_patch(defn.release_labels, meta.get("labels") or {},
                                      reserved=IDENTITY_LABELS, user_prefix=LABEL_PREFIX)
    return guarded_patch(meta, _spec_patch(defn, backing.get("spec") or {}), label_patch), []


def _spec_patch(defn: HelmDefinitionView, spec: Mapping[str, Any]) -> JSON:
    spec_patch: JSON = {}
    want_ref = chart_ref(defn)
    have_ref = spec.get("chartRef")
    if not isinstance(have_ref, dict) or any(have_ref.get(k) != want_ref.get(k) for k in CHART_IDENTITY):
        spec_patch["chartRef"] = merge_diff(have_ref, want_ref)
    if spec.get("chart") is not None:
        spec_patch["chart"] = None

    want_values_from = values_from()
    if spec.get("valuesFrom") != want_values_from:
        spec_patch["valuesFrom"] = want_values_from

    for action, timeout in zip(("install", "upgrade"), timeouts(defn), strict=True):
        action_patch = _action_patch(defn, spec.get(action) or {}, timeout)
        if action_patch:
            spec_patch[action] = action_patch
    return spec_patch


def _action_patch(defn: HelmDefinitionView, have: Mapping[str, Any], timeout: str) -> JSON:
    """The ``install`` or ``upgrade`` patch: its timeout and ``disableWait``."""
    action_patch: JSON = {}
    current = have.get("timeout")
    if not isinstance(current, str) or _canonical(current) != timeout:
        action_patch["timeout"] = timeout
    if defn.disable_wait and have.get("disableWait") is not True:
        action_patch["disableWait"] = True
    elif not defn.disable_wait and have.get("disableWait"):
        action_patch["disableWait"] = None
    return action_patch


def _canonical(text: str) -> str:
    """A live object's duration in canonical form; anything unparsable compares as itself."""
    try:
        return go_duration(text)
    except ValueError:
        return text


def rollout_key(defn: ApplicationDefinition) -> tuple[object, ...]:
    """What a rollout of ``defn`` depends on: a rollout is done once per distinct key.

    The generation alone is not enough: the timeout and disable-wait annotations are metadata, so
    changing only them does not bump it, yet they are rolled out (found by the flux tier against the
    real helm-controller).
    """
    return (defn.generation, *timeouts(defn), defn.disable_wait)
