"""What one watcher of Applications sees of its kind's backing-object events.

A kind's informer streams every backing object of the kind; each watcher wants the Applications of one
namespace, label selector and field selector, with kube's rule that an object which stops matching a
selector is DELETED to that watcher (and ADDED when it matches again).  Both stacks watch this way; only the
projection of a backing object into an Application differs, so that is the caller's part.

The namespace and the ``metadata.name``/``metadata.namespace`` field selector are decided on the backing
object, before its projection: those fields are immutable and map one to one onto the Application's (the
backing name is the Application's with the definition's prefix), so an object they exclude was never
visible and never will be.  A watch of one name (``kubectl get app X -w``) then projects one object, not
every object of the kind (at 10 000 Applications, a second of CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shared.bodies import JSON

from . import selectors

Key = tuple[str, str]


def backing_field_selector(reqs: Sequence[selectors.FieldRequirement],
                           backing_name: Callable[[str], str]) -> tuple[selectors.FieldRequirement, ...]:
    """A field selector on Applications, said of their backing objects (``metadata.name`` renamed)."""
    return tuple((field, op, backing_name(value) if field == "metadata.name" else value) for field, op, value in reqs)


class WatchView:
    """The selection of one watch, and which Applications its watcher has been shown."""

    def __init__(self, namespace: str | None, label_selector: str,
                 field_selector: Sequence[selectors.FieldRequirement],
                 backing_name: Callable[[str], str]) -> None:
        self._namespace = namespace
        self._labels = selectors.parse_label_selector(label_selector)
        self._fields = tuple(field_selector)
        self._backing_fields = backing_field_selector(self._fields, backing_name)
        self._visible: set[Key] = set()

    def may_show(self, backing: JSON) -> bool:
        """False when ``backing`` can never be shown to this watcher (decided before projecting it)."""
        meta = backing.get("metadata") or {}
        if self._namespace and (meta.get("namespace") or "") != self._namespace:
            return False
        return selectors.field_matches(self._backing_fields, backing)

    def event(self, type_: str, app: JSON) -> JSON | None:
        """The event this watcher gets for a backing object's ``type_`` event, projected to ``app``; None: none."""
        meta = app["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        if self._namespace and key[0] != self._namespace:
            return None
        matches = selectors.matches(self._labels, meta.get("labels") or {}) and selectors.field_matches(
            self._fields, app)
        if type_ == "DELETED":
            if key in self._visible or matches:
                self._visible.discard(key)
                return {"type": "DELETED", "object": app}
            return None
        if matches:
            shown = "MODIFIED" if key in self._visible and type_ != "ADDED" else type_
            self._visible.add(key)
            return {"type": shown, "object": app}
        if key in self._visible:
            # It stopped matching the selector: to this watcher it is gone.
            self._visible.discard(key)
            return {"type": "DELETED", "object": app}
        return None
