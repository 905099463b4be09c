"""Whether an incoming Application may be written, and the Status kubectl shows when it may not.

Every check runs here, before anything is built, so a bad request never reaches a HelmRelease and
the error names what the user wrote (their label key, their spec path), not what it becomes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.admission import validate_with_schema_causes
from shared.api import errors, goformat, labels, ownership
from shared.api.errors import Cause
from shared.api.names import dns1035_label_error
from shared.bodies import JSON
from shared.schema.causes import not_an_object
from shared.schema.defaults import apply_defaults
from shared.schema.validation import validate

from .definition import HelmDefinitionView
from .names import MAX_RELEASE_NAME, user_selector_key
from .project import to_application


def validate_application(
    defn: HelmDefinitionView, app: Mapping[str, Any], *, group: str, live: Mapping[str, Any] | None = None,
    defaulted: JSON | None = None,
) -> None:
    """Reject an Application that must not be written, raising the matching ApiError.

    Order: top-level ``_`` keys (400, these are reserved for values cozystack injects), then
    metadata, a spec that is not an object and the schema together (422), checked *after* defaulting so that a
    property the user omitted but the schema defaults is not reported as missing (422, one cause
    per field path), then the schema's CEL rules (``x-kubernetes-validations``; on an update,
    transition rules compare with the spec read back from ``live``, the HelmRelease).  With
    ``live`` (an update) the name is not checked: names are immutable, and an object that exists
    must stay editable even if the naming rules tightened since it was created.  ``defaulted`` is the
    spec with the schema's defaults when the caller already has it (mutating admission defaulted it).
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
    reserved = sorted(k for k in spec if isinstance(k, str) and k.startswith("_"))
    if reserved:
        raise errors.bad_request(
            f'spec key "{reserved[0]}" is reserved: top-level keys starting with "_" are set by the platform'
        )
    schema = defn.schema
    if schema:
        if defaulted is None:
            defaulted = apply_defaults(schema, spec)
        old = _stored_spec(defn, live, group) if live is not None else None
        meta_causes += validate_with_schema_causes(defn.rules, validate(schema, defaulted, path="spec"), defaulted,
                                                   old, prior=meta_causes)
    if meta_causes:
        raise errors.invalid(group, defn.kind, name, meta_causes)


def _stored_spec(defn: HelmDefinitionView, live: Mapping[str, Any], group: str) -> JSON | None:
    """The stored spec as the rules' ``oldSelf`` sees it: read back from the HelmRelease (with defaults)."""
    spec = (to_application(defn, live, group=group) or {}).get("spec")
    return spec if isinstance(spec, dict) else None


def _name_causes(defn: HelmDefinitionView, meta: Mapping[str, Any]) -> list[Cause]:
    """The name must be a DNS-1035 label short enough that ``prefix + name`` is a release name."""
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return [errors.field_cause("metadata.name", "Required value: name is required", "FieldValueRequired")]
    why = dns1035_label_error(name, max_len=MAX_RELEASE_NAME - len(defn.prefix))
    if why is None:
        return []
    if why.startswith("must be no more than"):
        why += f" (release prefix {defn.prefix!r})"
    return [errors.field_cause("metadata.name", f"Invalid value: {goformat.quote(name)}: {why}")]

