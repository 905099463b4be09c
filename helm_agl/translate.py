"""Application ⇄ HelmRelease translation, as cozystack-api does it (SPEC §2).

Everything here is a pure function of plain JSON-shaped data: the storage, the watch path and
the reconciler all need the same mapping, and keeping it free of I/O lets every rule of the
specification be unit-tested without a cluster.

The definition is seen through :class:`HelmDefinitionView`, a read-only protocol, so this module
does not depend on how ``helm_agl.definition`` parses ApplicationDefinitions.

Decisions worth knowing (each is documented on the function that makes it):

* the install-timeout annotation sets the upgrade timeout too, unless the upgrade-timeout
  annotation is also present (cozystack-api's precedence);
* durations are written in Go's ``time.Duration`` form (``15m`` → ``15m0s``), as cozystack-api's
  typed client does, so a re-rendered HelmRelease compares equal to a stored one;
* an update carries the Application's ``metadata.resourceVersion`` onto the HelmRelease so a
  stale write fails with 409 at kube-apiserver instead of silently winning;
* an update keeps the live HelmRelease's sharding label, ``spec.suspend``, finalizers and owner
  references: none of them is part of the Application, and dropping them would resume suspended
  releases or strip Flux's finalizer.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Protocol

from shared.api import errors, selectors
from shared.api.durations import go_duration
from shared.api.errors import Cause
from shared.api.names import dns1035_label_error
from shared.api.rest import Column
from shared.bodies import JSON
from shared.schema.validation import apply_defaults, validate

GROUP = "apps.cozystack.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: Prefix of the HelmRelease label/annotation keys that carry the user's own labels/annotations.
LABEL_PREFIX = "apps.cozystack.io-"
KIND_LABEL = "apps.cozystack.io/application.kind"
GROUP_LABEL = "apps.cozystack.io/application.group"
NAME_LABEL = "apps.cozystack.io/application.name"

HR_GROUP = "helm.toolkit.fluxcd.io"
HR_VERSION = "v2"
HR_PLURAL = "helmreleases"
HR_KIND = "HelmRelease"
HR_API_VERSION = f"{HR_GROUP}/{HR_VERSION}"
#: (group, version, plural) of the backing resource, for kube clients.
HR_GVR = (HR_GROUP, HR_VERSION, HR_PLURAL)

#: The one values Secret every emitted HelmRelease reads (cluster-wide values injected by cozystack).
VALUES_SECRET = "cozystack-values"
#: Written at runtime by the flux shard operator; an update must not revert it.
SHARDING_LABEL = "sharding.fluxcd.io/key"

#: Helm release names are at most 53 characters, so the Application name gets what the prefix leaves.
MAX_RELEASE_NAME = 53
INTERVAL = "5m0s"
MAX_HISTORY = 5
DEFAULT_TIMEOUT = "10m0s"
RETRY_INTERVAL = "30s"
RETRY_STRATEGY = "RetryOnFailure"


class HelmDefinitionView(Protocol):
    """What translation needs to know about one accepted ApplicationDefinition.

    Read-only properties so that frozen dataclasses, pydantic models and plain objects all fit.
    """

    @property
    def kind(self) -> str: ...

    @property
    def plural(self) -> str: ...

    @property
    def singular(self) -> str: ...

    @property
    def prefix(self) -> str: ...

    @property
    def release_labels(self) -> dict[str, str]: ...

    @property
    def chart_ref(self) -> dict[str, str]:
        """``kind``, ``name``, ``namespace`` and optionally ``apiVersion``."""
        ...

    @property
    def install_timeout(self) -> str | None: ...

    @property
    def upgrade_timeout(self) -> str | None: ...

    @property
    def disable_wait(self) -> bool: ...

    @property
    def wait_strategy(self) -> str | None: ...

    @property
    def health_check_exprs(self) -> list[dict[str, Any]] | None: ...

    @property
    def schema(self) -> dict[str, Any]:
        """The parsed openAPISchema of ``.spec``."""
        ...


# --------------------------------------------------------------------------------------- names


def release_name(defn: HelmDefinitionView, name: str) -> str:
    """HelmRelease name for Application ``name``."""
    return defn.prefix + name


def application_name(defn: HelmDefinitionView, release: str) -> str | None:
    """Application name for HelmRelease ``release``, or None if the name lacks the prefix."""
    if not release.startswith(defn.prefix):
        return None
    name = release[len(defn.prefix) :]
    return name or None


def label_selector_for(defn: HelmDefinitionView) -> str:
    """Label selector matching every HelmRelease that backs an Application of this kind."""
    return f"{KIND_LABEL}={defn.kind},{GROUP_LABEL}={GROUP}"


def translate_user_selector_key(key: str) -> str:
    """HelmRelease label key under which a user's label ``key`` is stored."""
    return LABEL_PREFIX + key


