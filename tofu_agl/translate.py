"""Application ⇄ Terraform translation for Tofu-backed kinds (SPEC §3).

Pure functions: no I/O, no clients.  The storage layer calls :func:`validate_application` and
:func:`to_terraform` on writes and :func:`from_terraform` on reads; the reconciler calls
:func:`rollout_patch` when a definition changes.

Design decisions worth knowing:

* **Variables are the defaulted spec.**  The module receives exactly what ``kubectl get -o yaml``
  shows, so a default added to the schema is visible and applied in the same place.
* **Nested values are passed whole**, never flattened (tofu-controller writes ``vars`` to a
  tfvars JSON file, so lists and objects keep their HCL types).  Under ``snake_case`` naming the
  keys the *schema declares* are converted at every depth; keys of free-form maps
  (``additionalProperties``) are data, not names, and are left alone.  Reading back inverts the
  mapping through the same schema, so ``app -> tf -> app`` is the identity (plus defaults).
* **All user annotations are kept**, prefixed, including our two command annotations
  (approve-plan, runner-service-account): reading back must show the user what they applied, and
  the approval module compares against the recorded value to tell a *new* approval from a
  re-applied manifest.
* **Existing instances keep their state location**: ``workspace`` and ``backendConfig`` of an
  existing Terraform are never changed, by an update nor by a definition roll-out, because that
  would point the instance at different (usually empty) state and plan to re-create everything.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Protocol

from shared.api import errors
from shared.api.errors import Cause
from shared.api.names import dns1035_label_error, dns1123_subdomain_error
from shared.bodies import JSON
from shared.schema.validation import apply_defaults, validate
from tofu_agl import variables
from tofu_agl.status import pending_plan, project_status

DEFAULT_GROUP = "tofu.apps.cozystack.io"
VERSION = "v1alpha1"

#: User labels and annotations are stored on the Terraform under this prefix (as for Helm), so
#: they never collide with the controller's or ours and can be read back.
USER_PREFIX = "apps.cozystack.io-"
LABEL_KIND = "apps.cozystack.io/application.kind"
LABEL_GROUP = "apps.cozystack.io/application.group"
LABEL_NAME = "apps.cozystack.io/application.name"
#: Flux sharding label: owned by whoever operates the controllers, so an update keeps it.
SHARDING_LABEL = "sharding.fluxcd.io/key"

TF_GROUP = "infra.contrib.fluxcd.io"
TF_VERSION = "v1alpha2"
TF_PLURAL = "terraforms"
TF_KIND = "Terraform"
TF_API_VERSION = f"{TF_GROUP}/{TF_VERSION}"

APPROVE_ANNOTATION = "tofu.apps.cozystack.io/approve-plan"
RUNNER_SA_ANNOTATION = "tofu.apps.cozystack.io/runner-service-account"

AUTO = "auto"
MANUAL = "manual"
SNAKE_CASE = "snake_case"

#: tofu-controller runner pods are named ``<terraform name>-tf-runner`` and must stay a 63-char
#: DNS label, which leaves 53 characters for the Terraform name.
MAX_TERRAFORM_NAME = 53

#: Values the Terraform CRD (v0.16.5) defaults when a field is omitted; used to compare a live
#: object with the definition without seeing phantom differences.
CRD_DEFAULTS: JSON = {
    "serviceAccountName": "tf-runner",
    "storeReadablePlan": "none",
    "workspace": "default",
    "destroyResourcesOnDeletion": False,
}


class TofuDefinitionView(Protocol):
    """What translation needs from a TofuApplicationDefinition (read-only view)."""

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
    def schema(self) -> dict[str, Any]: ...
    @property
    def source_ref(self) -> dict[str, Any]: ...
    @property
    def path(self) -> str | None: ...
    @property
    def interval(self) -> str: ...
    @property
    def retry_interval(self) -> str | None: ...
    @property
    def approve_plan(self) -> str: ...
    @property
    def destroy_resources_on_deletion(self) -> bool | None: ...
    @property
    def write_outputs_to_secret(self) -> Any:
        """None, or ``{name: template, outputs?, labels?, annotations?}`` as a mapping or a model."""

    @property
    def variable_naming(self) -> str: ...
    @property
    def service_account_name(self) -> str | None: ...
    @property
    def allow_service_account_override(self) -> bool: ...
    @property
    def runner_pod_template(self) -> dict[str, Any] | None: ...
    @property
    def backend_config(self) -> dict[str, Any] | None: ...
    @property
    def workspace(self) -> str | None: ...
    @property
    def store_readable_plan(self) -> str | None: ...
    @property
    def vars_from(self) -> list[Any] | None: ...

    def render_outputs_secret_name(self, name: str, namespace: str, kind: str) -> str: ...


# --------------------------------------------------------------------------- helpers


def _dict(value: Any) -> JSON:
    return value if isinstance(value, dict) else {}


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _dict(value).items()}


def _prefixed(values: Any) -> dict[str, str]:
    return {USER_PREFIX + k: v for k, v in _str_map(values).items()}


def _unprefixed(values: Any) -> dict[str, str]:
    n = len(USER_PREFIX)
    return {k[n:]: v for k, v in _str_map(values).items() if k.startswith(USER_PREFIX) and len(k) > n}


def terraform_name(defn: TofuDefinitionView, name: str) -> str:
    """Name of the Terraform backing Application ``name``."""
    return defn.prefix + name


def application_name(defn: TofuDefinitionView, tf_name: str) -> str | None:
    """Name of the Application a Terraform backs, or None when the name lacks the prefix."""
    if not tf_name.startswith(defn.prefix) or len(tf_name) <= len(defn.prefix):
        return None
    return tf_name[len(defn.prefix) :]


def approve_command(defn: TofuDefinitionView, name: str, namespace: str) -> str:
    """The approval command up to ``=``; the plan id is appended by the status projection.

    ``--overwrite`` is included because after a first approval the annotation already exists and
    kubectl refuses to change it otherwise.
    """
    return f"kubectl annotate {defn.plural} {name} -n {namespace} --overwrite {APPROVE_ANNOTATION}="


# --------------------------------------------------------------------------- variables


def _properties(schema: JSON) -> JSON:
    return _dict(schema.get("properties"))


def _items_schema(schema: JSON) -> JSON:
    return _dict(schema.get("items"))


def _to_vars_value(value: Any, schema: JSON, snake: bool, path: str) -> Any:
    """Copy ``value``, renaming schema-declared object keys to snake_case when ``snake``.

    Walks ``properties`` and array ``items`` only — the same paths the definition's acceptance
    checks for name clashes (:func:`tofu_agl.variables.naming_problems`).  Keys of free-form maps
    and undeclared keys are kept; a clash among the resulting keys raises ValueError.
    """
    if isinstance(value, list):
        items = _items_schema(schema)
        return [_to_vars_value(v, items, snake, f"{path}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return copy.deepcopy(value)
    props = _properties(schema)
    out: JSON = {}
    for key, sub in value.items():
        if key in props:
            target = variables.to_snake_case(key) if snake else key
            child = _to_vars_value(sub, _dict(props[key]), snake, f"{path}.{key}")
        else:
            target, child = key, copy.deepcopy(sub)
        if target in out:
            raise ValueError(
                f'{path}.{key}: becomes "{target}" in the module input, which another key also uses'
            )
        out[target] = child
    return out


def _from_vars_value(value: Any, schema: JSON, snake: bool) -> Any:
    """Inverse of :func:`_to_vars_value` through the same schema."""
    if isinstance(value, list):
        items = _items_schema(schema)
        return [_from_vars_value(v, items, snake) for v in value]
    if not isinstance(value, dict):
        return copy.deepcopy(value)
    props = _properties(schema)
    declared: dict[str, str] = {}
    if snake:
        for prop in props:
            declared.setdefault(variables.to_snake_case(prop), prop)
    out: JSON = {}
    for key, sub in value.items():
        original = declared.get(key, key)
        if original in props:
            out[original] = _from_vars_value(sub, _dict(props[original]), snake)
        else:
            out[key] = copy.deepcopy(sub)
    return out


def marshal_vars(defn: TofuDefinitionView, spec: JSON) -> list[JSON]:
    """Terraform ``vars`` for an (already defaulted) Application spec, sorted by name.

    Raises ValueError when two keys would map onto the same name (validation reports it as 422).
    """
    snake = defn.variable_naming == SNAKE_CASE
    props = _properties(defn.schema)
    by_name: JSON = {}
    for key, value in spec.items():
        name = variables.variable_name(key, defn.variable_naming)
        if name in by_name:
            raise ValueError(f'spec.{key}: becomes variable "{name}", which another key also uses')
        by_name[name] = _to_vars_value(value, _dict(props.get(key)), snake, f"spec.{key}")
    return [{"name": name, "value": by_name[name]} for name in sorted(by_name)]


def unmarshal_vars(defn: TofuDefinitionView, tf_vars: list[Any] | None) -> JSON:
    """The Application spec encoded in Terraform ``vars`` (inverse of :func:`marshal_vars`).

    Variables fed from elsewhere (``valueFrom``) are not part of the spec and are skipped; a name
    the schema does not know is shown verbatim, so nothing written directly to the Terraform hides.
    """
    snake = defn.variable_naming == SNAKE_CASE
    props = _properties(defn.schema)
    declared = {variables.variable_name(p, defn.variable_naming): p for p in props}
    spec: JSON = {}
    for item in tf_vars or []:
        var_name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(var_name, str) or ("valueFrom" in item and "value" not in item):
            continue
        key: str = declared.get(var_name, var_name)
        spec[key] = _from_vars_value(item.get("value"), _dict(props.get(key)), snake)
    return spec


# --------------------------------------------------------------------------- validation


def validate_application(defn: TofuDefinitionView, app: JSON, group: str) -> None:
    """Reject an Application that cannot become a valid Terraform (400/422 ApiError)."""
    meta = _dict(app.get("metadata"))
    name = str(meta.get("name") or "")
    spec = app.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise errors.bad_request(f"spec of {defn.kind} {name!r} must be an object, got {type(spec).__name__}")
    underscored = sorted(k for k in spec if k.startswith("_"))
    if underscored:
        raise errors.bad_request(f"spec keys starting with '_' are reserved: {', '.join(underscored)}")

    causes: list[Cause] = []
    max_len = MAX_TERRAFORM_NAME - len(defn.prefix)
    name_error = dns1035_label_error(name, max_len)
    if name_error:
        causes.append(errors.field_cause("metadata.name", name_error))

    props = _properties(defn.schema)
    known: JSON = {}
    for key, value in spec.items():
        if key not in props:
            causes.append(
                errors.field_cause(
                    f"spec.{key}",
                    f'unknown field "{key}": {defn.kind} declares no such variable',
                    "FieldValueNotSupported",
                )
            )
        else:
            known[key] = value
    defaulted = apply_defaults(defn.schema, known)
    causes.extend(validate(defn.schema, defaulted, "spec"))
    if isinstance(defaulted, dict):
        causes.extend(_variable_causes(defn, defaulted))

    runner_sa = _str_map(meta.get("annotations")).get(RUNNER_SA_ANNOTATION)
    if runner_sa is not None:
        field = f"metadata.annotations[{RUNNER_SA_ANNOTATION}]"
        if not defn.allow_service_account_override:
            causes.append(
                errors.field_cause(
                    field,
                    f"{defn.kind} does not allow overriding the runner service account",
                    "FieldValueForbidden",
                )
            )
        else:
            sa_error = dns1123_subdomain_error(runner_sa)
            if sa_error:
                causes.append(errors.field_cause(field, sa_error))
    if causes:
        raise errors.invalid(group, defn.kind, name, causes)


def _variable_causes(defn: TofuDefinitionView, spec: JSON) -> list[Cause]:
    causes: list[Cause] = []
    for key in spec:
        problem = variables.variable_name_error(variables.variable_name(key, defn.variable_naming))
        if problem:
            causes.append(errors.field_cause(f"spec.{key}", problem))
    if not causes:
        try:
            marshal_vars(defn, spec)
        except ValueError as exc:
            field, _, message = str(exc).partition(": ")
            causes.append(errors.field_cause(field, message, "FieldValueDuplicate"))
    return causes


# --------------------------------------------------------------------------- Application -> Terraform


def _runner_service_account(defn: TofuDefinitionView, annotations: dict[str, str]) -> str | None:
    if defn.allow_service_account_override and annotations.get(RUNNER_SA_ANNOTATION):
        return annotations[RUNNER_SA_ANNOTATION]
    return defn.service_account_name


def _outputs_fields(wots: Any) -> JSON:
    """The definition's outputs-Secret settings as JSON, whether given as a mapping or a model."""
    dump = getattr(wots, "model_dump", None)
    if callable(dump):
        return _dict(dump(by_alias=True, exclude_none=True, mode="json"))
    return dict(wots) if isinstance(wots, Mapping) else {}


