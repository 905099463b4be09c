"""OpenAPI v2 and v3 documents for the served kinds.

kubectl reads them for three things: ``kubectl explain`` (v3: finds the path for the resource,
takes its ``x-kubernetes-group-version-kind`` and renders the component schema carrying the same
GVK), the patch type of client-side ``apply`` (strategic merge only when the PATCH operation
accepts ``application/strategic-merge-patch+json`` -- so we never list it) and whether the server
validates fields itself (the ``fieldValidation`` query parameter on PATCH).  kube-apiserver's
aggregator republishes /openapi/v2 merged with its own and proxies the v3 documents as they are,
so each v3 document is self-contained: the few ``meta/v1`` types our kinds refer to are included
in a minimal form.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from shared.api import patch
from shared.api.rest import ResourceInfo
from shared.bodies import JSON

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_V3_REF = "#/components/schemas/"
_V2_REF = "#/definitions/"


def _ref(name: str) -> JSON:
    return {"$ref": _V3_REF + name}


def definition_name(group: str, version: str, kind: str) -> str:
    """Kubernetes' naming of a kind's schema: the reversed group, then version and kind."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _camel(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[.\-]", text) if part)


def _string(description: str, fmt: str = "") -> JSON:
    out: JSON = {"type": "string", "description": description}
    if fmt:
        out["format"] = fmt
    return out


# --- the meta/v1 types our documents refer to (minimal, written for explain) ---------------


def _meta_schemas() -> dict[str, JSON]:
    string_map = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}
    return {
        f"{META}.ObjectMeta": {
            "description": "Standard metadata every persisted object carries.",
            "type": "object",
            "properties": {
                "name": _string("Unique name of the object within its namespace."),
                "generateName": _string("Prefix the server uses to generate a name when none is given."),
                "namespace": _string("Namespace the object lives in."),
                "uid": _string("Unique identifier assigned by the server, never reused."),
                "resourceVersion": _string(
                    "Opaque version of the object; send it back on update to detect concurrent changes."
                ),
                "generation": {"type": "integer", "format": "int64", "description": "Spec generation."},
                "creationTimestamp": _string("When the object was created (RFC 3339, UTC).", "date-time"),
                "deletionTimestamp": _string("When deletion was requested; set by the server.", "date-time"),
                "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
                "labels": {
                    **string_map,
                    "description": "Key/value pairs used to select and organise objects.",
                },
                "annotations": {**string_map, "description": "Arbitrary non-identifying key/value metadata."},
                "finalizers": {
                    "type": "array",
                    "items": {"type": "string", "default": ""},
                    "description": "Conditions that must be cleared before the object is removed.",
                    "x-kubernetes-list-type": "set",
                },
                "ownerReferences": {
                    "type": "array",
                    "items": {"allOf": [_ref(f"{META}.OwnerReference")], "default": {}},
                    "description": "Objects this object depends on.",
                },
                "managedFields": {
                    "type": "array",
                    "items": {"allOf": [_ref(f"{META}.ManagedFieldsEntry")], "default": {}},
                    "description": "Which manager set which fields (server-side apply bookkeeping).",
                },
            },
        },
        f"{META}.OwnerReference": {
            "description": "Identifies an owning object.",
            "type": "object",
            "required": ["apiVersion", "kind", "name", "uid"],
            "properties": {
                "apiVersion": _string("API version of the owner."),
                "kind": _string("Kind of the owner."),
                "name": _string("Name of the owner."),
                "uid": _string("UID of the owner."),
                "controller": {
                    "type": "boolean",
                    "description": "True if the owner is the managing controller.",
                },
                "blockOwnerDeletion": {
                    "type": "boolean",
                    "description": "Foreground deletion waits for this.",
                },
            },
            "x-kubernetes-map-type": "atomic",
        },
        f"{META}.ManagedFieldsEntry": {
            "description": "A set of fields owned by one manager.",
            "type": "object",
            "properties": {
                "manager": _string("Name of the manager."),
                "operation": _string("Apply or Update."),
                "apiVersion": _string("Version the fields were recorded in."),
                "time": _string("When the fields were last changed.", "date-time"),
                "fieldsType": _string("Format of fieldsV1."),
                "fieldsV1": {"type": "object", "description": "The owned fields."},
                "subresource": _string("Subresource the fields were written through."),
            },
        },
        f"{META}.ListMeta": {
            "description": "Metadata of a list response.",
            "type": "object",
            "properties": {
                "resourceVersion": _string("Version of the list; start a watch from here."),
                "continue": _string("Token for the next page when the list was limited."),
                "remainingItemCount": {"type": "integer", "format": "int64"},
            },
        },
        f"{META}.StatusCause": {
            "description": "One reason a request failed.",
            "type": "object",
            "properties": {
                "reason": _string("Machine-readable cause."),
                "message": _string("Human-readable description."),
                "field": _string("The field the cause refers to, e.g. spec.replicas."),
            },
        },
        f"{META}.StatusDetails": {
            "description": "Extended data of a Status.",
            "type": "object",
            "properties": {
                "name": _string("Name of the object concerned."),
                "group": _string("Group of the object concerned."),
                "kind": _string("Kind (or resource) of the object concerned."),
                "uid": _string("UID of the object concerned."),
                "causes": {"type": "array", "items": {"allOf": [_ref(f"{META}.StatusCause")], "default": {}}},
                "retryAfterSeconds": {"type": "integer", "format": "int32"},
            },
        },
        f"{META}.Status": {
            "description": "The result of a call that does not return an object, and every error.",
            "type": "object",
            "properties": {
                "apiVersion": _string("v1"),
                "kind": _string("Status"),
                "metadata": {"allOf": [_ref(f"{META}.ListMeta")], "default": {}},
                "status": _string("Success or Failure."),
                "message": _string("Human-readable description."),
                "reason": _string("Machine-readable reason, e.g. NotFound or Invalid."),
                "code": {"type": "integer", "format": "int32", "description": "HTTP status code."},
                "details": {"allOf": [_ref(f"{META}.StatusDetails")]},
            },
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Status", "version": "v1"}],
        },
        f"{META}.Preconditions": {
            "description": "Must hold for a delete to proceed.",
            "type": "object",
            "properties": {"uid": _string("Expected UID."), "resourceVersion": _string("Expected version.")},
        },
        f"{META}.DeleteOptions": {
            "description": "Options of a delete request.",
            "type": "object",
            "properties": {
                "apiVersion": _string("v1"),
                "kind": _string("DeleteOptions"),
                "dryRun": {"type": "array", "items": {"type": "string", "default": ""}},
                "gracePeriodSeconds": {"type": "integer", "format": "int64"},
                "propagationPolicy": _string("Orphan, Background or Foreground."),
                "preconditions": {"allOf": [_ref(f"{META}.Preconditions")]},
            },
        },
        f"{META}.Patch": {
            "description": "A patch document; its format is given by the request's Content-Type.",
            "type": "object",
        },
    }


