"""The field manager on plain data: FieldsV1, typed set/merge/compare/remove, Apply/Update, kube's layers.

The same behaviours are checked end to end against kube-apiserver (a CRD with the same schema) in
tests/contract/test_field_management.py; these pin the engine's rules one by one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.api import errors
from shared.api.fieldmanager import (
    FieldManager,
    Updater,
    compare,
    field_set,
    from_fields_v1,
    managed,
    merge,
    to_fields_v1,
)
from shared.api.fieldmanager.fieldpath import field, key_element, path_string, value_element
from shared.api.fieldmanager.managed import decode, encode, manager_from_user_agent
from shared.api.fieldmanager.typed import MISSING, remove_items

SPEC: dict[str, Any] = {
    "type": "object",
    "properties": {
        "replicas": {"type": "integer", "default": 2},
        "size": {"type": "string"},
        "resources": {"type": "object", "properties": {"cpu": {"x-kubernetes-int-or-string": True}}},
        "users": {"type": "object", "additionalProperties": {
            "type": "object", "properties": {"password": {"type": "string"}, "replication": {"type": "boolean"}}}},
        "extensions": {"type": "array", "items": {"type": "string"}},
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "endpoints": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                                 "port": {"type": "integer"}}}},
        "atomic": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}
OBJECT: dict[str, Any] = {"type": "object", "properties": {"spec": SPEC, "status": {
    "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
VERSION = "example.io/v1"
T = "2026-01-01T00:00:00Z"


def obj(spec: Any = None, **meta: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": VERSION, "kind": "Thing", "metadata": {"name": "a", "namespace": "n", **meta}}
    if spec is not None:
        body["spec"] = spec
    return body


def stored(new: dict[str, Any], entries: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {**new, "metadata": {**new["metadata"], "uid": "u", "managedFields": entries}}


def owners(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["manager"]: e["fieldsV1"] for e in entries}


# ---------------------------------------------------------------------------------------- FieldsV1


def test_fields_v1_round_trip_with_every_element_kind() -> None:
    fields = frozenset({
        (field("spec"), field("replicas")),
        (field("spec"), field("users"), field("a")),
        (field("spec"), field("users"), field("a"), field("password")),
        (field("spec"), field("endpoints"), key_element({"name": "pg"})),
        (field("spec"), field("endpoints"), key_element({"name": "pg"}), field("port")),
        (field("spec"), field("tags"), value_element("x")),
        (field("spec"), field("list"), ("i", 0)),
    })
    doc = to_fields_v1(fields)
    assert doc == {"f:spec": {
        "f:endpoints": {'k:{"name":"pg"}': {".": {}, "f:port": {}}},
        "f:list": {"i:0": {}},
        "f:replicas": {},
        "f:tags": {'v:"x"': {}},
        "f:users": {"f:a": {".": {}, "f:password": {}}},
    }}
    assert from_fields_v1(json.loads(json.dumps(doc))) == fields


def test_path_strings_are_kubes() -> None:
    assert path_string((field("spec"), field("replicas"))) == ".spec.replicas"
    assert path_string((field("spec"), field("endpoints"), key_element({"name": "pg", "port": 1}))) == \
        '.spec.endpoints[name="pg",port=1]'
    assert path_string((field("spec"), field("tags"), value_element("x"))) == '.spec.tags[="x"]'


# ---------------------------------------------------------------------------------------- typed


def test_field_set_of_each_node_kind() -> None:
    value = {"replicas": 1, "resources": {}, "users": {"a": {"password": "p"}}, "extensions": ["x"],
             "tags": ["t"], "endpoints": [{"name": "pg", "port": 1}], "atomic": {"k": "v"}, "free": {"x": {"y": 1}}}
    assert to_fields_v1(field_set(value, SPEC)) == {
        "f:atomic": {}, "f:endpoints": {'k:{"name":"pg"}': {".": {}, "f:name": {}, "f:port": {}}},
        "f:extensions": {}, "f:free": {"f:x": {".": {}, "f:y": {}}}, "f:replicas": {}, "f:resources": {},
        "f:tags": {'v:"t"': {}}, "f:users": {"f:a": {".": {}, "f:password": {}}},
    }


def test_merge_keeps_granular_members_and_replaces_leaves() -> None:
    live = {"replicas": 1, "users": {"a": {"password": "p"}}, "extensions": ["x", "y"], "tags": ["a", "b"],
            "endpoints": [{"name": "pg", "port": 1}], "atomic": {"k": "v"}}
    config = {"users": {"b": {}}, "extensions": ["z"], "tags": ["c"], "endpoints": [{"name": "pg", "port": 2}],
              "atomic": {"j": "w"}}
    assert merge(live, config, SPEC) == {
        "replicas": 1, "users": {"a": {"password": "p"}, "b": {}}, "extensions": ["z"], "tags": ["a", "b", "c"],
        "endpoints": [{"name": "pg", "port": 2}], "atomic": {"j": "w"}}


def test_compare_reports_new_granular_nodes_themselves() -> None:
    result = compare({"replicas": 1}, {"replicas": 2, "users": {"a": {"password": "p"}}}, SPEC)
    assert result.modified == {(field("replicas"),)}
    assert result.added == {(field("users"),), (field("users"), field("a")),
                            (field("users"), field("a"), field("password"))}
    assert compare({"replicas": 1}, {}, SPEC).removed == {(field("replicas"),)}
    assert compare({"replicas": 1}, {"replicas": 1.0}, SPEC).modified  # 1 and 1.0 differ, as in Go


def test_remove_items_leaves_null_for_an_emptied_node() -> None:
    value = {"replicas": 1, "users": {"a": {"password": "p"}}}
    assert remove_items(value, frozenset({(field("users"), field("a"), field("password"))}), SPEC) == \
        {"replicas": 1, "users": {"a": None}}
    assert remove_items(value, frozenset({(field("users"),)}), SPEC) == {"replicas": 1}


# ---------------------------------------------------------------------------------------- Updater


def test_updater_apply_is_missing_when_nothing_changes() -> None:
    updater = Updater(SPEC)
    new, managers = updater.apply({"replicas": 1}, {"replicas": 1}, VERSION, {}, "m", force=False)
    assert new is MISSING and set(managers) == {"m"}


# ---------------------------------------------------------------------------------------- FieldManager


@pytest.fixture
def fm() -> FieldManager:
    return FieldManager(OBJECT, VERSION)


def test_alice_bob_carol(fm: FieldManager) -> None:
    new, entries, _ = fm.apply(None, obj({"replicas": 2}), "alice", False, T)
    live = stored(new, entries)
    with pytest.raises(errors.ApiError) as conflict:
        fm.apply(live, obj({"replicas": 3}), "bob", False, T)
    assert conflict.value.code == 409 and conflict.value.reason == "Conflict"
    assert conflict.value.message == 'Apply failed with 1 conflict: conflict with "alice": .spec.replicas'
    assert conflict.value.details == {"causes": [
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".spec.replicas"}]}
    new, entries, changed = fm.apply(live, obj({"size": "5Gi"}), "carol", False, T)
    assert changed and new["spec"] == {"replicas": 2, "size": "5Gi"}
    assert owners(entries) == {"alice": {"f:spec": {"f:replicas": {}}}, "carol": {"f:spec": {"f:size": {}}}}


def test_force_takes_ownership_and_a_multi_conflict_message(fm: FieldManager) -> None:
    new, entries, _ = fm.apply(None, obj({"replicas": 2, "size": "1Gi", "tags": ["a"]}), "alice", False, T)
    live = stored(new, entries)
    with pytest.raises(errors.ApiError) as conflict:
        fm.apply(live, obj({"replicas": 3, "size": "2Gi"}), "bob", False, T)
    assert conflict.value.message == ('Apply failed with 2 conflicts: conflicts with "alice":\n'
                                      "- .spec.replicas\n- .spec.size")
    new, entries, _ = fm.apply(live, obj({"replicas": 3, "size": "2Gi"}), "bob", True, T)
    assert owners(entries) == {"alice": {"f:spec": {"f:tags": {'v:"a"': {}}}},
                               "bob": {"f:spec": {"f:replicas": {}, "f:size": {}}}}


def test_applying_null_to_a_field_another_manager_set_conflicts(fm: FieldManager) -> None:
    """Found by the differential tier: the null was dropped before conflicts were looked for, so the
    apply silently took the field (and removed it) where kube-apiserver answers 409."""
    new, entries, _ = fm.apply(None, obj({"size": "1Gi"}), "alice", False, T)
    live = stored(new, entries)
    with pytest.raises(errors.ApiError) as conflict:
        fm.apply(live, obj({"size": None}), "bob", False, T)
    assert conflict.value.message == 'Apply failed with 1 conflict: conflict with "alice": .spec.size'
    new, entries, _ = fm.apply(live, obj({"size": None}), "bob", True, T)
    assert "size" not in new["spec"] and owners(entries) == {"bob": {"f:spec": {"f:size": {}}}}
    # Null onto a map or struct is an empty one to structured merge: nothing changes, nothing conflicts.
    new, entries, _ = fm.apply(None, obj({"resources": {"cpu": 1}, "users": {"a": {}}}), "alice", False, T)
    new, _, _ = fm.apply(stored(new, entries), obj({"resources": None, "users": None}), "bob", False, T)
    assert new["spec"] == {"resources": {"cpu": 1}, "users": {"a": {}}}


def test_dropped_fields_go_unless_someone_else_owns_them(fm: FieldManager) -> None:
    new, entries, _ = fm.apply(None, obj({"replicas": 3, "size": "1Gi", "users": {"a": {"password": "p"}}}),
                               "alice", False, T)
    new, entries, _ = fm.apply(stored(new, entries), obj({"size": "1Gi"}), "bob", False, T)
    new, entries, _ = fm.apply(stored(new, entries), obj({"replicas": 3}), "alice", False, T)
    assert new["spec"] == {"replicas": 3, "size": "1Gi"}


def test_update_takes_what_it_changed_from_everyone(fm: FieldManager) -> None:
    new, entries, _ = fm.apply(None, obj({"replicas": 2, "size": "1Gi"}), "alice", False, T)
    live = stored(new, entries)
    patched = stored(obj({"replicas": 4, "size": "1Gi"}), entries)
    after = fm.update(live, patched, "kubectl-patch", T)
    assert after is not None
    assert owners(after) == {"alice": {"f:spec": {"f:size": {}}}, "kubectl-patch": {"f:spec": {"f:replicas": {}}}}
    assert [e["operation"] for e in after] == ["Apply", "Update"]


def test_create_owns_everything_given_but_identity(fm: FieldManager) -> None:
    entries = fm.update(None, obj({"replicas": 2}, labels={"a": "b"}), "kubectl-create", T)
    assert entries == [{"manager": "kubectl-create", "operation": "Update", "apiVersion": VERSION, "time": T,
                        "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                                                               "f:spec": {".": {}, "f:replicas": {}}}}]


def test_a_create_owns_every_node_it_sets_of_each_kind(fm: FieldManager) -> None:
    """A create compares the object against nothing (its own walk, :func:`typed._added_below`): every node of
    every kind is the creator's, empty and null ones included, granular nodes with their ``.``; status is
    nobody's.  Recorded from the general comparison before the create got its own walk."""
    spec = {"replicas": 1, "size": None, "resources": {}, "users": {"a": {"password": "p"}, "b": {}, "c": None},
            "extensions": ["x", "y"], "tags": ["t", "u"], "endpoints": [{"name": "pg", "port": 1}, {"name": "e"}],
            "atomic": {"k": "v"}, "free": {"x": {"y": [1, {"z": 2}]}, "e": []}}
    new = {**obj(spec, labels={"a": "b"}, finalizers=["f/x"]), "status": {"phase": "x"}}
    entries = fm.update(None, new, "kubectl-create", T)
    assert entries is not None and len(entries) == 1
    assert entries[0]["fieldsV1"] == {
        "f:metadata": {"f:finalizers": {".": {}, 'v:"f/x"': {}}, "f:labels": {".": {}, "f:a": {}}},
        "f:spec": {
            ".": {}, "f:atomic": {},
            "f:endpoints": {".": {}, 'k:{"name":"e"}': {".": {}, "f:name": {}},
                            'k:{"name":"pg"}': {".": {}, "f:name": {}, "f:port": {}}},
            "f:extensions": {}, "f:free": {".": {}, "f:e": {}, "f:x": {".": {}, "f:y": {}}}, "f:replicas": {},
            "f:resources": {}, "f:size": {}, "f:tags": {".": {}, 'v:"t"': {}, 'v:"u"': {}},
            "f:users": {".": {}, "f:a": {".": {}, "f:password": {}}, "f:b": {}, "f:c": {}},
        },
    }


