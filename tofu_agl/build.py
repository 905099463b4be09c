"""Application -> Terraform (SPEC §3): the object tofu-controller runs for one Application.

A pure function of plain JSON-shaped data, called after :mod:`.validate` has accepted the
Application.  Decisions worth knowing:

* **Variables are the defaulted spec.**  The module receives exactly what ``kubectl get -o yaml``
  shows, so a default added to the schema is visible and applied in the same place (the
  marshalling itself is :func:`tofu_agl.variables.marshal_vars`).
* **All user annotations are kept**, prefixed, including the two command annotations
  (approve-plan, runner-service-account): reading back must show the user what they applied, and
  :mod:`.approval` compares against the recorded value to tell a *new* approval from a re-applied
  manifest.  ``spec.approvePlan`` itself is decided by :mod:`.approval`.
* **State is per instance, always** (see :func:`state_backend_config`): a definition's
  ``backendConfig`` without ``secretSuffix`` (or ``customConfiguration``) gets the Terraform's name
  as its suffix, which is what tofu-controller uses without a backendConfig; with none,
  tofu-controller's own default already is per instance.  Acceptance refuses a suffix shared by
  every instance (:func:`tofu_agl.definition.state_suffix_problem`).
* **An update keeps what is not the Application's** (see :func:`_keep_live`): the state location
  (``workspace``, ``backendConfig``: changing them would point the instance at different, usually
  empty, state and plan to re-create everything), the sharding label, ``spec.suspend``,
  tofu-controller's finalizer and foreign annotations; and it carries a resourceVersion so a
  stale write fails with 409.
* **The Application's own finalizers and ownerReferences are the Terraform's**
  (:mod:`shared.api.ownership`), so kube-apiserver holds a deletion and a cluster's garbage
  collector deletes the Application with its owner, as for a custom resource.

The Terraform settings a definition controls (:func:`definition_fields`) are public because
:mod:`.rollout` brings existing Terraforms to exactly them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.api import ownership
from shared.api.fieldmanager import to_annotation
from shared.api.rollout import definition_labels
from shared.bodies import JSON, clone
from shared.client.fence import FENCE_LABEL
from shared.schema.defaults import apply_defaults

from . import approval
from .definition import (
    CUSTOM_CONFIGURATION,
    SECRET_SUFFIX,
    TofuDefinitionView,
    placeholder_values,
    render_template,
)
from .names import (
    CONTROLLER_FINALIZERS,
    GROUP_LABEL,
    IDENTITY_LABELS,
    KIND_LABEL,
    LABEL_PREFIX,
    MANAGED_FIELDS_ANNOTATION,
    NAME_LABEL,
    RUNNER_SA_ANNOTATION,
    SHARDING_LABEL,
    TF_API_VERSION,
    TF_KIND,
    backing_name,
    fence_name,
    user_selector_key,
)
from .variables import marshal_vars

#: Live spec fields an operator sets directly (``tfctl suspend``): an update must not resume a
#: suspended instance.
OPERATOR_SPEC = ("suspend",)
#: Live spec fields that locate an instance's state: never changed once the Terraform exists.
STATE_LOCATION = ("workspace", "backendConfig")


def build(
    defn: TofuDefinitionView, app: Mapping[str, Any], *, group: str, live: Mapping[str, Any] | None = None,
    tf_vars: list[JSON] | None = None,
) -> JSON:
    """The Terraform that backs ``app`` in ``group``.

    With ``live`` (an update) the result is a full replacement for a PUT that keeps what belongs
    to the live object (see :func:`_keep_live`) and a still-valid approval.  Without ``live`` (a
    create) no resourceVersion is set.  ``tf_vars`` are the variables :func:`.validate.validated_variables`
    returned for ``app``; without them they are made here, from the spec with the schema's defaults.
    """
    meta = app.get("metadata") or {}
    name = str(meta.get("name") or "")
    namespace = str(meta.get("namespace") or "")
    if tf_vars is None:
        spec_in = app.get("spec")
        defaulted = apply_defaults(defn.schema, spec_in if isinstance(spec_in, dict) else {})
        tf_vars = marshal_vars(defn.schema, defn.terraform.variable_naming, defaulted)
    user_annotations = _str_map(meta.get("annotations"))

    labels = definition_labels(defn.release_labels, reserved=IDENTITY_LABELS, user_prefix=LABEL_PREFIX)
    labels.update(_prefixed(meta.get("labels")))
    labels.update({KIND_LABEL: defn.kind, GROUP_LABEL: group, NAME_LABEL: name})
    tf_meta: JSON = {"name": backing_name(defn, name), "namespace": namespace, "labels": labels}
    annotations = _prefixed(user_annotations) if user_annotations else {}
    managed = to_annotation(meta.get("managedFields"))
    if managed is not None:
        annotations[MANAGED_FIELDS_ANNOTATION] = managed
    if annotations:
        tf_meta["annotations"] = annotations
    ownership.to_backing(meta, tf_meta, CONTROLLER_FINALIZERS,
                         None if live is None else live.get("metadata") or {})

    spec = definition_fields(defn, name, namespace, user_annotations)
    spec["approvePlan"] = approval.approve_plan(defn, app, live, tf_vars)
    spec["vars"] = tf_vars
    tf: JSON = {"apiVersion": TF_API_VERSION, "kind": TF_KIND, "metadata": tf_meta, "spec": spec}
    if live is not None:
        _keep_live(tf, meta, live)
    return tf


def definition_fields(
    defn: TofuDefinitionView,
    app_name: str,
    namespace: str,
    user_annotations: Mapping[str, str],
    *,
    terraform_name: str | None = None,
) -> JSON:
    """Terraform spec fields copied from the definition (unset ones omitted, never written as null).

    ``user_annotations`` (unprefixed) matter for the runner service account: an instance's
    override is honoured only while the definition allows overrides.  ``terraform_name`` is the
    name of the Terraform these fields are for (default: the one :func:`backing_name` gives now),
    the per-instance state suffix of :func:`state_backend_config`; :mod:`.rollout` passes an existing
    Terraform's own name, which a later prefix change does not rename.
    """
    tf_name = backing_name(defn, app_name) if terraform_name is None else terraform_name
    fields: JSON = {
        "sourceRef": clone(defn.terraform.source_ref.as_ref()),
        "path": defn.terraform.path,
        "interval": defn.terraform.interval,
        "retryInterval": defn.terraform.retry_interval,
        "workspace": defn.terraform.workspace,
        "serviceAccountName": _runner_service_account(defn, user_annotations),
        "runnerPodTemplate": clone(defn.terraform.runner_pod_template),
        "backendConfig": state_backend_config(defn, tf_name, app_name, namespace),
        "storeReadablePlan": defn.terraform.store_readable_plan,
        "varsFrom": clone(defn.terraform.vars_from),
        "destroyResourcesOnDeletion": defn.terraform.destroy_resources_on_deletion,
        "writeOutputsToSecret": _outputs_secret(defn, app_name, namespace),
    }
    return {k: v for k, v in fields.items() if v is not None}


def state_backend_config(defn: TofuDefinitionView, terraform_name: str, app_name: str, namespace: str) -> JSON | None:
    """``spec.backendConfig`` for one Terraform: the definition's, with its state made per instance.

    tofu-controller stores state in the Secret ``tfstate-<workspace>-<secretSuffix>`` of the
    Terraform's namespace.  Without a backendConfig it uses the Terraform's name as the suffix, so
    none is emitted; with one it writes ``secretSuffix`` as given, and an omitted one makes ``tofu
    init`` fail (``tfstate-default-`` is no Secret name).  So a backendConfig without a suffix gets
    ``terraform_name``, and a templated one (acceptance lets only ``{{ .name }}`` templates through)
    is rendered for this Application.  With a ``customConfiguration`` tofu-controller ignores the
    suffix: the backendConfig is passed through untouched.
    """
    given = defn.terraform.backend_config
    if given is None:
        return None
    out: JSON = clone(given)
    if out.get(CUSTOM_CONFIGURATION):
        return out
    template = out.get(SECRET_SUFFIX)
    if template:
        out[SECRET_SUFFIX] = render_template(str(template), placeholder_values(app_name, namespace, defn.kind))
    else:
        out[SECRET_SUFFIX] = terraform_name
    return out


def fence(defn: TofuDefinitionView, *, group: str) -> JSON:
    """The kind's read fence (:mod:`shared.client.fence`): a suspended Terraform, which
    tofu-controller leaves alone, in the kind's watched selection but outside its backing selector."""
    return {
        "apiVersion": TF_API_VERSION,
        "kind": TF_KIND,
        "metadata": {"name": fence_name(defn),
                     "labels": {KIND_LABEL: defn.kind, GROUP_LABEL: group, FENCE_LABEL: "true"}},
        "spec": {"suspend": True, "interval": "24h0m0s", "path": "./read-fence",
                 "sourceRef": {"kind": "GitRepository", "name": "read-fence"}},
    }


