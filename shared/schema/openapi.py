"""OpenAPI v2 and v3 documents for the served kinds.

kubectl reads them for three things: ``kubectl explain`` (v3: finds the path for the resource,
takes its ``x-kubernetes-group-version-kind`` and renders the component schema carrying the same
GVK), the patch type of client-side ``apply`` (strategic merge only when the PATCH operation
accepts ``application/strategic-merge-patch+json`` -- so we never list it) and whether the server
validates fields itself (the ``fieldValidation`` query parameter on PATCH).  kube-apiserver's
aggregator republishes /openapi/v2 merged with its own and proxies the v3 documents as they are,
so each v3 document is self-contained: the few ``meta/v1`` types our kinds refer to are included
(:mod:`shared.schema.meta_v1`).

The paths and operations are described once (:func:`_paths`) and rendered to either version; the
schemas are written in v3 form and converted for v2 (:func:`to_v2_schema`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from shared.api import patch
from shared.api.rest import ResourceInfo
from shared.bodies import JSON
from shared.schema import meta_v1
from shared.schema.meta_v1 import META, V3_REF, ref, string

_V2_REF = "#/definitions/"


def definition_name(group: str, version: str, kind: str) -> str:
    """Kubernetes' naming of a kind's schema: the reversed group, then version and kind."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[.\-]", text) if part)

# --- per-kind schemas -------------------------------------------------------------------------


def _gvk(info: ResourceInfo, kind: str | None = None) -> JSON:
    return {"group": info.group, "version": info.version, "kind": kind or info.kind}


def object_schema(info: ResourceInfo) -> JSON:
    """The kind's schema, with standard apiVersion/kind/metadata and its GVK extension."""
    schema = copy.deepcopy(info.schema) if isinstance(info.schema, dict) else {}
    schema["type"] = "object"
    schema.setdefault("description", f"{info.kind} is a {info.group} resource.")
    props = schema.setdefault("properties", {})
    props["apiVersion"] = string(f"Always {info.api_version}.")
    props["kind"] = string(f"Always {info.kind}.")
    props["metadata"] = {
        "allOf": [ref(f"{META}.ObjectMeta")],
        "default": {},
        "description": "Standard object metadata.",
    }
    schema["x-kubernetes-group-version-kind"] = [_gvk(info)]
    return schema


def list_schema(info: ResourceInfo) -> JSON:
    return {
        "description": f"{info.list_kind} is a list of {info.kind}.",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": string(f"Always {info.api_version}."),
            "kind": string(f"Always {info.list_kind}."),
            "metadata": {"allOf": [ref(f"{META}.ListMeta")], "default": {}},
            "items": {
                "type": "array",
                "items": ref(definition_name(info.group, info.version, info.kind)),
                "description": f"The {info.plural}.",
            },
        },
        "x-kubernetes-group-version-kind": [_gvk(info, info.list_kind)],
    }


# --- operations -------------------------------------------------------------------------------

_P = tuple[str, str, str]  # name, type, description

_PRETTY: _P = ("pretty", "string", "If 'true', the output is pretty printed.")
_DRY_RUN: _P = ("dryRun", "string", "'All' processes the request without persisting anything.")
_FIELD_MANAGER: _P = ("fieldManager", "string", "Name of the actor making the change; required for apply.")
_FIELD_VALIDATION: _P = ("fieldValidation", "string", "Ignore, Warn or Strict handling of unknown fields.")
_LIST_PARAMS: tuple[_P, ...] = (
    ("allowWatchBookmarks", "boolean", "Ask for BOOKMARK events on watches."),
    ("continue", "string", "Token from a previous limited list."),
    ("fieldSelector", "string", "Select by metadata.name / metadata.namespace."),
    ("labelSelector", "string", "Select by labels."),
    ("limit", "integer", "Maximum number of items to return."),
    _PRETTY,
    ("resourceVersion", "string", "List or watch from this version."),
    ("resourceVersionMatch", "string", "How resourceVersion applies to a list."),
    ("timeoutSeconds", "integer", "End a list/watch after this many seconds."),
    ("watch", "boolean", "Stream changes instead of listing."),
)
_CREATE_PARAMS = (_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION, _PRETTY)
_PATCH_PARAMS = (
    _DRY_RUN,
    _FIELD_MANAGER,
    _FIELD_VALIDATION,
    ("force", "boolean", "Take over conflicting fields."),
    _PRETTY,
)
_DELETE_PARAMS = (
    _DRY_RUN,
    ("gracePeriodSeconds", "integer", "Seconds before the object is deleted."),
    ("propagationPolicy", "string", "Orphan, Background or Foreground."),
    _PRETTY,
)
_NAMESPACE: _P = ("namespace", "string", "Object name and auth scope, such as for teams and projects.")
_NAME: _P = ("name", "string", "Name of the object.")


