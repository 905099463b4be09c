"""PATCH semantics: JSON merge patch and JSON patch; the media types of every patch kind.

Our kinds are unstructured from kubectl's point of view, so the patch types that matter are the
ones kubectl and GitOps tools send for CRDs: merge patch (``kubectl edit/patch/annotate``, client
side ``apply``), JSON patch (``kubectl patch --type=json``) and apply patch (``kubectl apply
--server-side``, Flux, Argo CD; merged with field ownership by :mod:`shared.api.fieldmanager`).
Strategic merge patch needs Go struct tags and is refused with
415, as kube-apiserver refuses it for custom resources.
"""

from __future__ import annotations

import copy
import json
from enum import StrEnum
from typing import Any

import jsonpatch
import yaml

from shared.api import errors
from shared.bodies import JSON


class PatchType(StrEnum):
    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"
    APPLY = "application/apply-patch+yaml"


STRATEGIC_MERGE = "application/strategic-merge-patch+json"

#: Content types advertised in OpenAPI and accepted by :func:`patch_type`.
SUPPORTED = tuple(t.value for t in PatchType)


def patch_type(content_type: str) -> PatchType:
    """Map a PATCH request's Content-Type to a :class:`PatchType`, or raise 415."""
    media = content_type.split(";", 1)[0].strip().lower()
    for candidate in PatchType:
        if media == candidate.value:
            return candidate
    if media == STRATEGIC_MERGE:
        # kube-apiserver's words for a custom resource, which has no strategic merge either.
        raise errors.ApiError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )
    raise errors.ApiError(
        415,
        "UnsupportedMediaType",
        f'the body of the request was in an unknown format: "{media}"; accepted media types include: '
        f"{', '.join(SUPPORTED)}",
    )


class _StringTimestampLoader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings, as Kubernetes' YAML-to-JSON conversion does."""


_StringTimestampLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml(text: str | bytes) -> Any:
    """Parse one YAML document (JSON is YAML too) into plain JSON-compatible values.

    Raises ``ValueError`` on malformed input or when the stream holds several documents.
    """
    try:
        docs = list(yaml.load_all(text, Loader=_StringTimestampLoader))  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from exc
    if len(docs) > 1:
        raise ValueError("expected a single YAML document, got several")
    value = docs[0] if docs else None
    return _stringify_keys(value)


def _stringify_keys(value: Any) -> Any:
    # YAML allows non-string keys (``1:``, ``yes:``); JSON objects do not.
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else json.dumps(k)): _stringify_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stringify_keys(v) for v in value]
    return value


def decode_patch(kind: PatchType, body: bytes) -> Any:
    """Parse a PATCH body for ``kind``; malformed input is a 400."""
    if kind is PatchType.APPLY:
        try:
            doc = load_yaml(body)
        except ValueError as exc:
            raise errors.bad_request(f"the apply patch is not valid YAML or JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise errors.bad_request("the apply patch must be an object")
        return doc
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"the patch is not valid JSON: {exc}") from exc
    if kind is PatchType.JSON and not isinstance(doc, list):
        raise errors.bad_request("a JSON patch must be a list of operations")
    if kind is PatchType.MERGE and not isinstance(doc, dict):
        raise errors.bad_request("a merge patch must be a JSON object")
    return doc


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value and never mutates its inputs."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def merge_diff(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch that turns ``old`` into ``new`` (objects diffed key by key)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return copy.deepcopy(new)
    out: dict[str, Any] = {}
    for key in old:
        if key not in new:
            out[key] = None
    for key, value in new.items():
        if key not in old:
            out[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(old[key], dict):
            inner = merge_diff(old[key], value)
            if inner:
                out[key] = inner
        elif json.dumps(value, sort_keys=True) != json.dumps(old[key], sort_keys=True):
            out[key] = copy.deepcopy(value)
    return out


def json_patch(target: JSON, operations: Any) -> Any:
    """RFC 6902 JSON patch, answered as kube-apiserver answers it.

    A document that is not a list of objects cannot even be decoded: 400.  Every operation that
    cannot be applied -- an unknown or missing ``op``, a path that does not exist, a failed
    ``test`` -- is a 422 Invalid, which is what kube-apiserver returns for the same patch.
    """
    if not isinstance(operations, list):
        raise errors.bad_request("error decoding patch: a JSON patch must be a list of operations")
    if not all(isinstance(op, dict) for op in operations):
        raise errors.bad_request("error decoding patch: every JSON patch operation must be an object")
    try:
        doc: Any = target
        for operation in operations:
            doc = jsonpatch.JsonPatch([_as_kube_applies(doc, operation)]).apply(doc, in_place=False)
        return doc
    except (
        jsonpatch.JsonPatchException,
        jsonpatch.JsonPointerException,
        KeyError,
        IndexError,
        TypeError,
        AttributeError,
    ) as exc:
        # kube-apiserver answers a patch it cannot apply with a generic 422 that does not say why (its
        # NewGenericServerResponse): the same words here, so a client sees what it sees for a CRD.
        raise errors.ApiError(422, "Invalid", JSON_PATCH_REFUSED, details={}) from exc


#: kube-apiserver's message for a JSON patch that cannot be applied.
JSON_PATCH_REFUSED = "the server rejected our request due to an error in our request"


def _as_kube_applies(doc: Any, operation: JSON) -> JSON:
    """``operation``, with a ``replace`` of a member an existing object lacks made an ``add``: the JSON
    patch library kube-apiserver uses replaces a missing object member (RFC 6902 would refuse it)."""
    path = operation.get("path")
    if operation.get("op") != "replace" or not isinstance(path, str) or not path:
        return operation
    pointer = jsonpatch.JsonPointer(path)
    try:
        parent = jsonpatch.JsonPointer.from_parts(pointer.parts[:-1]).resolve(doc)
    except jsonpatch.JsonPointerException:
        return operation
    if isinstance(parent, dict) and pointer.parts[-1] not in parent:
        return {**operation, "op": "add"}
    return operation


def apply(kind: PatchType, current: JSON, doc: Any) -> Any:
    """Apply a decoded merge or JSON patch document to ``current`` (apply patches are
    :mod:`shared.api.fieldmanager`'s: they need field ownership)."""
    if kind is PatchType.APPLY:
        raise ValueError("apply patches are merged by the field manager")
    if kind is PatchType.MERGE:
        return merge_patch(current, doc)
    return json_patch(current, doc)


def states_resource_version(kind: PatchType, doc: Any) -> bool:
    """True if the patch itself sets ``metadata.resourceVersion`` (a precondition by the client)."""
    if kind is PatchType.JSON:
        return any(
            isinstance(op, dict)
            and op.get("path") == "/metadata/resourceVersion"
            and op.get("op") in ("add", "replace")
            for op in (doc if isinstance(doc, list) else [])
        )
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get("resourceVersion"), str) and meta["resourceVersion"] != ""