def test_an_untracked_object_stays_untracked_until_applied(fm: FieldManager) -> None:
    live = {**obj({"replicas": 1}), "metadata": {"name": "a", "namespace": "n", "uid": "u"}}
    assert fm.update(live, obj({"replicas": 2}), "kubectl-edit", T) is None
    _, entries, _ = fm.apply(live, obj({"size": "1Gi"}), "gitops", False, T)
    assert owners(entries) == {"before-first-apply": {"f:spec": {".": {}, "f:replicas": {}}},
                               "gitops": {"f:spec": {"f:size": {}}}}


def test_an_update_that_changes_nothing_adds_no_entry_and_managed_fields_can_be_reset(fm: FieldManager) -> None:
    new, entries, _ = fm.apply(None, obj({"replicas": 2}), "alice", False, T)
    live = stored(new, entries)
    assert owners(fm.update(live, live, "kubectl-edit", T) or []) == {"alice": {"f:spec": {"f:replicas": {}}}}
    reset = {**live, "metadata": {**live["metadata"], "managedFields": []}}
    assert not fm.update(live, reset, "kubectl-edit", T)  # no entries, and then untracked


def test_entries_are_sorted_and_merged_as_kube_does() -> None:
    entries = [
        {"manager": "z", "operation": "Update", "apiVersion": VERSION, "time": "2026-01-01T00:00:01Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:a": {}}}},
        {"manager": "z", "operation": "Update", "apiVersion": VERSION, "time": T,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:b": {}}}},
        {"manager": "b", "operation": "Apply", "apiVersion": VERSION, "time": "2026-01-01T00:00:09Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:c": {}}}},
        {"manager": "a", "operation": "Apply", "apiVersion": VERSION, "time": "2026-01-01T00:00:09Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:d": {}}}},
    ]
    out = encode(decode(entries))
    assert [(e["manager"], e["operation"]) for e in out] == [("a", "Apply"), ("b", "Apply"), ("z", "Update")]
    assert out[2]["fieldsV1"] == {"f:spec": {"f:a": {}, "f:b": {}}}


