"""Query parameters of list, watch and write requests, parsed and validated as kube-apiserver does.

Malformed list/watch parameters are the client's 400; invalid write options are a 422 on the
``meta.k8s.io`` options kind (CreateOptions, UpdateOptions, PatchOptions, DeleteOptions), which is
what kubectl prints for built-in kinds too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from multidict import MultiDict, MultiMapping

from shared.api import errors, goformat, selectors
from shared.api.rest import ListOptions, WriteOptions

Query = MultiMapping[str]

_FIELD_VALIDATIONS = ("", "Ignore", "Warn", "Strict")
_PASSED_ON = ("gracePeriodSeconds", "orphanDependents", "propagationPolicy")
_DELETE_PARAMETERS = frozenset({*_PASSED_ON, "dryRun"})


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
        resource_version_match=query.get("resourceVersionMatch") or "",
        timeout_seconds=timeout_seconds,
        allow_bookmarks=bool_param(query, "allowWatchBookmarks"),
    )
    causes = list_options_causes(options, watch=watch, match=options.resource_version_match,
                                 send_initial_events=query_bool(query, "sendInitialEvents"))
    if causes:
        raise errors.invalid("meta.k8s.io", "ListOptions", "", causes)
    selectors.check_supported_fields(field_terms)
    return options


def check_resource_version(resource_version: str | None) -> None:
    """A get's or a watch's ``resourceVersion`` as kube-apiserver's storage reads it (``APIObjectVersioner``): a
    number that is not Go's unsigned 64-bit integer fails there, with a 500 and no reason, since the storage's
    invalid error is no API status.  (A list says 400 instead: kube-apiserver checks its options first.)"""
    if not resource_version:
        return
    try:
        goformat.parse_uint64(resource_version)
    except ValueError as exc:
        raise errors.ApiError(500, "", f"resourceVersion: Invalid value: {goformat.quote(resource_version)}: {exc}") \
            from None


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
    #: A DELETE's other options as the query states them, read only when the request has no body (as kube does).
    delete_pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_query(cls, query: Query) -> WriteQuery:
        return cls(
            dry_run=tuple(query.getall("dryRun", [])),
            field_manager=query.get("fieldManager") or None,
            field_validation=query.get("fieldValidation") or "",
            delete_pairs=tuple((k, v) for k, v in query.items() if k in _DELETE_PARAMETERS),
        )


def options_invalid(
    options_kind: str, field: str, message: str, reason: str = "FieldValueNotSupported"
) -> errors.ApiError:
    """The 422 kube-apiserver answers for invalid CreateOptions/UpdateOptions/PatchOptions/DeleteOptions."""
    return errors.invalid("meta.k8s.io", options_kind, "", [errors.field_cause(field, message, reason)])


def dry_run_causes(values: list[object]) -> list[errors.Cause]:
    """kube-apiserver's ``ValidateDryRun``: every value must be ``All``; refused, the whole list is shown."""
    if all(v == "All" for v in values):
        return []
    return [errors.field_cause("dryRun", f'Unsupported value: {goformat.marshal(values)}: supported values: "All"',
                               "FieldValueNotSupported")]


def _field_manager_causes(manager: str) -> list[errors.Cause]:
    """kube-apiserver's ``ValidateFieldManager``: at most 128 bytes, each character printable (Go's position is a
    byte offset)."""
    causes = []
    if len(manager.encode("utf-8", "surrogatepass")) > 128:
        causes.append(errors.field_cause("fieldManager", "Too long: may not be more than 128 bytes",
                                         "FieldValueTooLong"))
    offset = 0
    for char in manager:
        if not char.isprintable():
            causes.append(errors.field_cause("fieldManager", f"Invalid value: {goformat.quote(manager)}: invalid "
                                             f"character U+{ord(char):04X} (at position {offset})"))
        offset += len(char.encode("utf-8", "surrogatepass"))
    return causes


def delete_options_causes(options: dict[str, object]) -> list[errors.Cause]:
    """kube-apiserver's ``ValidateDeleteOptions`` of the options as decoded (from the body, or the query when there
    is no body): ``orphanDependents`` with ``propagationPolicy``, an unknown policy, then ``dryRun``."""
    causes = []
    policy = options.get("propagationPolicy")
    if options.get("orphanDependents") is not None and policy is not None:
        causes.append(errors.field_cause("propagationPolicy", f"Invalid value: {goformat.bad_value(policy)}: "
                                         "orphanDependents and deletionPropagation cannot be both set"))
    if policy is not None and policy not in ("Foreground", "Background", "Orphan"):
        causes.append(errors.field_cause("propagationPolicy", f"Unsupported value: {goformat.bad_value(policy)}: "
                                         'supported values: "Foreground", "Background", "Orphan", "nil"',
                                         "FieldValueNotSupported"))
    dry_run = options.get("dryRun")
    return causes + dry_run_causes(list(dry_run) if isinstance(dry_run, list) else [])


def query_delete_options(raw: WriteQuery) -> dict[str, object]:
    """The DeleteOptions a DELETE's query states, as kube-apiserver decodes them when there is no body: the
    numbers with Go's ``strconv.ParseInt`` (its 400), the booleans as Go converts them."""
    query = MultiDict(raw.delete_pairs)
    options: dict[str, object] = {}
    if (grace := _int_param(query, "gracePeriodSeconds")) is not None:
        options["gracePeriodSeconds"] = grace
    if (orphan := query_bool(query, "orphanDependents")) is not None:
        options["orphanDependents"] = orphan
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query.get("propagationPolicy")
    if dry_run := query.getall("dryRun", []):
        options["dryRun"] = list(dry_run)
    return options


def delete_write_options(stated: Mapping[str, object]) -> WriteOptions:
    """A DELETE's write options from its DeleteOptions as validated, read from the body or else the query, never
    both, and without ``fieldManager`` or ``fieldValidation``, which DeleteOptions does not have (as kube-apiserver
    reads them): ``dryRun``, and what the backing object's delete is sent."""
    return WriteOptions(dry_run=bool(stated.get("dryRun")),
                        deletion={key: stated[key] for key in _PASSED_ON if stated.get(key) is not None})


def write_options(raw: WriteQuery, options_kind: str) -> WriteOptions:
    """Validate ``fieldManager``, ``dryRun`` and ``fieldValidation`` of a write: one 422 with every cause, in
    kube-apiserver's order (``ValidateCreateOptions``)."""
    manager = raw.field_manager
    causes = _field_manager_causes(manager or "") + dry_run_causes(list(raw.dry_run))
    if raw.field_validation not in _FIELD_VALIDATIONS:
        causes.append(errors.field_cause("fieldValidation", f"Unsupported value: {goformat.quote(raw.field_validation)}"
                                         ': supported values: "", "Ignore", "Strict", "Warn"',
                                         "FieldValueNotSupported"))
    if causes:
        raise errors.invalid("meta.k8s.io", options_kind, "", causes)
    return WriteOptions(dry_run=bool(raw.dry_run), field_manager=manager, manager=manager or "",
                        field_validation=raw.field_validation)
