"""Run one request sequence against an Application kind and its oracle CRD, and compare every answer.

Each sequence gets a namespace of its own, so it sees only its own objects (lists and watches
included) and costs one namespace create.  After the sequence, a watch from the namespace's
starting resourceVersion replays what happened on each side; a last create (the sentinel) marks
the end of the stream, so no comparison waits on a clock.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kubernetes import watch
from kubernetes.dynamic import DynamicClient
from localcluster.cluster import Cluster

from tests.differential.differences import (
    UNSERVED_SUBRESOURCE,
    Tokens,
    normalise_body,
    normalise_object,
    without_repeats,
)
from tests.differential.kinds import Kind
from tests.differential.operations import Create, Operation, Outcome, Side

JSON = dict[str, Any]

_namespaces = itertools.count(1)
#: Sequences compared and requests sent (to each side) in this session, reported at its end.
STATS: Counter[str] = Counter()


@dataclass(frozen=True)
class Served:
    """One sample kind ready on both sides: the Application resource and the oracle's."""

    kind: Kind
    application: Any
    oracle: Any


@dataclass(frozen=True)
class World:
    """The cluster, one DynamicClient for every request, and the served kinds."""

    cluster: Cluster
    client: DynamicClient
    kinds: dict[str, Served]
    namespaces: Any


#: The name of the last object each sequence creates: its ADDED event ends the watch replay.
SENTINEL = "zz-end"


def _side(world: World, resource: Any, namespace: str, status_subresource: str = "status") -> Side:
    return Side(world.client, resource, namespace, status_subresource=status_subresource)


def new_namespace(world: World, served: Served) -> str:
    name = f"diff-{served.kind.plural}-{next(_namespaces)}"
    world.namespaces.create(body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def _starting_version(side: Side) -> str:
    listed = side.send("get", side.path())
    assert listed.code == 200, listed.body
    return str(listed.body["metadata"]["resourceVersion"])


def _events(side: Side, since: str) -> list[JSON]:
    """The watch events of the namespace since ``since`` up to the sentinel's ADDED."""
    watcher = watch.Watch()
    found: list[JSON] = []
    for event in side.resource.watch(namespace=side.namespace, resource_version=since, timeout=30, watcher=watcher):
        raw = event["raw_object"]
        if event["type"] == "BOOKMARK":
            continue
        found.append({"type": event["type"], "object": raw})
        if event["type"] == "ADDED" and raw.get("metadata", {}).get("name") == SENTINEL:
            watcher.stop()
            break
    return found


def compare(served: Served, ops: list[Operation], world: World) -> None:
    """Run ``ops`` on both sides of ``served``; fail at the first answer that differs."""
    namespace = new_namespace(world, served)
    app = _side(world, served.application, namespace)
    oracle = _side(world, served.oracle, namespace, status_subresource=UNSERVED_SUBRESOURCE)
    try:
        _run_and_compare(served, ops, namespace, app, oracle)
    finally:
        for side in (app, oracle):
            if side.held:
                _let_go(side)


def _run_and_compare(served: Served, ops: list[Operation], namespace: str, app: Side, oracle: Side) -> None:
    app_tokens, oracle_tokens = Tokens(), Tokens()
    starts = _starting_version(app), _starting_version(oracle)
    trail: list[str] = []
    groups = (served.kind.group, str(served.oracle.group))
    versions = not served.kind.spec_as_given
    for step, op in enumerate(ops):
        got, want = op.run(app), op.run(oracle)
        STATS["requests"] += 1
        mine = _comparable(got, app_tokens, groups, versions, op.compares_message)
        theirs = _comparable(want, oracle_tokens, groups, versions, op.compares_message)
        trail.append(f"  {step}: {op!r}\n     oracle: {json.dumps(theirs, sort_keys=True)}")
        assert mine == theirs, _report(served, namespace, trail, mine, theirs)
    sentinel = Create(SENTINEL, minimal_spec(served.kind.schema), {}, {}, False)
    for side in (app, oracle):
        made = sentinel.run(side)
        assert made.code == 201, made.body
    events = (
        [_event(e, app_tokens, versions) for e in _events(app, starts[0])],
        [_event(e, oracle_tokens, versions) for e in _events(oracle, starts[1])],
    )
    if not versions:
        events = without_repeats(events[0]), without_repeats(events[1])
    trail.append("  watch events")
    STATS["sequences"] += 1
    assert events[0] == events[1], _report(served, namespace, trail, events[0], events[1])


def _let_go(side: Side) -> None:
    """Remove the finalizers a sequence left, so nothing waits on them later (no controller removes them:
    a deleting object would stay forever, and deleting the oracle CRD would wait on its objects)."""
    listed = side.send("get", side.path())
    items = listed.body.get("items") or [] if isinstance(listed.body, dict) else []
    for item in items:
        if item["metadata"].get("finalizers"):
            side.send("patch", side.path(item["metadata"]["name"]), {"metadata": {"finalizers": None}},
                      content_type="application/merge-patch+json")


def minimal_spec(schema: JSON) -> JSON:
    """A spec every server accepts: the required top-level properties only, each with a plain valid value."""
    props = schema.get("properties") or {}
    plain = {"string": "x", "integer": 1, "number": 1, "boolean": True, "object": {}, "array": []}
    return {key: props[key].get("default", plain.get(props[key].get("type"), "x"))
            for key in schema.get("required") or []}


def _comparable(outcome: Outcome, tokens: Tokens, groups: tuple[str, str], versions: bool, messages: bool) -> JSON:
    return {"code": outcome.code,
            "body": normalise_body(outcome.body, tokens, groups, versions=versions, messages=messages),
            "warnings": sorted(outcome.warnings)}


def _event(event: JSON, tokens: Tokens, versions: bool) -> JSON:
    return {"type": event["type"], "object": normalise_object(event["object"], tokens, versions=versions)}


def _report(served: Served, namespace: str, trail: list[str], mine: Any, theirs: Any) -> str:
    return (f"{served.kind.name} (namespace {namespace}) differs from its CRD after:\n" + "\n".join(trail)
            + f"\n  application: {json.dumps(mine, sort_keys=True)}"
            + f"\n  oracle:      {json.dumps(theirs, sort_keys=True)}")