def test_update_managers_are_capped_at_ten(fm: FieldManager) -> None:
    live = stored(obj({}), fm.update(None, obj({}, labels={"l0": "v"}), "m0", "2026-01-01T00:00:00Z"))
    for i in range(1, 12):
        labels = {f"l{j}": "v" for j in range(i + 1)}
        new = obj({}, labels=labels)
        entries = fm.update(live, new, f"m{i}", f"2026-01-01T00:00:{i:02d}Z")
        live = stored(new, entries)
    found = owners(live["metadata"]["managedFields"])
    assert len(found) == 10 and "ancient-changes" in found and "m11" in found and "m0" not in found
    assert found["ancient-changes"]["f:metadata"]["f:labels"].keys() >= {".", "f:l0", "f:l1"}


def test_manager_from_user_agent() -> None:
    assert manager_from_user_agent("kubectl-client-side-apply/v1.33.0 (linux/amd64) kubernetes/abc") == \
        "kubectl-client-side-apply"
    assert manager_from_user_agent("Python-urllib/3.11") == "Python-urllib"


def test_kubectl_takes_over_what_client_side_apply_set_as_it_still_is(fm: FieldManager) -> None:
    last = json.dumps({"apiVersion": VERSION, "kind": "Thing", "metadata": {"name": "a", "namespace": "n"},
                       "spec": {"replicas": 2, "size": "1Gi"}}) + "\n"
    created = obj({"replicas": 2, "size": "1Gi"},
                  annotations={"kubectl.kubernetes.io/last-applied-configuration": last})
    live = stored(created, fm.update(None, created, "kubectl-client-side-apply", T))
    with pytest.raises(errors.ApiError):
        fm.apply(live, obj({"replicas": 3}), "gitops", False, T)
    new, entries, _ = fm.apply(live, obj({"replicas": 3, "size": "1Gi"}), "kubectl", False, T)
    assert new["spec"] == {"replicas": 3, "size": "1Gi"}
    assert owners(entries)["kubectl"] == {"f:spec": {"f:replicas": {}, "f:size": {}}}
    # The annotation follows what kubectl applied.
    synced = json.loads(new["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert synced["spec"] == {"replicas": 3, "size": "1Gi"}
    # A field changed since the client-side apply is not the annotation's any more: a conflict again.
    edited = stored({**created, "spec": {"replicas": 5, "size": "1Gi"}},
                    fm.update(live, {**created, "spec": {"replicas": 5, "size": "1Gi"}}, "kubectl-edit", T))
    with pytest.raises(errors.ApiError) as conflict:
        fm.apply(edited, obj({"replicas": 3, "size": "1Gi"}), "kubectl", False, T)
    assert '"kubectl-edit"' in conflict.value.message


def test_the_time_of_a_write_is_the_current_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """Formatted once per second, so a write in the next second must not get the last one's time."""
    seconds = iter([1_700_000_000.1, 1_700_000_000.9, 1_700_000_001.0])
    monkeypatch.setattr(managed.clock, "time", lambda: next(seconds))
    assert managed.now() == "2023-11-14T22:13:20Z"
    assert managed.now() == "2023-11-14T22:13:20Z"
    assert managed.now() == "2023-11-14T22:13:21Z"


def test_a_parsed_manager_identifier_is_a_copy_of_the_kept_one() -> None:
    """Identifiers are parsed once and kept: what a caller changes in its copy must not reach the next one."""
    ident = managed.identifier("alice", "Update", VERSION)
    assert ident is managed.identifier("alice", "Update", VERSION)
    managed._parse_identifier(ident)["manager"] = "mallory"
    assert managed._parse_identifier(ident) == {"manager": "alice", "operation": "Update", "apiVersion": VERSION}


# ------------------------------------------------------------------------- creates kept per shape
SAME_SHAPE = [
    obj({"replicas": 3, "size": "1Gi", "resources": {"cpu": 2}, "users": {"a": {"password": "x"}},
         "tags": ["a", "b"], "endpoints": [{"name": "http", "port": 80}], "atomic": {"k": "v"},
         "free": {"x": {"y": 1}}, "extensions": []}, labels={"app": "db"}),
    obj({"replicas": 9, "size": "2Gi", "resources": {"cpu": 7}, "users": {"a": {"password": "other"}},
         "tags": ["a", "b"], "endpoints": [{"name": "http", "port": 80}], "atomic": {"k": "w"},
         "free": {"x": {"y": 2}}, "extensions": []}, labels={"app": "web"}, name="b"),
]


def _changed(**spec: Any) -> dict[str, Any]:
    """The first object of :data:`SAME_SHAPE` with some of its spec's fields replaced."""
    return {**SAME_SHAPE[0], "spec": {**SAME_SHAPE[0]["spec"], **spec}}


#: Objects of other shapes whose fields differ from the first of :data:`SAME_SHAPE`'s.
OTHER_FIELDS = [
    _changed(tags=["a", "c"]),  # a set's values are fields
    _changed(endpoints=[{"name": "grpc", "port": 80}]),  # so are an associative list's keys
    _changed(resources={}),  # an empty map is a leaf
    _changed(users={"b": {"password": "x"}}),  # map keys are fields
    _changed(free={"x": None}),
]
#: Another shape (a string where an integer was) with the same fields.
OTHER_SHAPES = [*OTHER_FIELDS, _changed(resources={"cpu": "500m"})]


def _fresh(new: dict[str, Any], manager: str, time: str) -> list[dict[str, Any]] | None:
    """The entries computed from nothing: a FieldManager on a schema no other create has used."""
    return FieldManager(json.loads(json.dumps(OBJECT)), VERSION).update(None, new, manager, time)


def test_a_create_of_a_kept_shape_records_what_a_fresh_one_does() -> None:
    fm = FieldManager(OBJECT, VERSION)
    for new in [*SAME_SHAPE, *OTHER_SHAPES]:
        fm.update(None, new, "first", T)  # now every shape is kept
    for new in [*SAME_SHAPE, *OTHER_SHAPES]:
        assert FieldManager(OBJECT, VERSION).update(None, new, "first", "2026-02-02T00:00:00Z") == \
            _fresh(new, "first", "2026-02-02T00:00:00Z"), new["spec"]
    assert len({json.dumps(_fresh(new, "m", T)) for new in [SAME_SHAPE[0], *OTHER_FIELDS]}) == 1 + len(OTHER_FIELDS)


def test_a_create_of_a_kept_shape_does_not_walk_the_object(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = json.loads(json.dumps(OBJECT))
    FieldManager(schema, VERSION).update(None, SAME_SHAPE[0], "alice", T)
    expected = _fresh(SAME_SHAPE[1], "alice", T)

    def walked(*_: Any) -> None:
        raise AssertionError("a create of a kept shape walked the object")

    monkeypatch.setattr(FieldManager, "_update", walked)
    assert FieldManager(schema, VERSION).update(None, SAME_SHAPE[1], "alice", T) == expected


def test_a_kept_create_is_the_writers_own() -> None:
    fm = FieldManager(OBJECT, VERSION)
    first = fm.update(None, SAME_SHAPE[0], "alice", T)
    assert first is not None
    first[0]["fieldsV1"].clear()  # what a caller does with its entries does not reach the next create
    second = fm.update(None, SAME_SHAPE[1], "bob", "2026-03-03T00:00:00Z")
    assert second == _fresh(SAME_SHAPE[1], "bob", "2026-03-03T00:00:00Z")
    assert second is not None and second[0]["manager"] == "bob" and second[0]["time"] == "2026-03-03T00:00:00Z"
    assert FieldManager(OBJECT, "example.io/v2").update(None, SAME_SHAPE[0], "alice", T)[0]["apiVersion"] == \
        "example.io/v2"
