"""Query parameters of list, watch and write requests, parsed and validated as kube-apiserver does.

Malformed list/watch parameters are the client's 400; invalid write options are a 422 on the
``meta.k8s.io`` options kind (CreateOptions, UpdateOptions, PatchOptions, DeleteOptions), which is
what kubectl prints for built-in kinds too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from multidict import MultiMapping

from shared.api import errors, goformat, selectors
from shared.api.rest import ListOptions, WriteOptions

Query = MultiMapping[str]

_FIELD_VALIDATIONS = ("", "Ignore", "Warn", "Strict")


def bool_param(query: Query, name: str) -> bool:
    """A boolean query parameter; absent or empty is False, anything but true/false/1/0 a 400."""
    raw = query.get(name)
    if raw is None or raw == "":
        return False
    lowered = raw.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise errors.bad_request(f"{name}: invalid boolean value {raw!r}")


def _int_param(query: Query, name: str) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise errors.bad_request(f"{name}: invalid integer value {raw!r}") from exc
    if value < 0:
        raise errors.bad_request(f"{name}: must be non-negative, got {value}")
    return value


def parse_list_options(query: Query) -> ListOptions:
    """Parse and validate the query of a list or watch request (400 on anything malformed)."""
    limit = _int_param(query, "limit")
    return ListOptions(
        label_selector=selectors.render(selectors.parse_label_selector(query.get("labelSelector") or "")),
        field_selector=selectors.parse_field_selector(query.get("fieldSelector") or ""),
        limit=limit or None,
        continue_token=query.get("continue") or None,
        resource_version=query.get("resourceVersion") or None,
        timeout_seconds=_int_param(query, "timeoutSeconds"),
        allow_bookmarks=bool_param(query, "allowWatchBookmarks"),
    )


@dataclass(frozen=True)
class WriteQuery:
    """The write options as the query states them, before validation.

    Kept unvalidated because DELETE may add ``dryRun`` values in its body, and kube validates
    the query and the body together once the body is read.
    """

    dry_run: tuple[str, ...] = ()
    field_manager: str | None = None
    field_validation: str = ""

    @classmethod
    def from_query(cls, query: Query) -> WriteQuery:
        return cls(
            dry_run=tuple(query.getall("dryRun", [])),
            field_manager=query.get("fieldManager") or None,
            field_validation=query.get("fieldValidation") or "",
        )


def options_invalid(
    options_kind: str, field: str, message: str, reason: str = "FieldValueNotSupported"
) -> errors.ApiError:
    """The 422 kube-apiserver answers for invalid CreateOptions/UpdateOptions/PatchOptions/DeleteOptions."""
    return errors.invalid("meta.k8s.io", options_kind, "", [errors.field_cause(field, message, reason)])


def _dry_run(values: Iterable[object], options_kind: str) -> bool:
    values = list(values)
    bad = [v for v in values if v != "All"]
    if bad:
        shown = goformat.marshal(bad)
        raise options_invalid(options_kind, "dryRun", f'Unsupported value: {shown}: supported values: "All"')
    return bool(values)


def write_options(raw: WriteQuery, options_kind: str, extra_dry_run: Iterable[object] = ()) -> WriteOptions:
    """Validate ``dryRun``, ``fieldManager`` and ``fieldValidation`` of a write (422 when invalid, as kube)."""
    dry_run = _dry_run([*raw.dry_run, *extra_dry_run], options_kind)
    manager = raw.field_manager
    if manager is not None and (len(manager) > 128 or not manager.isprintable()):
        raise options_invalid(
            options_kind,
            "fieldManager",
            "Invalid value: must be at most 128 printable characters",
            "FieldValueInvalid",
        )
    if raw.field_validation not in _FIELD_VALIDATIONS:
        raise options_invalid(
            options_kind,
            "fieldValidation",
            f'Unsupported value: "{raw.field_validation}": supported values: "Ignore", "Strict", "Warn"',
        )
    return WriteOptions(dry_run=dry_run, field_manager=manager, manager=manager or "",
                        field_validation=raw.field_validation)