def _outputs_secret(defn: TofuDefinitionView, name: str, namespace: str) -> JSON | None:
    """``writeOutputsToSecret`` with the name template rendered for one Application."""
    wots = defn.write_outputs_to_secret
    if wots is None:
        return None
    fields = _outputs_fields(wots)
    out: JSON = {"name": defn.render_outputs_secret_name(name, namespace, defn.kind)}
    for key in ("outputs", "labels", "annotations"):
        if fields.get(key) is not None:
            out[key] = copy.deepcopy(fields[key])
    return out


def _definition_fields(
    defn: TofuDefinitionView, app_name: str, namespace: str, annotations: dict[str, str]
) -> JSON:
    """Spec fields copied from the definition (unset ones omitted, never written as null)."""
    fields: JSON = {
        "sourceRef": copy.deepcopy(defn.source_ref),
        "path": defn.path,
        "interval": defn.interval,
        "retryInterval": defn.retry_interval,
        "workspace": defn.workspace,
        "serviceAccountName": _runner_service_account(defn, annotations),
        "runnerPodTemplate": copy.deepcopy(defn.runner_pod_template),
        "backendConfig": copy.deepcopy(defn.backend_config),
        "storeReadablePlan": defn.store_readable_plan,
        "varsFrom": copy.deepcopy(defn.vars_from),
        "destroyResourcesOnDeletion": defn.destroy_resources_on_deletion,
        "writeOutputsToSecret": _outputs_secret(defn, app_name, namespace),
    }
    return {k: v for k, v in fields.items() if v is not None}


