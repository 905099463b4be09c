"""Accept negotiation, ages and Table rendering."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from shared.api import errors, table
from shared.api.rest import Column, ResourceInfo

NOW = datetime.datetime(2025, 1, 10, 12, 0, 0, tzinfo=datetime.UTC)

INFO = ResourceInfo(
    group="apps.example.io",
    version="v1alpha1",
    kind="Thing",
    plural="things",
    singular="thing",
    schema={"type": "object"},
    columns=(Column("NAME"), Column("READY"), Column("AGE", "date"), Column("VERSION", priority=1)),
)


def obj(name: str = "a", created: str | None = "2025-01-10T11:57:00Z", rv: str = "5") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "resourceVersion": rv, "labels": {"x": "y"}}
    if created:
        meta["creationTimestamp"] = created
    return {"apiVersion": "apps.example.io/v1alpha1", "kind": "Thing", "metadata": meta, "spec": {"v": 1}}


def cells(o: dict[str, Any]) -> list[Any]:
    # A storage may put anything in NAME and AGE: the table module fills them.
    return ["ignored", "True", "ignored", o["spec"]["v"]]


KUBECTL_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, table.Rendering()),
        ("", table.Rendering()),
        ("application/json", table.Rendering()),
        ("*/*", table.Rendering()),
        ("application/json, */*", table.Rendering()),
        (KUBECTL_ACCEPT, table.Rendering("table", "v1")),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", table.Rendering("table", "v1beta1")),
        ("application/json; as=Table; g=meta.k8s.io; v=v1", table.Rendering("table", "v1")),
        # q values outrank order
        (
            "application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io",
            table.Rendering("table", "v1"),
        ),
        ("application/json;as=Table;v=v1;g=meta.k8s.io;q=0.1,application/json", table.Rendering()),
        # unknown Table versions / groups are skipped, not fatal, when JSON is also acceptable
        ("application/json;as=Table;v=v2;g=meta.k8s.io,application/json", table.Rendering()),
        ("application/json;as=Table;v=v1;g=other.io,*/*", table.Rendering()),
        # protobuf first (client-go's default for built-ins), JSON as fallback
        ("application/vnd.kubernetes.protobuf,application/json", table.Rendering()),
        (
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
            table.Rendering("partial", "v1"),
        ),
    ],
)
def test_negotiate(accept: str | None, expected: table.Rendering) -> None:
    assert table.negotiate(accept) == expected


@pytest.mark.parametrize(
    "accept",
    [
        "application/vnd.kubernetes.protobuf",
        "application/yaml",
        "application/json;as=Table;v=v9;g=meta.k8s.io",
        "application/json;q=0",
    ],
)
def test_negotiate_406(accept: str) -> None:
    with pytest.raises(errors.ApiError) as err:
        table.negotiate(accept)
    assert err.value.code == 406


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (200, "3m20s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (5 * 3600 + 10 * 60, "5h10m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (8 * 86400, "8d"),
        (400 * 86400, "400d"),
        (2 * 365 * 86400 + 30 * 86400, "2y30d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: int, expected: str) -> None:
    assert table.human_duration(seconds) == expected


def test_age() -> None:
    assert table.age(obj(), NOW) == "3m"
    assert table.age(obj(created=None), NOW) == "<unknown>"
    assert table.age(obj(created="not a time"), NOW) == "<unknown>"


def test_object_table_fills_name_and_age() -> None:
    t = table.object_table(INFO, obj(), cells, now=NOW)
    assert t["kind"] == "Table"
    assert t["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in t["columnDefinitions"]] == ["NAME", "READY", "AGE", "VERSION"]
    assert t["columnDefinitions"][3]["priority"] == 1
    assert t["rows"][0]["cells"] == ["a", "True", "3m", 1]
    assert t["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj()["metadata"],
    }
    assert t["metadata"] == {"resourceVersion": "5"}


def test_include_object_modes() -> None:
    full = table.object_table(INFO, obj(), cells, include=table.INCLUDE_OBJECT, now=NOW)
    assert full["rows"][0]["object"] == obj()
    none = table.object_table(INFO, obj(), cells, include=table.INCLUDE_NONE, now=NOW)
    assert "object" not in none["rows"][0]
    beta = table.object_table(INFO, obj(), cells, version="v1beta1", now=NOW)
    assert beta["apiVersion"] == "meta.k8s.io/v1beta1"
    assert beta["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"


def test_parse_include_object() -> None:
    assert table.parse_include_object(None) == "Metadata"
    assert table.parse_include_object("Object") == "Object"
    with pytest.raises(errors.ApiError) as err:
        table.parse_include_object("Everything")
    assert err.value.code == 400


def test_list_table_keeps_list_metadata() -> None:
    lst = {
        "kind": "ThingList",
        "metadata": {"resourceVersion": "42", "continue": "tok"},
        "items": [obj("a"), obj("b")],
    }
    t = table.list_table(INFO, lst, cells, now=NOW)
    assert t["metadata"] == {"resourceVersion": "42", "continue": "tok"}
    assert [r["cells"][0] for r in t["rows"]] == ["a", "b"]


def test_default_and_prepended_columns() -> None:
    bare = ResourceInfo("g.io", "v1", "K", "ks", "k", {})
    t = table.object_table(bare, obj(), lambda o: [], now=NOW)
    assert [c["name"] for c in t["columnDefinitions"]] == ["NAME", "AGE"]
    assert t["rows"][0]["cells"] == ["a", "3m"]
    no_name = ResourceInfo("g.io", "v1", "K", "ks", "k", {}, columns=(Column("STATUS"),))
    t = table.object_table(no_name, obj(), lambda o: ["Ready"], now=NOW)
    assert [c["name"] for c in t["columnDefinitions"]] == ["NAME", "STATUS"]
    assert t["rows"][0]["cells"] == ["a", "Ready"]


def test_wrong_cell_count_is_padded() -> None:
    t = table.object_table(INFO, obj(), lambda o: ["x"], now=NOW)
    assert t["rows"][0]["cells"] == ["a", None, "3m", None]


def test_watch_events() -> None:
    rendering = table.Rendering("table", "v1")
    added = table.watch_event(INFO, {"type": "ADDED", "object": obj()}, cells, rendering)
    assert added["type"] == "ADDED"
    assert added["object"]["kind"] == "Table"
    assert len(added["object"]["rows"]) == 1
    assert added["object"]["columnDefinitions"]
    later = table.watch_event(INFO, {"type": "MODIFIED", "object": obj()}, cells, rendering, headers=False)
    assert later["object"]["columnDefinitions"] == []
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 410}}
    assert table.watch_event(INFO, error, cells, rendering) == error
    end = {"resourceVersion": "9", "annotations": {"k8s.io/initial-events-end": "true"}}
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Thing", "metadata": end}}
    converted = table.watch_event(INFO, bookmark, cells, rendering)
    # As kube-apiserver renders a custom resource's bookmark: one row of empty cells carrying the metadata.
    assert converted["object"]["metadata"] == {"resourceVersion": "9"}
    assert converted["object"]["columnDefinitions"] is None
    [row] = converted["object"]["rows"]
    assert row["cells"] == ["", None, None, None]
    assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": end}
    [bare] = table.watch_event(INFO, bookmark, cells, rendering, include=table.INCLUDE_NONE)["object"]["rows"]
    assert bare["object"] == row["object"], "a bookmark keeps its metadata in a Table without objects"
    [whole] = table.watch_event(INFO, bookmark, cells, rendering, include=table.INCLUDE_OBJECT)["object"]["rows"]
    assert whole["object"] == bookmark["object"]
    plain = {"type": "ADDED", "object": obj()}
    assert table.watch_event(INFO, plain, cells, table.Rendering()) == plain
    partial = table.watch_event(INFO, plain, cells, table.Rendering("partial", "v1"))
    assert partial["object"]["kind"] == "PartialObjectMetadata"


def test_partial_metadata_list() -> None:
    lst = {"metadata": {"resourceVersion": "3"}, "items": [obj()]}
    out = table.partial_metadata_list(lst)
    assert out["kind"] == "PartialObjectMetadataList"
    assert out["metadata"] == {"resourceVersion": "3"}
    assert out["items"][0]["metadata"]["name"] == "a"
    assert "spec" not in out["items"][0]
