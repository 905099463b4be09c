"""``Projections``: a list from the informer projects each backing object once per revision, keeps the
result encoded, filters on the projection, and forgets what the informer no longer holds; a get of an
object read from kube-apiserver reuses the same projections; and ``shared.bodies`` writes such encoded
items as they are."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from shared.api import selectors
from shared.bodies import JSON, Encoded, dumps, plain
from shared.client.informer import Informer
from shared.client.projections import GET_SLACK, Projections
from tests.unit.test_informer import FakeKube, _informer, _settle


class Counting:
    """A projection that says how often it ran: ``Thing`` -> ``App``, labelled by its value; ``hidden-*``
    names are not Applications."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, thing: JSON) -> JSON | None:
        self.calls += 1
        name = thing["metadata"]["name"]
        if name.startswith("hidden-"):
            return None
        return {"kind": "App", "metadata": {"name": name, "namespace": thing["metadata"]["namespace"],
                                            "labels": {"value": thing["spec"]["value"]}},
                "spec": thing["spec"]}


@pytest.fixture
async def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
async def informer(kube: FakeKube) -> AsyncIterator[Informer]:
    kube.put("a", "1")
    kube.put("b", "2")
    kube.put("hidden-c", "3")
    started = await _informer(kube)
    try:
        yield started
    finally:
        await started.stop()


async def listed(projections: Projections, informer: Informer, label_selector: str = "",
                 field_selector: str = "") -> list[JSON]:
    found = await informer.entries("0")
    assert found is not None
    items = projections.select(found[0], selectors.parse_label_selector(label_selector),
                               selectors.parse_field_selector(field_selector))
    assert all(isinstance(item, Encoded) for item in items)
    listed: list[JSON] = json.loads(dumps({"items": items}))["items"]
    return listed


async def test_each_object_is_projected_once_per_revision(kube: FakeKube, informer: Informer) -> None:
    project = Counting()
    projections = Projections(informer, project)
    first = await listed(projections, informer)
    assert [app["metadata"]["name"] for app in first] == ["a", "b"]
    assert project.calls == 3
    assert await listed(projections, informer) == first
    assert project.calls == 3, "an unchanged object is projected again"
    kube.put("b", "changed")
    await _settle(informer, kube)
    again = await listed(projections, informer)
    assert project.calls == 4
    assert again[1]["spec"] == {"value": "changed"}, "a changed object is listed as it was"


async def test_selectors_match_the_projection(kube: FakeKube, informer: Informer) -> None:
    projections = Projections(informer, Counting())
    assert [a["metadata"]["name"] for a in await listed(projections, informer, "value=2")] == ["b"]
    assert [a["metadata"]["name"] for a in await listed(projections, informer, "value!=2")] == ["a"]
    assert [a["metadata"]["name"] for a in await listed(projections, informer, field_selector="metadata.name=a")] \
        == ["a"]


async def test_deleted_objects_are_forgotten(kube: FakeKube, informer: Informer) -> None:
    projections = Projections(informer, Counting())
    await listed(projections, informer)
    kube.delete("a")
    await _settle(informer, kube)
    assert [a["metadata"]["name"] for a in await listed(projections, informer)] == ["b"]
    assert len(projections) == informer.size == 2, "b and hidden-c are kept, a is forgotten"


async def test_a_get_reuses_the_projection_of_an_unchanged_revision(kube: FakeKube, informer: Informer) -> None:
    """A consistent get reads the object from kube-apiserver; at the revision a list projected, it is that
    projection, and a changed object is projected again once, for gets and lists alike."""
    project = Counting()
    projections = Projections(informer, project)
    listed_a = (await listed(projections, informer))[0]
    assert project.calls == 3
    got = projections.current(("ns", "a"), kube.objects["a"])
    assert project.calls == 3, "the get projected an object a list had projected at the same revision"
    assert got is not None and plain(got) == listed_a
    changed = kube.put("a", "changed")
    fresh = projections.current(("ns", "a"), changed)
    assert project.calls == 4
    assert fresh is not None and plain(fresh)["spec"] == {"value": "changed"}, "a changed object read as it was"
    again = projections.current(("ns", "a"), changed)
    assert again is not None and again.raw == fresh.raw and project.calls == 4
    await _settle(informer, kube)
    assert (await listed(projections, informer))[0]["spec"] == {"value": "changed"}
    assert project.calls == 4, "the list projected again what the get had projected at that revision"
    assert projections.current(("ns", "hidden-c"), kube.objects["hidden-c"]) is None, "not an Application"


async def test_a_get_without_a_revision_is_projected_every_time(informer: Informer) -> None:
    project = Counting()
    projections = Projections(informer, project)
    odd = {"metadata": {"name": "odd", "namespace": "ns", "resourceVersion": "x"}, "spec": {"value": "1"}}
    first = projections.current(("ns", "odd"), odd)
    second = projections.current(("ns", "odd"), odd)
    assert project.calls == 2 and first is not None and second is not None and plain(first) == plain(second)
    assert len(projections) == 0, "a projection that no revision names is not kept"


async def test_gets_of_objects_gone_from_the_cache_are_forgotten(kube: FakeKube, informer: Informer) -> None:
    """Gets may read objects the informer does not hold (yet, or any more): their projections are dropped once
    they outnumber the cached objects by more than the slack."""
    projections = Projections(informer, Counting())
    for i in range(GET_SLACK + informer.size + 1):
        thing = {"metadata": {"name": f"gone-{i}", "namespace": "ns", "resourceVersion": str(1000 + i)},
                 "spec": {"value": str(i)}}
        projections.current(("ns", f"gone-{i}"), thing)
    assert len(projections) == 0, "projections of objects the informer does not hold were kept"


def test_encoded_values_are_written_as_they_are_and_decode_to_fresh_copies() -> None:
    item = Encoded(dumps({"metadata": {"name": "x"}, "spec": {"n": 1}}))
    body = {"kind": "List", "items": [item, {"plain": True}]}
    assert json.loads(dumps(body)) == {"kind": "List", "items": [{"metadata": {"name": "x"}, "spec": {"n": 1}},
                                                                 {"plain": True}]}
    first = plain(item)
    first["spec"]["n"] = 2
    assert plain(item)["spec"] == {"n": 1}, "each reader gets its own copy"
    assert plain(body) is body, "what is not encoded is left as it is"


def test_encoded_values_survive_the_json_module_fallback() -> None:
    """orjson refuses integers beyond 64 bits (a user's spec may hold them): the fallback still writes
    encoded items."""
    big = 2**70
    body = {"items": [Encoded(dumps({"n": big}))], "extra": big}
    assert json.loads(dumps(body)) == {"items": [{"n": big}], "extra": big}
