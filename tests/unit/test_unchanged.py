"""shared.client.unchanged: an update that would write nothing new is not sent (found by the differential tier)."""

from __future__ import annotations

from shared.client.unchanged import unchanged

LIVE = {
    "apiVersion": "x/v1", "kind": "Backing",
    "metadata": {"name": "a", "resourceVersion": "7", "uid": "u", "labels": {"k": "v"}, "annotations": {},
                 "managedFields": [{"manager": "m"}]},
    "spec": {"values": {"a": 1}},
    "status": {"observedGeneration": -1},
}


def test_same_content_is_unchanged_whatever_the_server_fields() -> None:
    built = {"apiVersion": "x/v1", "kind": "Backing", "metadata": {"name": "a", "labels": {"k": "v"}},
             "spec": {"values": {"a": 1}}}
    assert unchanged(built, LIVE)


def test_fields_only_the_live_object_has_are_not_the_storages() -> None:
    live = {**LIVE, "spec": {"values": {"a": 1}, "force": False, "parallelism": 0}}
    built = {"metadata": {"name": "a", "labels": {"k": "v"}}, "spec": {"values": {"a": 1}}}
    assert unchanged(built, live)
    # ... but a field the storage states is compared whole: values it dropped are a change.
    assert not unchanged({**built, "spec": {"values": {}}}, live)


def test_any_written_field_that_differs_is_a_change() -> None:
    base = {"metadata": {"name": "a", "labels": {"k": "v"}}, "spec": {"values": {"a": 1}}}
    assert not unchanged({**base, "spec": {"values": {"a": 2}}}, LIVE)
    assert not unchanged({**base, "metadata": {"name": "a"}}, LIVE)
    assert not unchanged({**base, "metadata": {**base["metadata"], "finalizers": ["f"]}}, LIVE)
    assert not unchanged({**base, "extra": {}}, LIVE)
    assert not unchanged({"metadata": base["metadata"]}, LIVE)