_RESPONSE_DESCRIPTIONS = {"200": "OK", "201": "Created", "202": "Accepted", "401": "Unauthorized"}


def _parameter(param: _P, where: str, *, v2: bool) -> JSON:
    """A query or path parameter; v2 states the type inline, v3 in a schema."""
    name, type_, description = param
    typed: JSON = {"type": type_, "uniqueItems": True}
    out: JSON = {"name": name, "in": where, "description": description}
    if v2:
        out.update(typed)
    else:
        out["schema"] = typed
    if where == "path":
        out["required"] = True
    return out


class _Op:
    """One operation of one path, rendered for either OpenAPI version."""

    def __init__(
        self,
        action: str,
        op_id: str,
        description: str,
        gvk: JSON,
        params: Sequence[_P],
        responses: dict[str, str],
        *,
        body: str | None = None,
        consumes: Sequence[str] = ("application/json", "application/yaml"),
        produces: Sequence[str] = ("application/json",),
        body_required: bool = True,
    ) -> None:
        self.action, self.op_id, self.description, self.gvk = action, op_id, description, gvk
        self.params, self.responses, self.body = params, responses, body
        self.consumes, self.produces, self.body_required = consumes, produces, body_required

    def render(self, tag: str, *, v2: bool) -> JSON:
        out: JSON = {
            "tags": [tag],
            "description": self.description,
            "operationId": self.op_id,
            "parameters": [_parameter(p, "query", v2=v2) for p in self.params],
            "responses": {code: self._response(code, schema, v2=v2) for code, schema in self.responses.items()},
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk,
        }
        if v2:
            out.update(consumes=list(self.consumes) if self.body is not None else ["*/*"],
                       produces=list(self.produces), schemes=["https"])
            if self.body is not None:
                body = {"name": "body", "in": "body", "required": self.body_required,
                        "schema": {"$ref": _V2_REF + self.body}}
                out["parameters"].insert(0, body)
        elif self.body is not None:
            out["requestBody"] = {
                "content": {c: {"schema": ref(self.body)} for c in self.consumes},
                "required": self.body_required,
            }
        return out

    def _response(self, code: str, schema: str, *, v2: bool) -> JSON:
        out: JSON = {"description": _RESPONSE_DESCRIPTIONS[code]}
        if not schema:
            return out
        if v2:
            out["schema"] = {"$ref": _V2_REF + schema}
        else:
            out["content"] = {p: {"schema": ref(schema)} for p in self.produces}
        return out


@dataclass(frozen=True)
class _Names:
    """What every operation of one resource is named and typed by."""

    ident: str
    kind: str
    plural: str
    obj: str
    lst: str
    gvk: JSON


def _paths(info: ResourceInfo) -> dict[str, tuple[list[_P], dict[str, _Op]]]:
    """Path -> (path parameters, method -> operation) for one namespaced resource."""
    prefix = f"/apis/{info.group}/{info.version}"
    names = _Names(f"{_camel(info.group)}{_camel(info.version)}", info.kind, info.plural,
                   definition_name(info.group, info.version, info.kind),
                   definition_name(info.group, info.version, info.list_kind), _gvk(info))
    ns_collection = f"{prefix}/namespaces/{{namespace}}/{info.plural}"
    return {
        f"{prefix}/{info.plural}": ([], {"get": _list_op(names, all_namespaces=True)}),
        ns_collection: ([_NAMESPACE], _collection_ops(names)),
        f"{ns_collection}/{{name}}": ([_NAME, _NAMESPACE], _object_ops(names)),
    }


_LIST_PRODUCES = ("application/json", "application/json;stream=watch")


def _list_op(n: _Names, *, all_namespaces: bool) -> _Op:
    if all_namespaces:
        return _Op("list", f"list{n.ident}{n.kind}ForAllNamespaces", f"list or watch {n.plural} in all namespaces",
                   n.gvk, _LIST_PARAMS, {"200": n.lst, "401": ""}, produces=_LIST_PRODUCES)
    return _Op("list", f"list{n.ident}Namespaced{n.kind}", f"list or watch {n.plural}", n.gvk, _LIST_PARAMS,
               {"200": n.lst, "401": ""}, produces=_LIST_PRODUCES)


def _collection_ops(n: _Names) -> dict[str, _Op]:
    return {
        "get": _list_op(n, all_namespaces=False),
        "post": _Op("post", f"create{n.ident}Namespaced{n.kind}", f"create a {n.kind}", n.gvk, _CREATE_PARAMS,
                    {"200": n.obj, "201": n.obj, "202": n.obj, "401": ""}, body=n.obj),
    }