def _keep_live(tf: JSON, app_meta: Mapping[str, Any], live: Mapping[str, Any]) -> None:
    """Carry onto the rebuilt ``tf`` what an update must not lose from the ``live`` Terraform.

    The Application's ``metadata.resourceVersion`` is carried so kube-apiserver refuses a stale
    write with 409; an Application without one gets the live object's, i.e. an unconditional
    update, as Kubernetes allows.  The state location, the sharding label, ``spec.suspend`` and
    annotations that are not the user's (e.g. Flux's reconcile request) belong to controllers and
    operators, not to the Application (tofu-controller's finalizer is kept by
    :func:`shared.api.ownership.to_backing`).
    """
    live_meta = live.get("metadata") or {}
    live_spec = live.get("spec") or {}
    meta, spec = tf["metadata"], tf["spec"]
    rv = app_meta.get("resourceVersion") or live_meta.get("resourceVersion")
    if rv:
        meta["resourceVersion"] = rv
    live_labels = live_meta.get("labels") or {}
    if SHARDING_LABEL in live_labels:
        meta["labels"][SHARDING_LABEL] = live_labels[SHARDING_LABEL]
    foreign = {k: v for k, v in (live_meta.get("annotations") or {}).items()
               if not k.startswith(LABEL_PREFIX) and k != MANAGED_FIELDS_ANNOTATION}
    if foreign:
        meta["annotations"] = {**foreign, **(meta.get("annotations") or {})}
    for key in STATE_LOCATION:
        spec.pop(key, None)
        if live_spec.get(key) is not None:
            spec[key] = clone(live_spec[key])
    for key in OPERATOR_SPEC:
        if key in live_spec:
            spec[key] = clone(live_spec[key])