def _approve_plan(
    defn: TofuDefinitionView, approved_plan: str | None, existing: JSON | None, tf_vars: list[JSON]
) -> str:
    """``spec.approvePlan`` for a rebuilt Terraform.

    Manual mode writes only an id the user named now, or keeps an id already approved for the
    still-pending plan *if the variables did not change*: tofu-controller's plan ids derive from
    the source revision alone, so new variables at the same revision would get the same id and an
    old approval would silently apply a plan nobody saw.
    """
    if defn.approve_plan == AUTO:
        return AUTO
    if approved_plan:
        return approved_plan
    if existing is not None:
        current = _dict(existing.get("spec")).get("approvePlan") or ""
        pending = pending_plan(existing)
        if current and current != AUTO and current == pending and vars_equal(existing, tf_vars):
            return str(current)
    return ""


def vars_equal(existing: JSON, tf_vars: list[JSON]) -> bool:
    """Whether a live Terraform already carries ``tf_vars`` (an omitted value counts as null)."""

    def norm(items: Any) -> list[tuple[Any, Any]]:
        return [(i.get("name"), i.get("value")) for i in items or [] if isinstance(i, dict)]

    return norm(_dict(existing.get("spec")).get("vars")) == norm(tf_vars)


def to_terraform(
    defn: TofuDefinitionView,
    app: JSON,
    group: str,
    approved_plan: str | None = None,
    existing: JSON | None = None,
) -> JSON:
    """The Terraform object for a validated Application (create, or rebuild on update).

    ``approved_plan`` is the id :func:`tofu_agl.approval.check_approval` accepted.  ``existing`` is
    the live Terraform on update: its sharding label, ``workspace`` and ``backendConfig`` are kept
    (an instance never moves to different state), and a still-valid approval is kept.  Raises 422
    when ``approved_plan`` comes with changed variables (approve and edit in separate requests).
    """
    meta = _dict(app.get("metadata"))
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "")
    user_labels = _str_map(meta.get("labels"))
    user_annotations = _str_map(meta.get("annotations"))

    labels: dict[str, str] = dict(defn.release_labels)
    if existing is not None:
        live_labels = _str_map(_dict(existing.get("metadata")).get("labels"))
        if SHARDING_LABEL in live_labels:
            labels[SHARDING_LABEL] = live_labels[SHARDING_LABEL]
    labels.update(_prefixed(user_labels))
    labels.update({LABEL_KIND: defn.kind, LABEL_GROUP: group, LABEL_NAME: name})

    spec_in = app.get("spec") if isinstance(app.get("spec"), dict) else {}
    defaulted = apply_defaults(defn.schema, spec_in)
    tf_vars = marshal_vars(defn, defaulted)

    spec = _definition_fields(defn, name, namespace, user_annotations)
    if existing is not None:
        live_spec = _dict(existing.get("spec"))
        for field in ("workspace", "backendConfig"):
            spec.pop(field, None)
            if live_spec.get(field) is not None:
                spec[field] = copy.deepcopy(live_spec[field])
    manual = defn.approve_plan != AUTO
    if manual and approved_plan and existing is not None and not vars_equal(existing, tf_vars):
        # The id names a plan computed for the old variables; the new ones would get a new plan
        # with (most likely) the same id, which the approval would apply unseen.
        raise errors.invalid(
            group,
            defn.kind,
            name,
            [
                errors.field_cause(
                    f"metadata.annotations[{APPROVE_ANNOTATION}]",
                    f'cannot approve plan "{approved_plan}" in the same request that changes spec: '
                    "change the spec first, then approve the plan made for it",
                    "FieldValueForbidden",
                )
            ],
        )
    spec["approvePlan"] = _approve_plan(defn, approved_plan, existing, tf_vars)
    spec["vars"] = tf_vars

    metadata: JSON = {"name": terraform_name(defn, name), "namespace": namespace, "labels": labels}
    if user_annotations:
        metadata["annotations"] = _prefixed(user_annotations)
    return {"apiVersion": TF_API_VERSION, "kind": TF_KIND, "metadata": metadata, "spec": spec}


