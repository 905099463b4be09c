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


def test_the_same_is_decided_on_a_cache_key_alone() -> None:
    """A cache replaying its current state asks by key, before it decodes the object (``replay_keys``)."""
    view = WatchView("team", "", selectors.parse_field_selector("metadata.name=db"), prefixed)
    assert view.may_show_key(("team", "app-db"))
    assert not view.may_show_key(("team", "app-cache"))
    assert not view.may_show_key(("other", "app-db"))
    assert not view.may_show_key(("team", "db"))  # the Application's name, not its backing object's
    elsewhere = WatchView(None, "", selectors.parse_field_selector("metadata.namespace!=team"), prefixed)
    assert elsewhere.may_show_key(("other", "app-db")) and not elsewhere.may_show_key(("team", "app-db"))
    by_label = WatchView(None, "tier=cache", (), prefixed)
    assert by_label.may_show_key(("team", "app-db"))  # labels are decided on the object


def versioned(application: JSON, rv: str) -> JSON:
    return {**application, "metadata": {**application["metadata"], "resourceVersion": rv}}


def unknown() -> JSON | None:
    raise AssertionError("the object before the event was projected, though nothing depended on it")


def test_a_change_is_decided_on_the_object_and_the_object_before_it_as_kube_apiserver_decides() -> None:
    """kube-apiserver's watch cache: matching after but not before is ADDED, before but not after DELETED (the
    object as it was, at the change's resourceVersion), both MODIFIED; what the watcher saw before plays no
    part (a watch from a resourceVersion has seen nothing)."""
    view = WatchView(None, "tier=web", (), prefixed)
    db, web = versioned(app("team", "db", tier="db"), "5"), versioned(app("team", "db", tier="web"), "6")
    assert view.event("ADDED", db, unknown, "5") is None
    assert view.event("MODIFIED", web, lambda: db, "6") == {"type": "ADDED", "object": web}
    web_again = versioned(app("team", "db", tier="web", size="2"), "7")
    assert view.event("MODIFIED", web_again, lambda: web, "7") == {"type": "MODIFIED", "object": web_again}
    assert view.event("MODIFIED", versioned(db, "8"), lambda: web_again, "8") == {
        "type": "DELETED", "object": versioned(web_again, "8")}
    assert view.event("MODIFIED", versioned(db, "9"), lambda: db, "9") is None
    assert view.event("DELETED", versioned(db, "10"), unknown, "10") is None
    assert view.event("ADDED", web, unknown, "6") == {"type": "ADDED", "object": web}
    assert view.event("DELETED", web, unknown, "11") == {"type": "DELETED", "object": web}


def test_an_object_that_stops_being_an_application_is_deleted_to_a_watcher_that_selected_it() -> None:
    everything = WatchView(None, "", (), prefixed)
    web = versioned(app("team", "db", tier="web"), "6")
    assert everything.event("MODIFIED", None, lambda: web, "7") == {"type": "DELETED", "object": versioned(web, "7")}
    assert everything.event("MODIFIED", None, lambda: None, "8") is None
    assert WatchView(None, "tier=db", (), prefixed).event("MODIFIED", None, lambda: web, "7") is None


def test_without_a_label_selector_the_object_before_is_not_projected() -> None:
    view = WatchView("team", "", selectors.parse_field_selector("metadata.name=db"), prefixed)
    web = app("team", "db", tier="web")
    assert view.event("MODIFIED", web, unknown, "6") == {"type": "MODIFIED", "object": web}
    assert view.event("MODIFIED", app("team", "cache"), unknown, "7") is None
