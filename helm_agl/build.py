"""Application -> HelmRelease, as cozystack-api builds it (SPEC §2).

A pure function of plain JSON-shaped data, called after :mod:`.validate` has accepted the
Application.  Decisions worth knowing (each is documented where it is made):

* the install-timeout annotation sets the upgrade timeout too, unless the upgrade-timeout
  annotation is also present (cozystack-api's precedence);
* durations are written in Go's ``time.Duration`` form (``15m`` -> ``15m0s``), as cozystack-api's
  typed client does, so a re-rendered HelmRelease compares equal to a stored one;
* an update carries the Application's ``metadata.resourceVersion`` onto the HelmRelease so a
  stale write fails with 409 at kube-apiserver instead of silently winning;
* an update keeps the live HelmRelease's sharding label, ``spec.suspend`` and helm-controller's
  finalizer: none of them is part of the Application, and dropping them would resume suspended
  releases or strip Flux's finalizer;
* the Application's own finalizers and ownerReferences are the HelmRelease's
  (:mod:`shared.api.ownership`), so kube-apiserver holds a deletion and a cluster's garbage
  collector deletes the Application with its owner, as for a custom resource.

The release settings a definition controls (:func:`chart_ref`, :func:`timeouts`,
:func:`values_from`) are public because :mod:`.rollout` brings existing releases to exactly them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from shared.api import ownership
from shared.api.durations import go_duration
from shared.api.fieldmanager import to_annotation
from shared.api.rollout import definition_labels
from shared.bodies import JSON
from shared.client.fence import FENCE_LABEL
from shared.schema.defaults import without_nulls

from .definition import HelmDefinitionView
from .names import (
    CONTROLLER_FINALIZERS,
    GROUP_LABEL,
    HR_API_VERSION,
    HR_KIND,
    IDENTITY_LABELS,
    KIND_LABEL,
    LABEL_PREFIX,
    MANAGED_FIELDS_ANNOTATION,
    NAME_LABEL,
    SHARDING_LABEL,
    backing_name,
    fence_name,
    user_selector_key,
)

INTERVAL = "5m0s"
MAX_HISTORY = 5
DEFAULT_TIMEOUT = "10m0s"
RETRY_INTERVAL = "30s"
RETRY_STRATEGY = "RetryOnFailure"
#: The one values Secret every emitted HelmRelease reads (cluster-wide values injected by cozystack).
VALUES_SECRET = "cozystack-values"


def build(
    defn: HelmDefinitionView, app: Mapping[str, Any], *, group: str, live: Mapping[str, Any] | None = None
) -> JSON:
    """The HelmRelease that backs ``app`` in ``group``.

    With ``live`` (an update) the result is a full replacement for a PUT that keeps what belongs
    to the live object (see :func:`_keep_live`).  Without ``live`` (a create) no resourceVersion
    is set.
    """
    meta = app.get("metadata") or {}
    name = str(meta.get("name") or "")
    labels = definition_labels(defn.release_labels, reserved=IDENTITY_LABELS, user_prefix=LABEL_PREFIX)
    labels.update(_prefixed(meta.get("labels")))
    labels[KIND_LABEL] = defn.kind
    labels[GROUP_LABEL] = group
    labels[NAME_LABEL] = name
    hr_meta: JSON = {"name": backing_name(defn, name), "namespace": meta.get("namespace"), "labels": labels}
    annotations = _prefixed(meta.get("annotations"))
    managed = to_annotation(meta.get("managedFields"))
    if managed is not None:
        annotations[MANAGED_FIELDS_ANNOTATION] = managed
    if annotations:
        hr_meta["annotations"] = annotations
    ownership.to_backing(meta, hr_meta, CONTROLLER_FINALIZERS,
                         None if live is None else live.get("metadata") or {})
    spec = app.get("spec")
    # Values are stored as given: defaults are applied on read, so a later schema default
    # change reaches every instance without rewriting it.  Nulls the schema does not allow are
    # dropped, as kube-apiserver drops them from a custom resource (to the chart a null would
    # delete its own default).
    values = without_nulls(defn.schema, spec) if isinstance(spec, dict) else {}
    hr: JSON = {"apiVersion": HR_API_VERSION, "kind": HR_KIND, "metadata": hr_meta,
                "spec": _release_spec(defn, values)}
    if live is not None:
        _keep_live(hr, meta, live)
    return hr


def fence(defn: HelmDefinitionView, *, group: str) -> JSON:
    """The kind's read fence (:mod:`shared.client.fence`): a suspended HelmRelease, which
    helm-controller leaves alone, in the kind's watched selection but outside its backing selector."""
    return {
        "apiVersion": HR_API_VERSION,
        "kind": HR_KIND,
        "metadata": {"name": fence_name(defn),
                     "labels": {KIND_LABEL: defn.kind, GROUP_LABEL: group, FENCE_LABEL: "true"}},
        "spec": {"suspend": True, "interval": "24h0m0s",
                 "chart": {"spec": {"chart": "read-fence", "sourceRef": {"kind": "HelmRepository",
                                                                         "name": "read-fence"}}}},
    }