# --------------------------------------------------------------------------- Terraform -> Application


def is_application(tf: JSON, kind: str, group: str) -> bool:
    """Whether a Terraform carries the labels of an Application of ``kind`` in ``group``."""
    labels = _str_map(_dict(tf.get("metadata")).get("labels"))
    return labels.get(LABEL_KIND) == kind and labels.get(LABEL_GROUP) == group


def from_terraform(defn: TofuDefinitionView, tf: JSON, group: str) -> JSON | None:
    """The Application a Terraform represents, or None when it is not one of this kind."""
    meta = _dict(tf.get("metadata"))
    if not is_application(tf, defn.kind, group):
        return None
    name = application_name(defn, str(meta.get("name") or ""))
    if name is None:
        return None
    namespace = str(meta.get("namespace") or "")

    app_meta: JSON = {"name": name, "namespace": namespace}
    for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
        if meta.get(field) is not None:
            app_meta[field] = meta[field]
    labels = _unprefixed(meta.get("labels"))
    if labels:
        app_meta["labels"] = labels
    annotations = _unprefixed(meta.get("annotations"))
    if annotations:
        app_meta["annotations"] = annotations

    spec = apply_defaults(defn.schema, unmarshal_vars(defn, _dict(tf.get("spec")).get("vars")))
    return {
        "apiVersion": f"{group}/{VERSION}",
        "kind": defn.kind,
        "metadata": app_meta,
        "spec": spec,
        "status": project_status(tf, approve_command(defn, name, namespace)),
    }


