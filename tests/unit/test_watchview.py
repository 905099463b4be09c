"""What one watcher of Applications sees (:mod:`shared.api.watchview`), without a cluster.

The contract tier checks the watch verbs against the CRD oracle; these pin the part decided before a backing
object is projected, which the oracle cannot see: an object the namespace or the name selector excludes is
never projected, and never shown, whatever happens to it later.
"""

from __future__ import annotations

from shared.api import selectors
from shared.api.watchview import WatchView, backing_field_selector
from shared.bodies import JSON


def prefixed(name: str) -> str:
    return "app-" + name


def backing(namespace: str, name: str) -> JSON:
    return {"metadata": {"namespace": namespace, "name": prefixed(name)}}


def app(namespace: str, name: str, **labels: str) -> JSON:
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels}}


def test_a_name_selector_is_said_of_the_backing_objects() -> None:
    reqs = selectors.parse_field_selector("metadata.name=db,metadata.namespace!=kube-system")
    assert backing_field_selector(reqs, prefixed) == (("metadata.name", "=", "app-db"),
                                                      ("metadata.namespace", "!=", "kube-system"))


def test_objects_outside_the_namespace_or_the_name_are_never_projected() -> None:
    view = WatchView("team", "", selectors.parse_field_selector("metadata.name=db"), prefixed)
    assert view.may_show(backing("team", "db"))
    assert not view.may_show(backing("team", "cache"))
    assert not view.may_show(backing("other", "db"))
    everywhere = WatchView(None, "", selectors.parse_field_selector("metadata.name!=db"), prefixed)
    assert everywhere.may_show(backing("other", "cache")) and not everywhere.may_show(backing("other", "db"))


def test_an_application_that_stops_matching_the_labels_is_deleted_to_the_watcher() -> None:
    view = WatchView(None, "tier=web", (), prefixed)
    assert view.event("ADDED", app("team", "db", tier="db")) is None
    web = app("team", "db", tier="web")
    assert view.event("ADDED", web) == {"type": "ADDED", "object": web}
    assert view.event("MODIFIED", app("team", "db", tier="web"))["type"] == "MODIFIED"  # type: ignore[index]
    assert view.event("MODIFIED", app("team", "db", tier="db")) == {
        "type": "DELETED", "object": app("team", "db", tier="db")}
    assert view.event("DELETED", app("team", "db", tier="db")) is None
    assert view.event("ADDED", app("team", "web", tier="web"))["type"] == "ADDED"  # type: ignore[index]
    assert view.event("DELETED", app("team", "web", tier="web"))["type"] == "DELETED"  # type: ignore[index]
