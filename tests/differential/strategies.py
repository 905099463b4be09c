"""Hypothesis strategies: values from a definition's schema, and request sequences built from them.

Written by hand on purpose: the values must stay near the schema's edges (bounds, enums, nulls,
missing required fields) rather than anywhere in JSON, and the sequences must address a handful of
names so that later requests meet the objects earlier ones made.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.differential.operations import (
    UNDECLARED,
    Apply,
    Create,
    Delete,
    DeleteCollection,
    Get,
    Invalid,
    JsonPatch,
    List,
    MergePatch,
    Operation,
    StatusRequest,
    Update,
)

JSON = dict[str, Any]

#: The names a sequence addresses: few, so requests meet each other's objects.
NAMES = ("a", "b", "c")
#: Label and annotation keys and values: short, so the backing object's prefixed keys stay valid
#: (see differences.INTENTIONAL["long-metadata-keys"]).
LABEL_KEYS = ("app", "tier", "example.com/team")
LABEL_VALUES = ("x", "y", "")
ANNOTATION_KEYS = ("note", "example.com/owner")
#: Field managers of applies: several, so applies meet each other's fields (conflicts, shared ownership).
MANAGERS = ("m1", "m2", "m3")
LABEL_SELECTORS = ("", "app=x", "app!=x", "tier", "!tier", "app in (x,y)", "app notin (y)", "app=x,tier",
                   "example.com/team=y")
FIELD_SELECTORS = ("", "metadata.name=a", "metadata.name!=b", "metadata.namespace={ns}",
                   "metadata.name=a,metadata.namespace={ns}")
#: Quantities, with one a Go pattern refuses and Python's ``$`` would let through (a final newline).
QUANTITIES = ("1Gi", "10Gi", "500m", "2", 1, 3, "0.5", "x1", "1Gi\n")
#: Finalizers: domain-qualified, two kube-apiserver warns about (no domain; a dot but no path), one it knows,
#: and one that is no qualified name (refused).
FINALIZERS = ("example.com/hold", "example.com/also", "plain", "dotted.name", "orphan", "Not Valid")
_OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "0d6f8b52-0000-4000-8000-000000000001"}
#: ownerReferences: none, one, a controller and a blocking one, and two refused ones (no uid; two controllers).
OWNER_REFERENCES: tuple[tuple[JSON, ...], ...] = (
    (),
    (_OWNER,),
    ({**_OWNER, "controller": True, "blockOwnerDeletion": True},),
    ({k: v for k, v in _OWNER.items() if k != "uid"},),
    ({**_OWNER, "controller": True}, {**_OWNER, "name": "other", "uid": _OWNER["uid"][:-1] + "2", "controller": True}),
)
STATUSES: tuple[JSON, ...] = ({}, {"phase": "x"}, {"conditions": [{"type": "Ready", "status": "True"}]})


def _limited(values: st.SearchStrategy[Any], node: JSON) -> st.SearchStrategy[Any]:
    """``values``, or now and then null (defaulted or refused, depending on the schema)."""
    return st.one_of(values, values, values, st.none()) if "default" in node or node.get("nullable") else values


def value(node: JSON, depth: int = 0) -> st.SearchStrategy[Any]:
    """A value for schema ``node``: mostly valid, sometimes just outside it."""
    if "enum" in node:
        return _limited(st.sampled_from([*node["enum"], "bogus"]), node)
    if node.get("x-kubernetes-int-or-string") or _int_or_string(node):
        return _limited(st.sampled_from(QUANTITIES), node)
    kind = node.get("type")
    if kind == "integer":
        low = int(node.get("minimum", -1))
        high = int(node.get("maximum", low + 12))
        return _limited(st.integers(low - 1, high + 1), node)
    if kind == "number":
        return _limited(st.floats(-2, 20, allow_nan=False, allow_infinity=False), node)
    if kind == "boolean":
        return _limited(st.booleans(), node)
    if kind == "string":
        choices = ["", "x", "eu-west-1", "10.1.0.0/16", "10.1.0.0/16\n"]
        if isinstance(node.get("default"), str):
            choices.append(node["default"])
        return _limited(st.sampled_from(choices), node)
    if kind == "array":
        items = node.get("items") if isinstance(node.get("items"), dict) else {}
        return _limited(st.lists(value(items, depth + 1), max_size=2), node)
    if kind == "object" or "properties" in node or "additionalProperties" in node:
        return _limited(obj(node, depth), node)
    return st.sampled_from(["free", 1, True])


def _int_or_string(node: JSON) -> bool:
    types = {b.get("type") for b in node.get("anyOf") or [] if isinstance(b, dict)}
    return types == {"integer", "string"}


def obj(node: JSON, depth: int = 0, *, all_optional: bool = False) -> st.SearchStrategy[JSON]:
    """An object of ``node``: declared properties (required ones present unless ``all_optional``),
    or a small free-form map."""
    props = node.get("properties")
    if isinstance(props, dict):
        required = set() if all_optional else set(node.get("required") or [])
        fixed = {k: value(v, depth + 1) for k, v in props.items() if k in required}
        optional = {k: value(v, depth + 1) for k, v in props.items() if k not in required}
        return st.fixed_dictionaries(fixed, optional=optional)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return st.dictionaries(st.sampled_from(("k1", "k2")), value(extra, depth + 1), max_size=2)
    return st.just({})


def labels() -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2)


def annotations() -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.sampled_from(ANNOTATION_KEYS), st.sampled_from(("v", "")), max_size=1)


def finalizers() -> st.SearchStrategy[tuple[str, ...]]:
    """Mostly none, else one or two (the same one twice now and then)."""
    some = st.lists(st.sampled_from(FINALIZERS), min_size=1, max_size=2).map(tuple)
    return st.one_of(st.just(()), st.just(()), some)


def owners() -> st.SearchStrategy[tuple[JSON, ...]]:
    return st.one_of(st.just(()), st.just(()), st.sampled_from(OWNER_REFERENCES))


def _metadata_patch() -> st.SearchStrategy[JSON]:
    """A merge patch of metadata: labels, finalizers and ownerReferences set, replaced or removed (null)."""
    return st.fixed_dictionaries({}, optional={
        "labels": _label_patch(),
        "finalizers": st.one_of(st.none(), finalizers().map(list)),
        "ownerReferences": st.one_of(st.none(), owners().map(lambda refs: [dict(r) for r in refs])),
    })


def _label_patch() -> st.SearchStrategy[dict[str, str | None]]:
    return st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from((*LABEL_VALUES, None)), max_size=2)


def _json_patch_ops(schema: JSON) -> st.SearchStrategy[list[JSON]]:
    props = schema.get("properties") or {}
    keys = st.sampled_from(sorted(props))

    def on_key(key: str) -> st.SearchStrategy[JSON]:
        path = f"/spec/{key}"
        return st.one_of(
            value(props[key]).map(lambda v: {"op": "replace", "path": path, "value": v}),
            value(props[key]).map(lambda v: {"op": "add", "path": path, "value": v}),
            st.just({"op": "remove", "path": path}),
            value(props[key]).map(lambda v: {"op": "test", "path": path, "value": v}),
        )

    one = st.one_of(
        keys.flatmap(on_key),
        st.sampled_from(LABEL_VALUES).map(lambda v: {"op": "add", "path": "/metadata/labels/app", "value": v}),
        st.just({"op": "remove", "path": "/metadata/labels/app"}),
    )
    return st.lists(one, min_size=1, max_size=2)


def operation(schema: JSON) -> st.SearchStrategy[Operation]:
    names = st.sampled_from(NAMES)
    spec = obj(schema)
    dry = st.booleans()
    validation = st.sampled_from((None, "Strict", "Warn", "Ignore"))
    unknown = st.sampled_from((None, *UNDECLARED))
    return st.one_of(
        st.builds(Create, names, spec, labels(), annotations(), dry, validation, unknown, finalizers(), owners()),
        st.builds(Get, names),
        st.builds(Update, names, spec, labels(), st.sampled_from(("current", "none", "stale")), dry, validation,
                  unknown),
        st.builds(MergePatch, names,
                  st.fixed_dictionaries({}, optional={"spec": obj(schema, all_optional=True),
                                                      "metadata": _metadata_patch()}),
                  dry),
        st.builds(JsonPatch, names, _json_patch_ops(schema), dry),
        st.builds(Apply, names, st.sampled_from(MANAGERS), obj(schema, all_optional=True), labels(),
                  st.booleans(), dry),
        st.builds(Delete, names, st.sampled_from((None, "uid", "bad-uid", "rv", "stale-rv")), dry),
        st.builds(List, st.sampled_from(LABEL_SELECTORS), st.sampled_from(FIELD_SELECTORS)),
        st.builds(DeleteCollection, st.sampled_from(LABEL_SELECTORS), st.sampled_from(FIELD_SELECTORS), dry),
        st.builds(StatusRequest, names, st.sampled_from(("get", "merge", "put")), st.sampled_from(STATUSES)),
        st.builds(Invalid, names, st.sampled_from(Invalid.WHAT)),
    )


def sequence(schema: JSON, max_size: int = 8) -> st.SearchStrategy[list[Operation]]:
    """A request sequence: starting with a create, so most sequences have an object to work on."""
    first = st.builds(Create, st.sampled_from(NAMES), obj(schema), labels(), annotations(), st.just(False),
                      st.none(), st.none(), finalizers(), owners())
    return st.tuples(first, st.lists(operation(schema), max_size=max_size - 1)).map(lambda t: [t[0], *t[1]])