# --------------------------------------------------------------------------- roll-out


def _merge_diff(live: Any, desired: Any) -> Any:
    """RFC 7386 patch turning ``live`` into ``desired`` (objects recursively, the rest replaced)."""
    if not isinstance(live, dict) or not isinstance(desired, dict):
        return copy.deepcopy(desired)
    patch: JSON = {}
    for key in live.keys() - desired.keys():
        patch[key] = None
    for key, value in desired.items():
        if key not in live:
            patch[key] = copy.deepcopy(value)
        elif live[key] != value:
            patch[key] = _merge_diff(live[key], value)
    return patch


#: How an omitted field reads: its CRD default, or for approvePlan "" (both mean "manual").
_UNSET_MEANS: JSON = {**CRD_DEFAULTS, "approvePlan": ""}


def _effective(field: str, value: Any) -> Any:
    return _UNSET_MEANS.get(field) if value is None else value


#: Fields a definition change rolls out to existing instances.
ROLLOUT_FIELDS = (
    "sourceRef",
    "path",
    "interval",
    "retryInterval",
    "approvePlan",
    "destroyResourcesOnDeletion",
    "writeOutputsToSecret",
    "runnerPodTemplate",
    "serviceAccountName",
    "storeReadablePlan",
    "varsFrom",
)
#: Fields that locate an instance's state: reported when they differ, never patched.
PINNED_FIELDS = ("workspace", "backendConfig")


