"""Unknown fields as a CRD's structural pruning finds them (checked against kube-apiserver in
tests/contract/test_field_management.py, ``fieldValidation``)."""

from __future__ import annotations

import json
from typing import Any

from shared.schema.pruning import prune_unknown, unknown_fields

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
    "size": {"type": "integer"},
    "users": {"type": "object", "additionalProperties": {"type": "object", "properties": {"password": {}}}},
    "endpoints": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
}}}}


def test_unknown_fields_are_named_as_kubes_strict_decoder_names_them() -> None:
    obj = {"apiVersion": "v", "kind": "K", "metadata": {"name": "a", "bogus": 1}, "extra": 1,
           "spec": {"size": 1, "nope": 2, "users": {"a": {"password": "p", "x": 1}},
                    "endpoints": [{"name": "e", "port": 1}], "free": {"anything": {"goes": 1}}}}
    assert unknown_fields(SCHEMA, obj) == ["extra", "metadata.bogus", "spec.endpoints[0].port", "spec.nope",
                                           "spec.users.a.x"]
    assert prune_unknown(SCHEMA, obj) == {
        "apiVersion": "v", "kind": "K", "metadata": {"name": "a"},
        "spec": {"size": 1, "users": {"a": {"password": "p"}}, "endpoints": [{"name": "e"}],
                 "free": {"anything": {"goes": 1}}}}
    assert "nope" in obj["spec"]  # not modified


def test_identity_fields_are_always_known() -> None:
    bare = {"type": "object", "properties": {"spec": {"type": "object"}}}
    assert unknown_fields(bare, {"apiVersion": "v", "kind": "K", "metadata": {}, "spec": {"x": 1}}) == []


def test_duplicate_fields_are_found_innermost_first_and_the_last_value_wins() -> None:
    from shared.bodies import clone
    from shared.server.body import _pairs, duplicate_fields, json_duplicates

    raw = b'{"spec":{"replicas":2,"users":{"a":{"password":"x","password":"y"}},"replicas":3},"l":[{"k":1,"k":2}]}'
    assert json_duplicates(raw) == ["spec.users.a.password", "spec.replicas", "l[0].k"]
    decoded = json.loads(raw, object_pairs_hook=_pairs)
    assert clone(decoded) == {"spec": {"replicas": 3, "users": {"a": {"password": "y"}}}, "l": [{"k": 2}]}
    assert duplicate_fields({"a": 1}) == [] and json_duplicates(b"not json") == []