def is_application_release(defn: HelmDefinitionView, hr: Mapping[str, Any]) -> bool:
    """Whether ``hr`` carries the kind and group labels of this definition."""
    labels = (hr.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(KIND_LABEL) == defn.kind and labels.get(GROUP_LABEL) == GROUP)


def _canonical(text: str) -> str:
    """A live object's duration in canonical form; anything unparsable compares as itself."""
    try:
        return go_duration(text)
    except ValueError:
        return text


def _timeouts(defn: HelmDefinitionView) -> tuple[str, str]:
    """(install, upgrade) timeouts.

    The install annotation sets both; the upgrade annotation then overrides only the upgrade
    timeout, so a kind can have an asymmetric budget (cozystack-api's precedence).
    """
    install = defn.install_timeout or DEFAULT_TIMEOUT
    upgrade = defn.upgrade_timeout or defn.install_timeout or DEFAULT_TIMEOUT
    return go_duration(install), go_duration(upgrade)


# -------------------------------------------------------------------------------- validation

def _metadata_causes(defn: HelmDefinitionView, meta: Mapping[str, Any], check_name: bool) -> list[Cause]:
    causes: list[Cause] = []
    name = meta.get("name")
    if check_name:
        if not isinstance(name, str) or not name:
            causes.append(
                errors.field_cause("metadata.name", "Required value: name is required", "FieldValueRequired")
            )
        else:
            budget = MAX_RELEASE_NAME - len(defn.prefix)
            why = dns1035_label_error(name, max_len=budget)
            if why is not None:
                if why.startswith("must be no more than"):
                    why += f" (release prefix {defn.prefix!r})"
                causes.append(errors.field_cause("metadata.name", f'Invalid value: "{name}": {why}'))
    for field, check_values in (("labels", True), ("annotations", False)):
        entries = meta.get(field)
        if entries is None:
            continue
        path = f"metadata.{field}"
        if not isinstance(entries, dict):
            causes.append(
                errors.field_cause(path, "Invalid value: must be a map of strings", "FieldValueTypeInvalid")
            )
            continue
        for key, value in entries.items():
            # The user's key is stored behind LABEL_PREFIX, so it is the *translated* key that
            # must be valid; checking here names the key the user wrote, not the translated one.
            why = selectors.label_key_error(translate_user_selector_key(str(key)))
            if why is not None:
                stored = translate_user_selector_key(str(key))
                causes.append(
                    errors.field_cause(path, f'Invalid value: "{key}": {why} (stored as "{stored}")')
                )
            if not isinstance(value, str):
                causes.append(
                    errors.field_cause(
                        path, f'Invalid value: "{key}": value must be a string', "FieldValueTypeInvalid"
                    )
                )
            elif check_values and (value_error := selectors.label_value_error(value)) is not None:
                causes.append(errors.field_cause(path, f"Invalid value: {value_error}"))
    return causes


def validate_application(
    defn: HelmDefinitionView, app: Mapping[str, Any], *, check_name: bool = True
) -> None:
    """Reject an Application that must not be written, with the Status kubectl should show.

    Order: metadata (422), spec not an object (400), top-level ``_`` keys (400, these are
    reserved for values cozystack injects), then the schema, checked *after* defaulting so that a
    property the user omitted but the schema defaults is not reported as missing (422, one cause
    per field path).  ``check_name=False`` is for updates: names are immutable, and an object that
    exists must stay editable even if the naming rules tightened since it was created.
    """
    meta = app.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise errors.bad_request("metadata must be an object")
    name = str(meta.get("name") or "")
    causes = _metadata_causes(defn, meta, check_name)
    if causes:
        raise errors.invalid(GROUP, defn.kind, name, causes)
    spec = app.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise errors.bad_request(f"{defn.kind}.spec must be an object, not {_json_type(spec)}")
    reserved = sorted(k for k in spec if isinstance(k, str) and k.startswith("_"))
    if reserved:
        raise errors.bad_request(
            f'spec key "{reserved[0]}" is reserved: top-level keys starting with "_" are set by the platform'
        )
    schema = defn.schema
    if schema:
        causes = validate(schema, apply_defaults(schema, spec), path="spec")
        if causes:
            raise errors.invalid(GROUP, defn.kind, name, causes)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "null" if value is None else type(value).__name__


# ---------------------------------------------------------------------- Application → HelmRelease


def _chart_ref(defn: HelmDefinitionView) -> dict[str, str]:
    """The definition's chartRef with only the fields the HelmRelease CRD has (apiVersion if set)."""
    ref = {k: defn.chart_ref[k] for k in ("kind", "name", "namespace") if defn.chart_ref.get(k)}
    if defn.chart_ref.get("apiVersion"):
        ref["apiVersion"] = defn.chart_ref["apiVersion"]
    return ref