def rollout_patch(defn: TofuDefinitionView, tf: JSON) -> tuple[JSON | None, list[str]]:
    """Merge patch bringing an existing Terraform in line with its (changed) definition.

    Returns ``(patch or None, pinned fields that differ)``.  ``workspace``/``backendConfig`` are
    never patched (the caller reports them on the definition's status).  Switching a definition
    from manual to auto makes the instances' pending plans apply: that is what "auto" means.
    Switching to manual keeps only an approval of the plan pending right now.  An instance's
    runner-service-account override is honoured only while the definition allows overrides.
    """
    meta = _dict(tf.get("metadata"))
    live_spec = _dict(tf.get("spec"))
    labels = _str_map(meta.get("labels"))
    name = labels.get(LABEL_NAME) or application_name(defn, str(meta.get("name") or "")) or ""
    namespace = str(meta.get("namespace") or "")
    user_annotations = _unprefixed(meta.get("annotations"))

    desired = _definition_fields(defn, name, namespace, user_annotations)
    if defn.approve_plan == AUTO:
        desired["approvePlan"] = AUTO
    else:
        current = live_spec.get("approvePlan") or ""
        keep = current and current != AUTO and current == pending_plan(tf)
        desired["approvePlan"] = current if keep else ""

    spec_patch: JSON = {}
    for field in ROLLOUT_FIELDS:
        want = desired.get(field)
        have = live_spec.get(field)
        if _effective(field, want) == _effective(field, have):
            continue
        spec_patch[field] = None if want is None else _merge_diff(have, want)

    differing = [f for f in PINNED_FIELDS if _effective(f, desired.get(f)) != _effective(f, live_spec.get(f))]

    patch: JSON = {}
    if spec_patch:
        patch["spec"] = spec_patch
    reserved = {LABEL_KIND, LABEL_GROUP, LABEL_NAME}
    label_patch = {
        k: v
        for k, v in defn.release_labels.items()
        if k not in reserved and not k.startswith(USER_PREFIX) and labels.get(k) != v
    }
    if label_patch:
        patch["metadata"] = {"labels": label_patch}
    return (patch or None), differing
