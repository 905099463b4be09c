"""``fieldValidation`` of a write: duplicate and unknown fields, answered as kube-apiserver answers for a
custom resource with the same schema (``Strict`` refuses, ``Warn`` -- the default -- warns and keeps the last
duplicate / drops the unknown field, ``Ignore`` does so silently), and the typed check of an apply patch,
which fails whatever the mode.  Checked against kube-apiserver in tests/contract/test_field_management.py.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.admission.cluster import add_warning
from shared.api import errors, goformat
from shared.bodies import JSON
from shared.schema.pruning import prune_unknown, unknown_fields
from shared.server.call import Call


def known_fields(call: Call, obj: JSON, patched_view: Callable[[], JSON] | None = None,
                  duplicates: list[str] | None = None) -> JSON:
    """``obj`` without the fields its schema does not declare, as ``fieldValidation`` says for a
    custom resource: Strict refuses them (400 for a body, 422 naming the patched object for a
    patch, as kube), Warn (the default) drops each with a warning, Ignore drops them silently.
    ``patched_view`` is the patched object as a custom resource would hold it (defaults filled in)."""
    info = call.storage.info
    unknown = unknown_fields(info.schema, obj)
    repeated = duplicates or []
    if not unknown and not repeated:
        return obj
    mode = call.info.write_options.field_validation or "Warn"
    problems = [f'duplicate field "{path}"' for path in repeated] + [f'unknown field "{path}"' for path in unknown]
    if mode == "Strict":
        listed = ", ".join(problems)
        if patched_view is not None:
            raise strict_patch_error(patched_view(), f"strict decoding error: {listed}")
        raise errors.bad_request(f'{info.kind} in version "{info.version}" cannot be handled as a {info.kind}: '
                                 f"strict decoding error: {listed}")
    if mode == "Warn":
        for problem in problems:
            add_warning(problem)
    pruned: JSON = prune_unknown(info.schema, obj)
    return pruned


def strict_patch_error(patched: JSON, reason: str) -> errors.ApiError:
    """kube's 422 for a patch whose result has unknown fields: the patched object, as Go writes JSON."""
    shown = {k: v for k, v in patched.items() if not (k == "status" and not v)}
    quoted = goformat.quote(goformat.marshal(shown))
    message = f"Invalid value: {quoted}: {reason}"
    return errors.ApiError(422, "Invalid", f' "" is invalid: patch: {message}',
                           details={"causes": [{"reason": "FieldValueInvalid", "message": message, "field": "patch"}]})


def typed_config(call: Call, doc: JSON) -> None:
    """An apply configuration must fit the schema whatever ``fieldValidation`` says (kube answers 500)."""
    info = call.storage.info
    unknown = unknown_fields(info.schema, doc)
    if not unknown:
        return
    problems = [f".{path}: field not declared in schema" for path in unknown]
    detail = problems[0] if len(problems) == 1 else "errors:\n  " + "\n  ".join(problems)
    raise errors.ApiError(500, "", f"failed to create typed patch object ({call.namespace}/{call.name}; "
                                   f"{info.api_version}, Kind={info.kind}): {detail}")