def _object_ops(n: _Names) -> dict[str, _Op]:
    return {
        "get": _Op("get", f"read{n.ident}Namespaced{n.kind}", f"read the specified {n.kind}", n.gvk, (_PRETTY,),
                   {"200": n.obj, "401": ""}),
        "put": _Op("put", f"replace{n.ident}Namespaced{n.kind}", f"replace the specified {n.kind}", n.gvk,
                   _CREATE_PARAMS, {"200": n.obj, "201": n.obj, "401": ""}, body=n.obj),
        "patch": _Op("patch", f"patch{n.ident}Namespaced{n.kind}", f"partially update the specified {n.kind}", n.gvk,
                     _PATCH_PARAMS, {"200": n.obj, "201": n.obj, "401": ""}, body=f"{META}.Patch",
                     consumes=patch.SUPPORTED),
        "delete": _Op("delete", f"delete{n.ident}Namespaced{n.kind}", f"delete a {n.kind}", n.gvk, _DELETE_PARAMS,
                      {"200": n.obj, "202": n.obj, "401": ""}, body=f"{META}.DeleteOptions", body_required=False),
    }


def _tag(group: str, version: str) -> str:
    return f"{_camel(group)[:1].lower()}{_camel(group)[1:]}_{version}"


# --- documents --------------------------------------------------------------------------------


def _path_items(infos: Iterable[ResourceInfo], *, v2: bool) -> JSON:
    paths: JSON = {}
    for info in infos:
        tag = _tag(info.group, info.version)
        for path, (path_params, ops) in _paths(info).items():
            item: JSON = {method: op.render(tag, v2=v2) for method, op in ops.items()}
            if path_params:
                item["parameters"] = [_parameter(p, "path", v2=v2) for p in path_params]
            paths[path] = item
    return paths


def _schemas(infos: Iterable[ResourceInfo]) -> dict[str, JSON]:
    """meta/v1 and every kind's object and list schema, in v3 form."""
    schemas = meta_v1.schemas()
    for info in infos:
        schemas[definition_name(info.group, info.version, info.kind)] = object_schema(info)
        schemas[definition_name(info.group, info.version, info.list_kind)] = list_schema(info)
    return schemas


def v3_document(group: str, version: str, infos: Iterable[ResourceInfo], title: str = "agl") -> JSON:
    """The ``/openapi/v3/apis/<group>/<version>`` document."""
    selected = sorted((i for i in infos if i.group == group and i.version == version), key=lambda i: i.plural)
    return {
        "openapi": "3.0.0",
        "info": {"title": title, "version": version},
        "paths": _path_items(selected, v2=False),
        "components": {"schemas": _schemas(selected)},
    }


def content_hash(doc: JSON) -> str:
    """Upper-case hex SHA-512 of the canonical JSON, the form kube uses in ``?hash=`` and ETags."""
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha512(data).hexdigest().upper()


def v3_index(documents: dict[tuple[str, str], JSON]) -> JSON:
    """``/openapi/v3``: one entry per group version, its URL carrying the document's hash."""
    return {
        "paths": {
            f"apis/{g}/{v}": {"serverRelativeURL": f"/openapi/v3/apis/{g}/{v}?hash={content_hash(doc)}"}
            for (g, v), doc in sorted(documents.items())
        }
    }


# Keywords OpenAPI v2 (a JSON-schema draft 4 subset) cannot carry.
_V2_DROPPED = frozenset({"nullable", "oneOf", "anyOf", "not", "deprecated", "writeOnly"})
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions")
_SCHEMA_LISTS = ("allOf",)


def to_v2_schema(schema: Any) -> Any:
    """Rewrite a v3 schema for v2: refs point at ``#/definitions/``, unsupported keywords dropped."""
    if not isinstance(schema, dict):
        return schema
    out: JSON = {}
    for key, value in schema.items():
        if key in _V2_DROPPED:
            continue
        if key == "$ref" and isinstance(value, str):
            out[key] = value.replace(V3_REF, _V2_REF)
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: to_v2_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [to_v2_schema(sub) for sub in value]
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = to_v2_schema(value)
        elif key == "items" and isinstance(value, list):
            out[key] = [to_v2_schema(sub) for sub in value]
        else:
            out[key] = copy.deepcopy(value)
    # v2 cannot express "string or integer"; kube publishes such fields without a type.
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    # A lone allOf-wrapped $ref is how v3 attaches a description to a ref; v2 takes the ref itself.
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict) and set(all_of[0]) == {"$ref"}:
        del out["allOf"]
        out["$ref"] = all_of[0]["$ref"]
    return out


def v2_document(infos: Iterable[ResourceInfo], title: str = "agl", version: str = "v0") -> JSON:
    """The ``/openapi/v2`` (swagger 2.0) document for every served resource."""
    selected = sorted(infos, key=lambda i: (i.group, i.version, i.plural))
    return {
        "swagger": "2.0",
        "info": {"title": title, "version": version},
        "paths": _path_items(selected, v2=True),
        "definitions": {name: to_v2_schema(schema) for name, schema in _schemas(selected).items()},
    }
