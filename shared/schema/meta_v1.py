"""The ``meta/v1`` schemas our OpenAPI documents refer to, in the minimal form ``kubectl explain`` needs.

kube-apiserver's aggregator proxies each v3 document as it is, so every document must carry the
meta/v1 types its kinds refer to. No pinned package ships them (kubernetes_asyncio and the kubernetes
client generate models from the OpenAPI but do not include the document), and the service must not
depend on reading them from kube-apiserver at start-up, so they are written here, in v3 form; the v2
document converts them like any other schema.
"""

from __future__ import annotations

from shared.bodies import JSON

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
V3_REF = "#/components/schemas/"


def ref(name: str) -> JSON:
    """A v3 reference to a component schema."""
    return {"$ref": V3_REF + name}


def string(description: str, fmt: str = "") -> JSON:
    out: JSON = {"type": "string", "description": description}
    if fmt:
        out["format"] = fmt
    return out


def schemas() -> dict[str, JSON]:
    """A fresh copy of every meta/v1 schema, keyed by its OpenAPI definition name."""
    string_map = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}
    return {
        f"{META}.ObjectMeta": {
            "description": "Standard metadata every persisted object carries.",
            "type": "object",
            "properties": {
                "name": string("Unique name of the object within its namespace."),
                "generateName": string("Prefix the server uses to generate a name when none is given."),
                "namespace": string("Namespace the object lives in."),
                "uid": string("Unique identifier assigned by the server, never reused."),
                "resourceVersion": string(
                    "Opaque version of the object; send it back on update to detect concurrent changes."
                ),
                "generation": {"type": "integer", "format": "int64", "description": "Spec generation."},
                "creationTimestamp": string("When the object was created (RFC 3339, UTC).", "date-time"),
                "deletionTimestamp": string("When deletion was requested; set by the server.", "date-time"),
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
                    "items": {"allOf": [ref(f"{META}.OwnerReference")], "default": {}},
                    "description": "Objects this object depends on.",
                },
                "managedFields": {
                    "type": "array",
                    "items": {"allOf": [ref(f"{META}.ManagedFieldsEntry")], "default": {}},
                    "description": "Which manager set which fields (server-side apply bookkeeping).",
                },
            },
        },
        f"{META}.OwnerReference": {
            "description": "Identifies an owning object.",
            "type": "object",
            "required": ["apiVersion", "kind", "name", "uid"],
            "properties": {
                "apiVersion": string("API version of the owner."),
                "kind": string("Kind of the owner."),
                "name": string("Name of the owner."),
                "uid": string("UID of the owner."),
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
                "manager": string("Name of the manager."),
                "operation": string("Apply or Update."),
                "apiVersion": string("Version the fields were recorded in."),
                "time": string("When the fields were last changed.", "date-time"),
                "fieldsType": string("Format of fieldsV1."),
                "fieldsV1": {"type": "object", "description": "The owned fields."},
                "subresource": string("Subresource the fields were written through."),
            },
        },
        f"{META}.ListMeta": {
            "description": "Metadata of a list response.",
            "type": "object",
            "properties": {
                "resourceVersion": string("Version of the list; start a watch from here."),
                "continue": string("Token for the next page when the list was limited."),
                "remainingItemCount": {"type": "integer", "format": "int64"},
            },
        },
        f"{META}.StatusCause": {
            "description": "One reason a request failed.",
            "type": "object",
            "properties": {
                "reason": string("Machine-readable cause."),
                "message": string("Human-readable description."),
                "field": string("The field the cause refers to, e.g. spec.replicas."),
            },
        },
        f"{META}.StatusDetails": {
            "description": "Extended data of a Status.",
            "type": "object",
            "properties": {
                "name": string("Name of the object concerned."),
                "group": string("Group of the object concerned."),
                "kind": string("Kind (or resource) of the object concerned."),
                "uid": string("UID of the object concerned."),
                "causes": {"type": "array", "items": {"allOf": [ref(f"{META}.StatusCause")], "default": {}}},
                "retryAfterSeconds": {"type": "integer", "format": "int32"},
            },
        },
        f"{META}.Status": {
            "description": "The result of a call that does not return an object, and every error.",
            "type": "object",
            "properties": {
                "apiVersion": string("v1"),
                "kind": string("Status"),
                "metadata": {"allOf": [ref(f"{META}.ListMeta")], "default": {}},
                "status": string("Success or Failure."),
                "message": string("Human-readable description."),
                "reason": string("Machine-readable reason, e.g. NotFound or Invalid."),
                "code": {"type": "integer", "format": "int32", "description": "HTTP status code."},
                "details": {"allOf": [ref(f"{META}.StatusDetails")]},
            },
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Status", "version": "v1"}],
        },
        f"{META}.Preconditions": {
            "description": "Must hold for a delete to proceed.",
            "type": "object",
            "properties": {"uid": string("Expected UID."), "resourceVersion": string("Expected version.")},
        },
        f"{META}.DeleteOptions": {
            "description": "Options of a delete request.",
            "type": "object",
            "properties": {
                "apiVersion": string("v1"),
                "kind": string("DeleteOptions"),
                "dryRun": {"type": "array", "items": {"type": "string", "default": ""}},
                "gracePeriodSeconds": {"type": "integer", "format": "int64"},
                "propagationPolicy": string("Orphan, Background or Foreground."),
                "preconditions": {"allOf": [ref(f"{META}.Preconditions")]},
            },
        },
        f"{META}.Patch": {
            "description": "A patch document; its format is given by the request's Content-Type.",
            "type": "object",
        },
    }