# --- per-kind schemas -------------------------------------------------------------------------


def _gvk(info: ResourceInfo, kind: str | None = None) -> JSON:
    return {"group": info.group, "version": info.version, "kind": kind or info.kind}


def object_schema(info: ResourceInfo) -> JSON:
    """The kind's schema, with standard apiVersion/kind/metadata and its GVK extension."""
    schema = copy.deepcopy(info.schema) if isinstance(info.schema, dict) else {}
    schema["type"] = "object"
    schema.setdefault("description", f"{info.kind} is a {info.group} resource.")
    props = schema.setdefault("properties", {})
    props["apiVersion"] = _string(f"Always {info.api_version}.")
    props["kind"] = _string(f"Always {info.kind}.")
    props["metadata"] = {
        "allOf": [_ref(f"{META}.ObjectMeta")],
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
            "apiVersion": _string(f"Always {info.api_version}."),
            "kind": _string(f"Always {info.list_kind}."),
            "metadata": {"allOf": [_ref(f"{META}.ListMeta")], "default": {}},
            "items": {
                "type": "array",
                "items": _ref(definition_name(info.group, info.version, info.kind)),
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


class _Op:
    """One operation, rendered for either OpenAPI version."""

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

    def v3(self, tag: str) -> JSON:
        out: JSON = {
            "tags": [tag],
            "description": self.description,
            "operationId": self.op_id,
            "parameters": [
                {"name": n, "in": "query", "description": d, "schema": {"type": t, "uniqueItems": True}}
                for n, t, d in self.params
            ],
            "responses": {
                code: (
                    {
                        "description": "OK" if code == "200" else "Created" if code == "201" else "Accepted",
                        "content": {p: {"schema": _ref(schema)} for p in self.produces},
                    }
                    if schema
                    else {"description": "Unauthorized"}
                )
                for code, schema in self.responses.items()
            },
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk,
        }
        if self.body is not None:
            out["requestBody"] = {
                "content": {c: {"schema": _ref(self.body)} for c in self.consumes},
                "required": self.body_required,
            }
        return out

    def v2(self, tag: str) -> JSON:
        params: list[JSON] = []
        if self.body is not None:
            params.append(
                {
                    "name": "body",
                    "in": "body",
                    "required": self.body_required,
                    "schema": {"$ref": _V2_REF + self.body},
                }
            )
        params += [
            {"uniqueItems": True, "type": t, "description": d, "name": n, "in": "query"} for n, t, d in self.params
        ]
        return {
            "description": self.description,
            "consumes": list(self.consumes) if self.body is not None else ["*/*"],
            "produces": list(self.produces),
            "schemes": ["https"],
            "tags": [tag],
            "operationId": self.op_id,
            "parameters": params,
            "responses": {
                code: (
                    {
                        "description": "OK" if code == "200" else "Created" if code == "201" else "Accepted",
                        "schema": {"$ref": _V2_REF + schema},
                    }
                    if schema
                    else {"description": "Unauthorized"}
                )
                for code, schema in self.responses.items()
            },
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk,
        }


def _paths(info: ResourceInfo) -> dict[str, tuple[list[_P], dict[str, _Op]]]:
    """Path -> (path parameters, method -> operation) for one namespaced resource."""
    prefix = f"/apis/{info.group}/{info.version}"
    ident = f"{_camel(info.group)}{_camel(info.version)}"
    obj = definition_name(info.group, info.version, info.kind)
    lst = definition_name(info.group, info.version, info.list_kind)
    gvk = _gvk(info)
    k, plural = info.kind, info.plural
    list_produces = ("application/json", "application/json;stream=watch")
    ns_collection = f"{prefix}/namespaces/{{namespace}}/{plural}"
    return {
        f"{prefix}/{plural}": (
            [],
            {
                "get": _Op(
                    "list",
                    f"list{ident}{k}ForAllNamespaces",
                    f"list or watch {plural} in all namespaces",
                    gvk,
                    _LIST_PARAMS,
                    {"200": lst, "401": ""},
                    produces=list_produces,
                ),
            },
        ),
        ns_collection: (
            [_NAMESPACE],
            {
                "get": _Op(
                    "list",
                    f"list{ident}Namespaced{k}",
                    f"list or watch {plural}",
                    gvk,
                    _LIST_PARAMS,
                    {"200": lst, "401": ""},
                    produces=list_produces,
                ),
                "post": _Op(
                    "post",
                    f"create{ident}Namespaced{k}",
                    f"create a {k}",
                    gvk,
                    _CREATE_PARAMS,
                    {"200": obj, "201": obj, "202": obj, "401": ""},
                    body=obj,
                ),
            },
        ),
        f"{ns_collection}/{{name}}": (
            [_NAME, _NAMESPACE],
            {
                "get": _Op(
                    "get",
                    f"read{ident}Namespaced{k}",
                    f"read the specified {k}",
                    gvk,
                    (_PRETTY,),
                    {"200": obj, "401": ""},
                ),
                "put": _Op(
                    "put",
                    f"replace{ident}Namespaced{k}",
                    f"replace the specified {k}",
                    gvk,
                    _CREATE_PARAMS,
                    {"200": obj, "201": obj, "401": ""},
                    body=obj,
                ),
                "patch": _Op(
                    "patch",
                    f"patch{ident}Namespaced{k}",
                    f"partially update the specified {k}",
                    gvk,
                    _PATCH_PARAMS,
                    {"200": obj, "201": obj, "401": ""},
                    body=f"{META}.Patch",
                    consumes=patch.SUPPORTED,
                ),
                "delete": _Op(
                    "delete",
                    f"delete{ident}Namespaced{k}",
                    f"delete a {k}",
                    gvk,
                    _DELETE_PARAMS,
                    {"200": obj, "202": obj, "401": ""},
                    body=f"{META}.DeleteOptions",
                    body_required=False,
                ),
            },
        ),
    }


def _tag(group: str, version: str) -> str:
    return f"{_camel(group)[:1].lower()}{_camel(group)[1:]}_{version}"


# --- documents --------------------------------------------------------------------------------


def v3_document(group: str, version: str, infos: Iterable[ResourceInfo], title: str = "agl") -> JSON:
    """The ``/openapi/v3/apis/<group>/<version>`` document."""
    selected = sorted((i for i in infos if i.group == group and i.version == version), key=lambda i: i.plural)
    schemas = _meta_schemas()
    paths: JSON = {}
    tag = _tag(group, version)
    for info in selected:
        schemas[definition_name(group, version, info.kind)] = object_schema(info)
        schemas[definition_name(group, version, info.list_kind)] = list_schema(info)
        for path, (path_params, ops) in _paths(info).items():
            item: JSON = {method: op.v3(tag) for method, op in ops.items()}
            if path_params:
                item["parameters"] = [
                    {
                        "name": n,
                        "in": "path",
                        "description": d,
                        "required": True,
                        "schema": {"type": t, "uniqueItems": True},
                    }
                    for n, t, d in path_params
                ]
            paths[path] = item
    return {
        "openapi": "3.0.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": schemas},
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
            out[key] = value.replace(_V3_REF, _V2_REF)
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
    definitions = {name: to_v2_schema(s) for name, s in _meta_schemas().items()}
    paths: JSON = {}
    for info in selected:
        tag = _tag(info.group, info.version)
        definitions[definition_name(info.group, info.version, info.kind)] = to_v2_schema(object_schema(info))
        definitions[definition_name(info.group, info.version, info.list_kind)] = to_v2_schema(list_schema(info))
        for path, (path_params, ops) in _paths(info).items():
            item: JSON = {method: op.v2(tag) for method, op in ops.items()}
            if path_params:
                item["parameters"] = [
                    {
                        "uniqueItems": True,
                        "type": t,
                        "description": d,
                        "name": n,
                        "in": "path",
                        "required": True,
                    }
                    for n, t, d in path_params
                ]
            paths[path] = item
    return {
        "swagger": "2.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "definitions": definitions,
    }
