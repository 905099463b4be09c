"""A request resolved once, up front, into plain frozen data (``k8s.io/apiserver``'s RequestInfo, plus options).

Everything the handlers need from the URL, the query and the headers is read here and nowhere
else: the target resource, the verb, the name authorization is asked about, list and write
options, the output format and the body's media type.  Handlers then work on data, not on the
HTTP request, and each parameter is parsed exactly once.

Errors keep kube-apiserver's order.  What authorization depends on (path, verb) fails at once;
a malformed option is kept as :attr:`RequestInfo.problem` and raised only once the request is
authorized and its resource found, so a user who may not touch a resource learns nothing from
its query validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from shared.api import errors, selectors, table
from shared.api.fieldmanager import manager_from_user_agent
from shared.api.patch import PatchType, patch_type
from shared.api.paths import resource_path
from shared.api.rest import ListOptions, WriteOptions
from shared.server.options import (
    Query,
    WriteQuery,
    bool_param,
    check_resource_version,
    options_invalid,
    parse_list_options,
    write_options,
)
from shared.server.responses import not_found

READ_VERBS = frozenset({"get", "list", "watch"})
_BODY_MEDIA = ("", "application/json", "application/yaml")
_OPTIONS_KINDS = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions"}


@dataclass(frozen=True)
class Target:
    """The resource a URL names: ``/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>[/<sub>]]``."""

    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str = ""


@dataclass(frozen=True)
class Output:
    """How a read is rendered: the Accept header's choice and a Table's ``includeObject``."""

    rendering: table.Rendering = field(default_factory=table.Rendering)
    include: str = table.INCLUDE_METADATA


@dataclass(frozen=True)
class RequestInfo:
    """One resource request, resolved.  Fields a verb does not use keep their defaults."""

    verb: str
    target: Target
    #: The object name authorization is asked about: the URL's, or the one a list/watch
    #: ``metadata.name=`` field selector pins (so RBAC ``resourceNames`` allow ``kubectl get x -w``).
    authorized_name: str | None
    #: A list's or watch's options; of a get, only ``resource_version`` (kube's GetOptions has no other).
    list_options: ListOptions = field(default_factory=ListOptions)
    output: Output = field(default_factory=Output)
    send_initial_events: bool = False
    write_query: WriteQuery = field(default_factory=WriteQuery)
    write_options: WriteOptions = field(default_factory=WriteOptions)
    #: Media type of a create/update body: "" (JSON), application/json or application/yaml.
    body_media: str = ""
    patch_type: PatchType | None = None
    #: The first invalid option, answered once the request is authorized (see the module docstring).
    problem: errors.ApiError | None = None

    def raise_problem(self) -> None:
        if self.problem is not None:
            raise self.problem


@dataclass(frozen=True)
class DiscoveryRequest:
    """A request for ``/apis``, ``/apis/<group>`` or ``/apis/<group>/<version>``."""

    path: tuple[str, ...]
    method: str


def resolve(method: str, tail: str, query: Query, headers: Mapping[str, str]) -> RequestInfo | DiscoveryRequest:
    """Resolve a request below ``/apis/``; ``tail`` is the path after that prefix."""
    parts = tail.split("/") if tail else []
    if parts and parts[-1] == "":
        parts.pop()
    if any(p == "" for p in parts):
        raise not_found()
    if len(parts) <= 2:
        return DiscoveryRequest(tuple(parts), method)
    target = _target(parts)
    info = RequestInfo(
        verb=_verb(method, target, query),
        target=target,
        authorized_name=target.name,
        write_query=WriteQuery.from_query(query),
    )
    try:
        if info.verb in READ_VERBS:
            return _with_read_options(info, query, headers)
        return _with_write_options(info, query, headers)
    except errors.ApiError as err:
        return replace(info, problem=err)


def _target(parts: list[str]) -> Target:
    found = resource_path(parts[2:])
    return Target(group=parts[0], version=parts[1], plural=found.plural, namespace=found.namespace,
                  name=found.name, subresource=found.subresource)


def _verb(method: str, target: Target, query: Query) -> str:
    if method == "GET":
        if bool_param(query, "watch"):
            return "watch"
        return "get" if target.name is not None else "list"
    if target.name is None:
        collection_verb = {"POST": "create", "DELETE": "deletecollection"}.get(method)
        if collection_verb:
            return collection_verb
    else:
        object_verb = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if object_verb:
            return object_verb
    raise errors.method_not_allowed(f"{method} is not supported on this URL")


def _with_read_options(info: RequestInfo, query: Query, headers: Mapping[str, str]) -> RequestInfo:
    output = Output(table.negotiate(headers.get("Accept")), table.parse_include_object(query.get("includeObject")))
    if info.verb == "get":
        read_at = ListOptions(resource_version=query.get("resourceVersion") or None)
        check_resource_version(read_at.resource_version)
        return replace(info, output=output, list_options=read_at)
    options = parse_list_options(query, watch=info.verb == "watch")
    if info.verb == "watch":
        check_resource_version(options.resource_version)
    name = info.target.name
    if name is not None:
        # The legacy single-object watch is a collection watch on metadata.name.
        options = replace(options, field_selector=(*options.field_selector, ("metadata.name", "=", name)))
    return replace(
        info,
        output=output,
        list_options=options,
        authorized_name=name if name is not None else _selected_name(options),
        send_initial_events=info.verb == "watch" and bool_param(query, "sendInitialEvents"),
    )


def _selected_name(options: ListOptions) -> str | None:
    names = [value for key, op, value in options.field_selector if key == "metadata.name" and op == selectors.EQUALS]
    return names[0] if len(names) == 1 else None


def _with_write_options(info: RequestInfo, query: Query, headers: Mapping[str, str]) -> RequestInfo:
    if info.target.namespace is None:
        # A namespaced kind's cluster-wide collection serves only list and watch, as kube-apiserver's.
        raise errors.method_not_allowed(f"{info.verb} is not supported on this URL")
    if info.verb == "deletecollection":
        return replace(info, list_options=parse_list_options(query))
    if info.verb == "delete":
        return info  # DeleteOptions may continue in the body: validated once it is read
    content_type = headers.get("Content-Type", "")
    kind = patch_type(content_type) if info.verb == "patch" else None
    options = write_options(info.write_query, _OPTIONS_KINDS[info.verb])
    if not options.manager:
        options = replace(options, manager=manager_from_user_agent(headers.get("User-Agent", "")))
    if kind is None:
        return replace(info, write_options=options, body_media=_body_media(content_type))
    if kind is PatchType.APPLY and not options.field_manager:
        raise options_invalid(
            "PatchOptions", "fieldManager", "Required value: is required for apply patch", "FieldValueRequired"
        )
    if kind is not PatchType.APPLY and "force" in query:
        raise options_invalid(
            "PatchOptions", "force", "Forbidden: may not be specified for non-apply patch", "FieldValueForbidden"
        )
    if kind is PatchType.APPLY:
        options = replace(options, force=bool_param(query, "force"))
    return replace(info, write_options=options, patch_type=kind)


def _body_media(content_type: str) -> str:
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in _BODY_MEDIA:
        raise errors.unsupported_media_type(content_type)
    return media
