"""Whether an incoming Application may be written, and the Status kubectl shows when it may not.

Every check runs here, before anything is built, so a bad request never reaches a Terraform and
the error names what the user wrote (their label key, their spec path), not what it becomes:
metadata (name, user labels and annotations as they will be stored), the spec's shape, unknown
keys, the schema after defaults and its CEL rules, the variable names the spec maps to, the runner-service-account
annotation and, last, the approve-plan command (decided by :mod:`.approval`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.admission import validate_with_schema_causes
from shared.api import errors, goformat, labels, ownership
from shared.api.errors import Cause
from shared.api.names import dns1035_label_error, dns1123_subdomain_error
from shared.bodies import JSON
from shared.schema.causes import not_an_object
from shared.schema.defaults import apply_defaults
from shared.schema.validation import validate

from . import approval
from .definition import TofuDefinitionView
from .names import MAX_TERRAFORM_NAME, RUNNER_SA_ANNOTATION, user_selector_key
from .project import to_application
from .variables import marshal_vars, variable_name, variable_name_error


def validate_application(
    defn: TofuDefinitionView, app: Mapping[str, Any], *, group: str, live: Mapping[str, Any] | None = None,
    defaulted: JSON | None = None,
) -> None:
    """Reject an Application that cannot become a valid Terraform, raising the matching ApiError: the
    ``validate`` of the Backend interface (docs/hybridpath), :func:`validated_variables` without its result."""
    validated_variables(defn, app, group=group, live=live, defaulted=defaulted)


def validated_variables(
    defn: TofuDefinitionView, app: Mapping[str, Any], *, group: str, live: Mapping[str, Any] | None = None,
    defaulted: JSON | None = None,
) -> list[JSON]:
    """Reject an Application that cannot become a valid Terraform, raising the matching ApiError; return
    the Terraform ``vars`` its spec becomes, which validation has to marshal anyway (:func:`.build.build`
    takes them rather than defaulting and marshalling the same spec again).

    Order: top-level ``_`` keys (400), then metadata, the spec and the runner annotation together
    (422, one cause per field path; a spec that is not an object is one), then the approval (422).  With
    ``live`` (an update) the name is not checked: names are immutable, and an object that exists
    must stay editable even if the naming rules tightened since it was created.  ``defaulted`` is the
    spec with the schema's defaults when the caller already has it (mutating admission defaulted it);
    defaulting each declared variable does not depend on the others, so the undeclared ones are left out
    after defaulting as well as before.
    """
    meta = app.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise errors.bad_request("metadata must be an object")
    name = str(meta.get("name") or "")
    # Metadata and spec causes are reported together, as kube-apiserver validates a custom resource.
    meta_causes = _name_causes(defn, meta) if live is None else []
    meta_causes += labels.label_and_annotation_causes(meta, user_selector_key)
    meta_causes += ownership.metadata_causes(meta)
    spec = app.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        not_object = validate_with_schema_causes(defn.rules, [not_an_object("spec", spec)], spec, prior=meta_causes)
        raise errors.invalid(group, defn.kind, name, [*meta_causes, *not_object])
    underscored = sorted(k for k in spec if k.startswith("_"))
    if underscored:
        raise errors.bad_request(f"spec keys starting with '_' are reserved: {', '.join(underscored)}")

    props = defn.schema.get("properties") or {}
    causes = [
        errors.field_cause(
            f"spec.{key}", f'unknown field "{key}": {defn.kind} declares no such variable', "FieldValueNotSupported"
        )
        for key in spec
        if key not in props
    ]
    if defaulted is None:
        defaulted = apply_defaults(defn.schema, {k: v for k, v in spec.items() if k in props})
    else:
        defaulted = {k: v for k, v in defaulted.items() if k in props}
    stored = _stored_spec(defn, live, group) if live is not None else None
    causes = validate_with_schema_causes(defn.rules, causes + validate(defn.schema, defaulted, "spec"), defaulted,
                                         stored, prior=meta_causes)
    tf_vars, variable_causes = _variables(defn, defaulted)
    causes += variable_causes
    causes += _runner_service_account_causes(defn, meta)
    if meta_causes or causes:
        raise errors.invalid(group, defn.kind, name, meta_causes + causes)
    approval.check_approval(defn, app, live, group=group, tf_vars=tf_vars)
    return tf_vars


def _stored_spec(defn: TofuDefinitionView, live: Mapping[str, Any], group: str) -> JSON | None:
    """The stored spec as the rules' ``oldSelf`` sees it: read back from the Terraform (with defaults)."""
    spec = (to_application(defn, live, group=group) or {}).get("spec")
    return spec if isinstance(spec, dict) else None


def _name_causes(defn: TofuDefinitionView, meta: Mapping[str, Any]) -> list[Cause]:
    """The name must be a DNS-1035 label short enough that ``prefix + name`` is a Terraform name."""
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return [errors.field_cause("metadata.name", "Required value: name is required", "FieldValueRequired")]
    why = dns1035_label_error(name, max_len=MAX_TERRAFORM_NAME - len(defn.prefix))
    if why is None:
        return []
    if why.startswith("must be no more than"):
        why += f" (Terraform name prefix {defn.prefix!r}, runner pod suffix \"-tf-runner\")"
    return [errors.field_cause("metadata.name", f"Invalid value: {goformat.quote(name)}: {why}")]


def _variables(defn: TofuDefinitionView, spec: JSON) -> tuple[list[JSON], list[Cause]]:
    """The Terraform ``vars`` the (defaulted) spec becomes, or why it cannot become any.

    Each key must map to a valid OpenTofu variable name, and no two keys to the same one.
    """
    causes = [
        errors.field_cause(f"spec.{key}", problem)
        for key in spec
        if (problem := variable_name_error(variable_name(key, defn.terraform.variable_naming)))
    ]
    if causes:
        return [], causes
    try:
        return marshal_vars(defn.schema, defn.terraform.variable_naming, spec), []
    except ValueError as exc:
        field, _, message = str(exc).partition(": ")
        return [], [errors.field_cause(field, message, "FieldValueDuplicate")]


def _runner_service_account_causes(defn: TofuDefinitionView, meta: Mapping[str, Any]) -> list[Cause]:
    """The runner-service-account override needs the definition's consent and a valid name."""
    annotations = meta.get("annotations")
    runner_sa = annotations.get(RUNNER_SA_ANNOTATION) if isinstance(annotations, Mapping) else None
    if runner_sa is None:
        return []
    field = f"metadata.annotations[{RUNNER_SA_ANNOTATION}]"
    if not defn.terraform.allow_service_account_override:
        return [errors.field_cause(
            field, f"{defn.kind} does not allow overriding the runner service account", "FieldValueForbidden"
        )]
    sa_error = dns1123_subdomain_error(str(runner_sa))
    return [errors.field_cause(field, sa_error)] if sa_error else []
