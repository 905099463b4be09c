"""Each cached backing object's user-facing object, encoded once per revision of the backing object.

A list answered from the informer decoded, projected and re-encoded every backing object on every
request: about 30 µs an object, so a list of 1000 cost the service 30 ms of CPU.  A projection depends
only on the backing object, whose resourceVersion changes with it, and on the definition, which gets a
new storage (so new projections) whenever it changes.  So it is computed once per revision and kept as
its encoding, packed like the cache's objects (:class:`shared.client.informer.Packer`, about 100 bytes an
object): a list unpacks each in under a microsecond.

A get reuses the same projections: a consistent get still reads the object from kube-apiserver, but
when that object is at the revision a projection was kept for, its Application is that projection
(the projection of a Terraform took about 75 µs of a get's 0.2 ms of the service's own work; its
encoding is then written as it is).  A get at ``resourceVersion=0`` reads the informer's entry and
needs neither a decode nor a projection when nothing changed since the last read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shared.api import selectors
from shared.bodies import JSON, Encoded, collector_paused, dumps, loads
from shared.client.informer import Cached, Informer, Key, Packed, Packer, parse_rv

#: Backing object -> the user's object, or None when the backing object is not one.
Project = Callable[[JSON], JSON | None]
#: How many more projections than cached objects gets may leave before the gone ones are dropped.
GET_SLACK = 64


class Projections:
    """The encoded projections of one informer's objects, at most one per object the informer holds."""

    def __init__(self, informer: Informer, project: Project) -> None:
        self._informer = informer
        self._project = project
        #: Each object's revision and its projection, packed (None: the object is not one of the user's).
        self._kept: dict[Key, tuple[int, Packed | None]] = {}
        self._packer = Packer()

    def __len__(self) -> int:
        return len(self._kept)

    def encoded(self, entry: Cached) -> Encoded | None:
        """The projection of ``entry``: kept from an earlier read when the object has not changed since."""
        kept = self._kept.get(entry.key)
        if kept is not None and kept[0] == entry.rv:
            return self._encoded(kept[1])
        return self._keep(entry.key, entry.rv, self._project(self._informer.unpack(entry.packed)))

    def current(self, key: Key, obj: JSON) -> Encoded | None:
        """The projection of ``obj``, the object ``key`` as just read from kube-apiserver: kept from an
        earlier read when ``obj`` is at the revision it was kept for, else projected and kept.

        A resourceVersion names one state of one object (an etcd revision), so an unchanged revision is an
        unchanged object; one that is not a revision is projected afresh and not kept."""
        try:
            rv = parse_rv(str((obj.get("metadata") or {}).get("resourceVersion") or ""))
        except ValueError:
            projected = self._project(obj)
            return None if projected is None else Encoded(dumps(projected))
        kept = self._kept.get(key)
        if kept is not None and kept[0] == rv:
            return self._encoded(kept[1])
        encoded = self._keep(key, rv, self._project(obj))
        # A get may read an object the informer has not seen yet: some slack, so that such gets do not
        # each walk every projection.
        self._forget_deleted(slack=GET_SLACK)
        return encoded

    def select(self, entries: Sequence[Cached], label_selector: selectors.Selector,
               field_selector: Sequence[selectors.FieldRequirement]) -> list[Encoded]:
        """The projections of ``entries`` that match both selectors (read from the user's object), in order.

        With the cyclic collector paused: the projections made here hold no cycles, and as thousands of them
        survive its young passes they set off full ones over the whole cache (12 % of the service's CPU for a list of
        50 000 Applications, round 30 of the performance notes)."""
        items = []
        with collector_paused():
            for entry in entries:
                encoded = self.encoded(entry)
                if encoded is None:
                    continue
                if label_selector or field_selector:
                    projected = loads(encoded.raw)
                    if not (selectors.matches(label_selector, projected["metadata"].get("labels") or {})
                            and selectors.field_matches(field_selector, projected)):
                        continue
                items.append(encoded)
        self._forget_deleted()
        return items

    def forget(self, key: Key) -> None:
        """Drop the projection of ``key``: it depends on something besides the object that changed."""
        self._kept.pop(key, None)

    def _keep(self, key: Key, rv: int, projected: JSON | None) -> Encoded | None:
        if projected is None:
            self._kept[key] = (rv, None)
            return None
        raw = dumps(projected)
        self._kept[key] = (rv, self._packer.pack_encoded(raw))
        return Encoded(raw)

    def _encoded(self, packed: Packed | None) -> Encoded | None:
        return None if packed is None else Encoded(self._packer.unpack_encoded(packed))

    def _forget_deleted(self, slack: int = 0) -> None:
        """Drop the projections of objects the informer no longer holds: only ever visited keys are
        kept, so more of them than the informer holds (by more than ``slack``) means some are gone."""
        if len(self._kept) > self._informer.size + slack:
            self._kept = {key: kept for key, kept in self._kept.items() if self._informer.holds(key)}