def _prefixed(entries: Mapping[str, Any] | None) -> dict[str, str]:
    return {LABEL_PREFIX + str(k): str(v) for k, v in (entries or {}).items()}


def _action(defn: HelmDefinitionView, timeout: str) -> JSON:
    out: JSON = {"timeout": timeout, "strategy": {"name": RETRY_STRATEGY, "retryInterval": RETRY_INTERVAL}}
    if defn.disable_wait:
        out["disableWait"] = True
    return out


def to_helmrelease(
    defn: HelmDefinitionView, app: Mapping[str, Any], existing: Mapping[str, Any] | None = None
) -> JSON:
    """The HelmRelease that backs ``app`` (call :func:`validate_application` first).

    With ``existing`` (an update) the result is a full replacement for a PUT: the Application's
    ``metadata.resourceVersion`` is carried so kube-apiserver refuses a stale write with 409
    (cozystack-api retries instead, so the last writer wins); an Application without one gets the
    live object's, i.e. an unconditional update, as Kubernetes allows.  The live sharding label,
    ``spec.suspend``, finalizers and owner references are kept: they belong to controllers, not
    to the Application.  Without ``existing`` (a create) no resourceVersion is set.
    """
    meta = app.get("metadata") or {}
    name = str(meta.get("name") or "")
    labels: dict[str, str] = dict(defn.release_labels)
    labels.update(_prefixed(meta.get("labels")))
    labels[KIND_LABEL] = defn.kind
    labels[GROUP_LABEL] = GROUP
    labels[NAME_LABEL] = name

    hr_meta: JSON = {"name": release_name(defn, name), "namespace": meta.get("namespace")}
    if existing is not None:
        live_meta = existing.get("metadata") or {}
        live_labels = live_meta.get("labels") or {}
        if SHARDING_LABEL in live_labels:
            labels[SHARDING_LABEL] = live_labels[SHARDING_LABEL]
        rv = meta.get("resourceVersion") or live_meta.get("resourceVersion")
        if rv:
            hr_meta["resourceVersion"] = rv
        for keep in ("finalizers", "ownerReferences"):
            if live_meta.get(keep):
                hr_meta[keep] = copy.deepcopy(live_meta[keep])
    hr_meta["labels"] = labels
    annotations = _prefixed(meta.get("annotations"))
    if annotations:
        hr_meta["annotations"] = annotations

    install_timeout, upgrade_timeout = _timeouts(defn)
    spec = app.get("spec")
    spec_out: JSON = {
        "chartRef": _chart_ref(defn),
        "interval": INTERVAL,
        "maxHistory": MAX_HISTORY,
        "install": _action(defn, install_timeout),
        "upgrade": _action(defn, upgrade_timeout),
        "valuesFrom": [{"kind": "Secret", "name": VALUES_SECRET}],
        # Values are stored as given: defaults are applied on read, so a later schema default
        # change reaches every instance without rewriting it.
        "values": copy.deepcopy(spec) if isinstance(spec, dict) else {},
    }
    if defn.health_check_exprs:
        spec_out["healthCheckExprs"] = copy.deepcopy(defn.health_check_exprs)
    if defn.wait_strategy:
        spec_out["waitStrategy"] = {"name": defn.wait_strategy}
    elif defn.health_check_exprs:
        # Flux evaluates healthCheckExprs only under the poller strategy.
        spec_out["waitStrategy"] = {"name": "poller"}
    if existing is not None and (existing.get("spec") or {}).get("suspend"):
        spec_out["suspend"] = True
    return {"apiVersion": HR_API_VERSION, "kind": HR_KIND, "metadata": hr_meta, "spec": spec_out}


# ---------------------------------------------------------------------- HelmRelease → Application


def _deprefixed(entries: Mapping[str, Any] | None) -> dict[str, str]:
    return {k[len(LABEL_PREFIX) :]: v for k, v in (entries or {}).items() if k.startswith(LABEL_PREFIX)}


