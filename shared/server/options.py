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


def query_bool(query: Query, name: str) -> bool | None:
    """A boolean query parameter as kube-apiserver converts one: None when absent; False for ``0`` and ``false`` in
    any case; True for anything else, the empty string included (apimachinery's ``Convert_Slice_string_To_bool``)."""
    values = query.getall(name, [])
    if not values:
        return None
    return not (values[0] == "0" or values[0].casefold() == "false")


def bool_param(query: Query, name: str) -> bool:
    """A boolean query parameter, False when absent (:func:`query_bool`)."""
    return bool(query_bool(query, name))


def _int_param(query: Query, name: str) -> int | None:
    """An integer query parameter, None when absent; present, it must be what Go's ``strconv.ParseInt`` reads, or
    the request is kube-apiserver's 400 in Go's words (an empty value too)."""
    values = query.getall(name, [])
    if not values:
        return None
    try:
        return goformat.parse_int64(values[0])
    except ValueError as exc:
        raise errors.bad_request(str(exc)) from None


def parse_list_options(query: Query, *, watch: bool = False) -> ListOptions:
    """Parse and validate the query of a list, watch or deletecollection in kube-apiserver's order: the numbers,
    the selectors' syntax (400), the options together (422 on ``ListOptions``), then the selected fields (400)."""
    timeout_seconds = _int_param(query, "timeoutSeconds")
    limit = _int_param(query, "limit")
    label_selector = selectors.parse_label_selector(query.get("labelSelector") or "")
    field_terms = selectors.parse_field_terms(query.get("fieldSelector") or "")
    options = ListOptions(
        label_selector=selectors.render(label_selector),
        field_selector=field_terms,
        limit=limit if limit is not None and limit > 0 else None,
        continue_token=query.get("continue") or None,
        resource_version=query.get("resourceVersion") or None,
        timeout_seconds=timeout_seconds,
        allow_bookmarks=bool_param(query, "allowWatchBookmarks"),
    )
    causes = list_options_causes(options, watch=watch, match=query.get("resourceVersionMatch") or "",
                                 send_initial_events=query_bool(query, "sendInitialEvents"))
    if causes:
        raise errors.invalid("meta.k8s.io", "ListOptions", "", causes)
    selectors.check_supported_fields(field_terms)
    return options


def list_options_causes(options: ListOptions, *, watch: bool, match: str,
                        send_initial_events: bool | None) -> list[errors.Cause]:
    """What kube-apiserver's ``ValidateListOptions`` refuses, with its WatchList feature on (as in v1.35): the
    combinations of ``resourceVersionMatch``, ``resourceVersion``, ``continue`` and ``sendInitialEvents``."""
    causes: list[errors.Cause] = []

    def forbidden(why: str, field: str = "resourceVersionMatch") -> None:
        causes.append(errors.field_cause(field, f"Forbidden: {why}", "FieldValueForbidden"))

    def not_supported(supported: tuple[str, ...]) -> None:
        shown = ", ".join(goformat.quote(value) for value in supported)
        why = f"Unsupported value: {goformat.quote(match)}: supported values: {shown}"
        causes.append(errors.field_cause("resourceVersionMatch", why, "FieldValueNotSupported"))

    if watch:
        if send_initial_events is not None and match != "NotOlderThan":
            forbidden("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        if match:
            if send_initial_events is None:
                forbidden("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
            if match != "NotOlderThan":
                not_supported(("NotOlderThan",))
            if options.continue_token:
                forbidden("resourceVersionMatch is forbidden when continue is provided")
        return causes
    if match:
        if not options.resource_version:
            forbidden("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if options.continue_token:
            forbidden("resourceVersionMatch is forbidden when continue is provided")
        if match not in ("Exact", "NotOlderThan"):
            not_supported(("Exact", "NotOlderThan", ""))
        if match == "Exact" and options.resource_version == "0":
            forbidden('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
    if send_initial_events is not None:
        forbidden("sendInitialEvents is forbidden for list", "sendInitialEvents")
    return causes


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