def _runner_service_account(defn: TofuDefinitionView, user_annotations: Mapping[str, str]) -> str | None:
    if defn.terraform.allow_service_account_override and user_annotations.get(RUNNER_SA_ANNOTATION):
        return user_annotations[RUNNER_SA_ANNOTATION]
    return defn.terraform.service_account_name


def _outputs_secret(defn: TofuDefinitionView, name: str, namespace: str) -> JSON | None:
    """``writeOutputsToSecret`` with the name template rendered for one Application."""
    wots = defn.terraform.write_outputs_to_secret
    if wots is None:
        return None
    out: JSON = {"name": defn.render_outputs_secret_name(name, namespace, defn.kind)}
    fields = _outputs_fields(wots)
    for key in ("outputs", "labels", "annotations"):
        if fields.get(key) is not None:
            out[key] = clone(fields[key])
    return out


def _outputs_fields(wots: Any) -> Mapping[str, Any]:
    """The definition's outputs-Secret settings as JSON, whether given as a mapping or a model."""
    dump = getattr(wots, "model_dump", None)
    if callable(dump):
        dumped = dump(by_alias=True, exclude_none=True, mode="json")
        return dumped if isinstance(dumped, dict) else {}
    return wots if isinstance(wots, Mapping) else {}


def _str_map(values: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in values.items()} if isinstance(values, dict) else {}


def _prefixed(values: Any) -> dict[str, str]:
    return {user_selector_key(k): v for k, v in _str_map(values).items()}
