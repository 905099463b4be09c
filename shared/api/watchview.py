"""What one watcher of Applications sees of its kind's backing-object events.

A kind's informer streams every backing object of the kind; each watcher wants the Applications of one
namespace, label selector and field selector.  kube-apiserver's watch cache decides each event on both the
object and the object before it: a change that makes an object match the selector is ADDED to that watcher,
one that makes it stop matching is DELETED (with the object as it was, at the change's resourceVersion),
and a change while it matches throughout is MODIFIED.  Whether the watcher saw the object before plays no
part, so a watch that starts from a resourceVersion gets the same events as one that listed first.  Both
stacks watch this way; only the projection of a backing object into an Application differs, so that is the
caller's part.

The namespace and the ``metadata.name``/``metadata.namespace`` field selector are decided on the backing
object's key, before its projection: those fields are immutable and map one to one onto the Application's
(the backing name is the Application's with the definition's prefix), so an object they exclude was never
visible and never will be.  A watch of one name (``kubectl get app X -w``) then projects one object, not
every object of the kind (at 10 000 Applications, a second of CPU), and one that starts from the current
state has the cache decode only the objects it may show (:meth:`WatchView.may_show_key`).  Only labels
(and whether the backing object is an Application of the kind at all) can change from one version to the
next, so the object before a change is projected only when the watcher selects by label or the new version
is no Application.
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
    """The selection of one watch, and the event each backing-object event is to its watcher."""

    def __init__(self, namespace: str | None, label_selector: str,
                 field_selector: Sequence[selectors.FieldRequirement],
                 backing_name: Callable[[str], str]) -> None:
        self._namespace = namespace
        self._labels = selectors.parse_label_selector(label_selector)
        self._fields = tuple(field_selector)
        self._backing_fields = backing_field_selector(self._fields, backing_name)

    def may_show(self, backing: JSON) -> bool:
        """False when ``backing`` can never be shown to this watcher (decided before projecting it)."""
        meta = backing.get("metadata") or {}
        return self.may_show_key((str(meta.get("namespace") or ""), str(meta.get("name") or "")))

    def may_show_key(self, key: Key) -> bool:
        """:meth:`may_show` of the object with this ``(namespace, name)``, decided without the object: a
        cache then decodes none of the objects such a watcher never sees."""
        namespace, name = key
        if self._namespace and namespace != self._namespace:
            return False
        if not self._backing_fields:  # most watches: no object to build for each key of a replay
            return True
        return selectors.field_matches(self._backing_fields, {"metadata": {"namespace": namespace, "name": name}})

    def selects(self, app: JSON) -> bool:
        meta = app["metadata"]
        if self._namespace and meta.get("namespace", "") != self._namespace:
            return False
        return selectors.matches(self._labels, meta.get("labels") or {}) and selectors.field_matches(
            self._fields, app)

    def event(self, type_: str, app: JSON | None, before: Callable[[], JSON | None],
              resource_version: str) -> JSON | None:
        """The event this watcher gets for a backing object's ``type_`` event at ``resource_version``, the
        object projected to ``app`` (None: it is no Application of the kind); None: no event.

        ``before`` projects the object as the cache held it before a MODIFIED (None: unknown, or no
        Application); it is called only when the answer depends on it."""
        if type_ == "DELETED":
            # The deleted object is its last state: it decides, as the previous object does in kube's cache.
            return {"type": type_, "object": app} if app is not None and self.selects(app) else None
        now = app is not None and self.selects(app)
        if type_ != "MODIFIED":
            return {"type": type_, "object": app} if now else None
        if app is not None and not self._labels:
            return {"type": type_, "object": app} if now else None  # nothing selected on changed in between
        old = before()
        was = old is not None and self.selects(old)
        if now:
            return {"type": "MODIFIED" if was else "ADDED", "object": app}
        if was and old is not None:
            return {"type": "DELETED", "object": {**old, "metadata": {**old["metadata"],
                                                                       "resourceVersion": resource_version}}}
        return None
