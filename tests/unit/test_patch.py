"""Merge patch, JSON patch, apply patch and patch content types."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from shared.api import errors, patch
from shared.api.patch import PatchType

CURRENT: dict[str, Any] = {
    "apiVersion": "apps.example.io/v1",
    "kind": "Thing",
    "metadata": {
        "name": "a",
        "namespace": "ns",
        "resourceVersion": "7",
        "uid": "u-1",
        "labels": {"keep": "1", "drop": "2"},
        "annotations": {"note": "x"},
    },
    "spec": {"size": 1, "nested": {"a": 1, "b": 2}, "list": [1, 2]},
    "status": {"ready": True},
}


@pytest.mark.parametrize(
    ("target", "doc", "expected"),
    [
        # RFC 7386 appendix A examples (a selection).
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_rfc_examples(target: Any, doc: Any, expected: Any) -> None:
    before = copy.deepcopy(target)
    assert patch.merge_patch(target, doc) == expected
    assert target == before  # inputs are never mutated


def test_json_patch_applies_without_mutating() -> None:
    current = copy.deepcopy(CURRENT)
    result = patch.json_patch(
        current,
        [
            {"op": "replace", "path": "/spec/size", "value": 3},
            {"op": "add", "path": "/spec/list/-", "value": 3},
            {"op": "remove", "path": "/metadata/labels/drop"},
            {"op": "test", "path": "/metadata/uid", "value": "u-1"},
        ],
    )
    assert result["spec"]["size"] == 3
    assert result["spec"]["list"] == [1, 2, 3]
    assert result["metadata"]["labels"] == {"keep": "1"}
    assert current == CURRENT


def test_json_patch_replaces_a_missing_object_member_as_kube_does() -> None:
    result = patch.json_patch(copy.deepcopy(CURRENT), [{"op": "replace", "path": "/spec/missing", "value": 1}])
    assert result["spec"]["missing"] == 1


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ({"op": "add"}, 400),  # not a list
        ([1, 2], 400),  # operations that are not objects cannot be decoded
        ([{"op": "frobnicate", "path": "/a"}], 422),  # kube-apiserver: 422 for any op it cannot apply
        ([{"path": "/a", "value": 1}], 422),
        ([{"op": "remove", "path": "/spec/missing"}], 422),
        ([{"op": "replace", "path": "/nope/deeper", "value": 1}], 422),
        ([{"op": "test", "path": "/spec/size", "value": 99}], 422),
    ],
)
def test_json_patch_errors(ops: Any, code: int) -> None:
    with pytest.raises(errors.ApiError) as err:
        patch.json_patch(copy.deepcopy(CURRENT), ops)
    assert err.value.code == code


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"a": 1, "b": {"c": 2, "d": 3}}, {"a": 1, "b": {"c": 4}}),
        ({"a": [1, 2]}, {"a": [2]}),
        ({"a": 1}, {"a": 1.0}),
        ({"a": {"b": 1}}, {"a": "x"}),
        ({"x": {"y": 1}}, {}),
    ],
)
def test_merge_diff_is_the_patch_from_old_to_new(old: Any, new: Any) -> None:
    diff = patch.merge_diff(old, new)
    assert json.dumps(patch.merge_patch(old, diff), sort_keys=True) == json.dumps(new, sort_keys=True)


def test_merge_diff_names_only_what_changed() -> None:
    assert patch.merge_diff({"a": 1, "b": {"c": 2, "d": 3}}, {"a": 1, "b": {"c": 4}}) == {"b": {"c": 4, "d": None}}
    assert patch.merge_diff({"a": {"b": 1}}, {"a": {"b": 1}}) == {}


def test_apply_patches_belong_to_the_field_manager() -> None:
    with pytest.raises(ValueError):
        patch.apply(PatchType.APPLY, copy.deepcopy(CURRENT), {})


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/merge-patch+json", PatchType.MERGE),
        ("application/merge-patch+json; charset=utf-8", PatchType.MERGE),
        ("application/json-patch+json", PatchType.JSON),
        ("application/apply-patch+yaml", PatchType.APPLY),
    ],
)
def test_patch_type(content_type: str, expected: PatchType) -> None:
    assert patch.patch_type(content_type) is expected


@pytest.mark.parametrize(
    "content_type", ["application/strategic-merge-patch+json", "application/json", "", "text/plain"]
)
def test_patch_type_unsupported_is_415(content_type: str) -> None:
    with pytest.raises(errors.ApiError) as err:
        patch.patch_type(content_type)
    assert err.value.code == 415
    assert err.value.reason == "UnsupportedMediaType"


def test_decode_patch() -> None:
    assert patch.decode_patch(PatchType.MERGE, b'{"spec": {"a": 1}}') == {"spec": {"a": 1}}
    assert patch.decode_patch(PatchType.JSON, b"[]") == []
    yaml_doc = b"apiVersion: v1\nkind: Thing\nmetadata:\n  creationTimestamp: 2024-01-02T03:04:05Z\n"
    decoded = patch.decode_patch(PatchType.APPLY, yaml_doc)
    assert decoded["metadata"]["creationTimestamp"] == "2024-01-02T03:04:05Z"  # stays a string
    assert patch.decode_patch(PatchType.APPLY, b'{"kind": "Thing"}') == {"kind": "Thing"}


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (PatchType.MERGE, b"{not json"),
        (PatchType.MERGE, b"[1]"),
        (PatchType.JSON, b'{"op": "add"}'),
        (PatchType.APPLY, b"a: [unclosed"),
        (PatchType.APPLY, b"- just\n- a list\n"),
        (PatchType.APPLY, b"a: 1\n---\nb: 2\n"),
    ],
)
def test_decode_patch_rejects(kind: PatchType, body: bytes) -> None:
    with pytest.raises(errors.ApiError) as err:
        patch.decode_patch(kind, body)
    assert err.value.code == 400


def test_states_resource_version() -> None:
    assert patch.states_resource_version(PatchType.MERGE, {"metadata": {"resourceVersion": "1"}})
    assert not patch.states_resource_version(PatchType.MERGE, {"metadata": {"resourceVersion": None}})
    assert not patch.states_resource_version(PatchType.MERGE, {"spec": {}})
    assert patch.states_resource_version(
        PatchType.JSON, [{"op": "replace", "path": "/metadata/resourceVersion", "value": "1"}]
    )
    assert not patch.states_resource_version(PatchType.JSON, [{"op": "replace", "path": "/spec/a", "value": 1}])


def test_load_yaml_stringifies_non_string_keys() -> None:
    assert patch.load_yaml("2: a\ntrue: b\n") == {"2": "a", "true": "b"}
    assert patch.load_yaml("") is None