def from_helmrelease(defn: HelmDefinitionView, hr: Mapping[str, Any]) -> JSON | None:
    """The Application a HelmRelease represents, or None if it is not one of this kind.

    A HelmRelease without this definition's kind and group labels, or whose name lacks the
    prefix (it could not be addressed by name), is not an Application.  ``spec`` hides the
    top-level ``_`` keys the platform injects and has schema defaults applied.
    """
    if not is_application_release(defn, hr):
        return None
    meta = hr.get("metadata") or {}
    name = application_name(defn, str(meta.get("name") or ""))
    if name is None:
        return None
    app_meta: JSON = {"name": name, "namespace": meta.get("namespace")}
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp"):
        if meta.get(key) is not None:
            app_meta[key] = meta[key]
    labels = _deprefixed(meta.get("labels"))
    if labels:
        app_meta["labels"] = labels
    annotations = _deprefixed(meta.get("annotations"))
    if annotations:
        app_meta["annotations"] = annotations

    hr_spec = hr.get("spec") or {}
    values = hr_spec.get("values")
    visible = (
        {k: copy.deepcopy(v) for k, v in values.items() if not k.startswith("_")}
        if isinstance(values, dict)
        else {}
    )
    spec = apply_defaults(defn.schema, visible) if defn.schema else visible

    hr_status = hr.get("status") or {}
    status: JSON = {}
    if hr_status.get("lastAttemptedRevision"):
        status["version"] = hr_status["lastAttemptedRevision"]
    conditions = [
        copy.deepcopy(c) for c in hr_status.get("conditions") or [] if c.get("type") in ("Ready", "Released")
    ]
    if conditions:
        status["conditions"] = conditions
    return {
        "apiVersion": API_VERSION,
        "kind": defn.kind,
        "metadata": app_meta,
        "spec": spec,
        "status": status,
    }


# ------------------------------------------------------------------------------------- Table

#: Table columns of every Application kind.  AGE has type "date": the shared Table renderer is
#: expected to turn the creationTimestamp cell into an age, as kubectl does for built-in kinds.
COLUMNS: tuple[Column, ...] = (
    Column("NAME", "string", "Name of the application", format="name"),
    Column("READY", "string", "Ready condition of the backing HelmRelease (True, False or Unknown)"),
    Column("AGE", "date", "Time since the application was created"),
    Column("VERSION", "string", "Chart revision Flux last attempted"),
)


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


# --------------------------------------------------------------------------------- reconciler


def rollout_patch(defn: HelmDefinitionView, hr: Mapping[str, Any]) -> JSON | None:
    """JSON merge patch bringing an existing HelmRelease in line with its definition, or None.

    Rolled out (SPEC §2 "Reconciler"): chartRef, replaced when kind/name/namespace differ (keys
    the new reference lacks are nulled, since a merge patch would otherwise keep them) with a
    legacy ``spec.chart`` removed (the CRD forbids both at once); ``valuesFrom`` forced to the
    one Secret; ``release.labels`` added or overwritten (other labels untouched); install/upgrade
    timeouts and ``disableWait`` per the definition's annotations.  Values, user labels, health
    checks and strategies are not touched.  The patch carries the HelmRelease's
    ``metadata.resourceVersion`` so it fails with 409 if the object changed since it was read;
    the caller re-reads and recomputes.  A HelmRelease of another kind yields None.
    """
    if not is_application_release(defn, hr):
        return None
    meta = hr.get("metadata") or {}
    spec = hr.get("spec") or {}
    spec_patch: JSON = {}

    want_ref = _chart_ref(defn)
    have_ref = spec.get("chartRef")
    if not isinstance(have_ref, dict) or any(
        have_ref.get(k) != want_ref.get(k) for k in ("kind", "name", "namespace")
    ):
        ref_patch: JSON = dict(want_ref)
        for stale in (have_ref or {}) if isinstance(have_ref, dict) else {}:
            ref_patch.setdefault(stale, None)
        spec_patch["chartRef"] = ref_patch
    if spec.get("chart") is not None:
        spec_patch["chart"] = None

    want_values_from = [{"kind": "Secret", "name": VALUES_SECRET}]
    if spec.get("valuesFrom") != want_values_from:
        spec_patch["valuesFrom"] = want_values_from

    for action, timeout in zip(("install", "upgrade"), _timeouts(defn), strict=True):
        have = spec.get(action) or {}
        action_patch: JSON = {}
        current = have.get("timeout")
        if not isinstance(current, str) or _canonical(current) != timeout:
            action_patch["timeout"] = timeout
        if defn.disable_wait and have.get("disableWait") is not True:
            action_patch["disableWait"] = True
        elif not defn.disable_wait and have.get("disableWait"):
            action_patch["disableWait"] = None
        if action_patch:
            spec_patch[action] = action_patch

    have_labels = meta.get("labels") or {}
    label_patch = {k: v for k, v in defn.release_labels.items() if have_labels.get(k) != v}

    if not spec_patch and not label_patch:
        return None
    patch: JSON = {}
    meta_patch: JSON = {}
    if meta.get("resourceVersion"):
        meta_patch["resourceVersion"] = meta["resourceVersion"]
    if label_patch:
        meta_patch["labels"] = label_patch
    if meta_patch:
        patch["metadata"] = meta_patch
    if spec_patch:
        patch["spec"] = spec_patch
    return patch