def _keep_live(hr: JSON, app_meta: Mapping[str, Any], live: Mapping[str, Any]) -> None:
    """Carry onto the rebuilt ``hr`` what an update must not lose from the ``live`` HelmRelease.

    The Application's ``metadata.resourceVersion`` is carried so kube-apiserver refuses a stale
    write with 409 (cozystack-api retries instead, so the last writer wins); an Application
    without one gets the live object's, i.e. an unconditional update, as Kubernetes allows.  The
    live sharding label and ``spec.suspend`` are kept: they belong to operators, not to the
    Application (helm-controller's finalizer is kept by :func:`shared.api.ownership.to_backing`).
    """
    live_meta = live.get("metadata") or {}
    meta = hr["metadata"]
    rv = app_meta.get("resourceVersion") or live_meta.get("resourceVersion")
    if rv:
        meta["resourceVersion"] = rv
    live_labels = live_meta.get("labels") or {}
    if SHARDING_LABEL in live_labels:
        meta["labels"][SHARDING_LABEL] = live_labels[SHARDING_LABEL]
    if (live.get("spec") or {}).get("suspend"):
        hr["spec"]["suspend"] = True


def chart_ref(defn: HelmDefinitionView) -> dict[str, str]:
    """The definition's chartRef with only the fields the HelmRelease CRD has (apiVersion if set)."""
    ref = {k: defn.chart_ref[k] for k in ("kind", "name", "namespace") if defn.chart_ref.get(k)}
    if defn.chart_ref.get("apiVersion"):
        ref["apiVersion"] = defn.chart_ref["apiVersion"]
    return ref


def timeouts(defn: HelmDefinitionView) -> tuple[str, str]:
    """(install, upgrade) timeouts in Go's duration form.

    The install annotation sets both; the upgrade annotation then overrides only the upgrade
    timeout, so a kind can have an asymmetric budget (cozystack-api's precedence).
    """
    install = defn.install_timeout or DEFAULT_TIMEOUT
    upgrade = defn.upgrade_timeout or defn.install_timeout or DEFAULT_TIMEOUT
    return go_duration(install), go_duration(upgrade)


def values_from() -> list[JSON]:
    """``spec.valuesFrom``: the one values Secret, nothing else."""
    return [{"kind": "Secret", "name": VALUES_SECRET}]


def _release_spec(defn: HelmDefinitionView, values: JSON) -> JSON:
    """``spec`` with ``values``: every other field is the definition's (``suspend`` aside)."""
    install_timeout, upgrade_timeout = timeouts(defn)
    spec: JSON = {
        "chartRef": chart_ref(defn),
        "interval": INTERVAL,
        "maxHistory": MAX_HISTORY,
        "install": _action(defn, install_timeout),
        "upgrade": _action(defn, upgrade_timeout),
        "valuesFrom": values_from(),
        "values": values,
    }
    if defn.health_check_exprs:
        spec["healthCheckExprs"] = copy.deepcopy(defn.health_check_exprs)
    if defn.wait_strategy:
        spec["waitStrategy"] = {"name": defn.wait_strategy}
    elif defn.health_check_exprs:
        # Flux evaluates healthCheckExprs only under the poller strategy.
        spec["waitStrategy"] = {"name": "poller"}
    return spec


def _action(defn: HelmDefinitionView, timeout: str) -> JSON:
    out: JSON = {"timeout": timeout, "strategy": {"name": RETRY_STRATEGY, "retryInterval": RETRY_INTERVAL}}
    if defn.disable_wait:
        out["disableWait"] = True
    return out


def _prefixed(entries: Mapping[str, Any] | None) -> dict[str, str]:
    return {user_selector_key(str(k)): str(v) for k, v in (entries or {}).items()}
