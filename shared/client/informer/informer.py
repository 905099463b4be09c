"""The shared informer of one resource: a cache that is also a replayable watch source.

It plays two roles at once, the way client-go's shared informer and kube-apiserver's watch cache do:

* a *cache* (:mod:`.store`): an initial list, then a watch from the list's resourceVersion
  (:mod:`.reflector`), keeps every current object in memory so lists of the served kinds are
  answered without kube-apiserver serializing them (:meth:`Informer.entries`, under kube's
  resourceVersion rules, :mod:`.consistency`);
* a *watch source* (:mod:`.history`, :mod:`.fanout`): the last N events are retained with their
  resourceVersions, so a client of the aggregated API that watches from resourceVersion X gets
  exactly the events after X, or a 410 when X is older than what is retained -- the contract
  kubectl and informers rely on.

When the upstream watch breaks (kube-apiserver restarted, 410, network), the cache lists again and
emits the *difference* between what it held and what the new list says as synthetic events
(:mod:`.relist`), so downstream watchers neither miss a change nor see one twice.  If a relist ever
observes the RV going *backwards* (etcd was replaced), the history is meaningless: every subscriber
is closed with 410 and the history starts over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from shared.api import errors
from shared.bodies import JSON
from shared.client.fence import ReadFence
from shared.client.kube import ObjectClient, rawlist
from shared.client.kube.rawlist import RawObject

from .consistency import ConsistentReads
from .fanout import BOOKMARK, Fanout, Subscription
from .history import History, Record
from .packing import Key, Packed, Packer, key_of, parse_rv, parsed_rv_or_zero, rv_or_zero, rv_text
from .reflector import ListFn, Reflector, WatchFn
from .relist import ADDED, DELETED, MODIFIED, Reset, relist_changes
from .source import ProbeFn, Source, kube_source
from .store import Cached, Lookup, Store
from .transforms import CacheShape, Transform

log = logging.getLogger(__name__)

T = TypeVar("T")
#: Seconds :meth:`Informer.kept` may hold the event loop before it lets others run. A start-up's rollout round
#: goes through every cached object: in batches of 500 it held the loop 40 ms at a time, and the requests that
#: came right after the sync waited through several of them (docs/design/perf/README.md, round 20).
KEPT_SLICE_S = 0.002


@dataclass(frozen=True)
class Tuning:
    """The knobs of an informer; the defaults suit a service's caches."""

    #: Events kept for watches that resume.
    history_size: int = 1000
    #: Events a slow watcher may have pending before it is cut off with 410.
    queue_size: int = 1000
    #: Objects per page of a list.
    page_size: int = 500
    #: Seconds an upstream watch may last before it is renewed.
    watch_timeout: int = 300
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    #: Seconds a read waits for events in flight before it declines the cache.
    catch_up: float = 0.01
    #: Seconds a consistent read waits for its fence write's event.
    fence_wait: float = 1.0


#: The process's informers, for its ``/metrics`` (a service process runs one server).
_INFORMERS: weakref.WeakSet[Informer] = weakref.WeakSet()


def consistent_list_answers() -> Iterator[tuple[str, str, int]]:
    """(informer, answer, count) of every informer's consistent lists (see :class:`ConsistentReads`)."""
    for informer in list(_INFORMERS):
        for answer, count in informer.consistent_lists.items():
            yield informer.name, answer, count


class Informer:
    """Cache and replayable watch of one resource (optionally one namespace / label selector).

    Either pass an :class:`ObjectClient` or inject ``list_fn``/``watch_fn`` (and ``probe_fn``) for
    another source (tests).  The cache keeps each object packed (:class:`.packing.Packer`); :meth:`entries`
    hands them out still packed, for :meth:`unpack`, and subscriptions hand out fresh copies, which their
    readers may mutate.
    """

    def __init__(
        self,
        client: ObjectClient | None = None,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        list_fn: ListFn | None = None,
        watch_fn: WatchFn | None = None,
        probe_fn: ProbeFn | None = None,
        name: str = "",
        transform: Transform | None = None,
        fence: ReadFence | None = None,
        tuning: Tuning | None = None,
    ) -> None:
        tuning = tuning or Tuning()
        #: Whether a list's items arrive as :meth:`_listed` made them, not as objects.
        self._keeps_listed = False
        source = Source(list_fn, watch_fn, probe_fn) if list_fn is not None and watch_fn is not None else None
        if source is None:
            if client is None:
                raise ValueError("Informer needs an ObjectClient or both list_fn and watch_fn")
            # Each listed item is cached (transformed and packed) as its page arrives: a start with 50 000
            # objects then holds one page of whole objects at a time, not all of them.  A shape that can
            # work on encoded fields (or none) has the items arrive so, and decodes only what it reads.
            encoded = transform is None or isinstance(transform, CacheShape)
            source = kube_source(client, namespace, label_selector, page_size=tuning.page_size,
                                 watch_timeout=tuning.watch_timeout,
                                 keep=self._listed_encoded if encoded else self._listed, raw_items=encoded)
            self._keeps_listed = list_fn is None
            source = Source(list_fn or source.list_fn, watch_fn or source.watch_fn, probe_fn or source.probe_fn)
        self.name = name or (client.gvr.plural if client else "informer")
        self._transform = transform
        #: The fence's events move the cache's resourceVersion on; the object itself is never kept.
        self._fence_key = fence.key if fence is not None else None
        self._store = Store()
        self._packer = Packer()
        self._history = History(tuning.history_size)
        self._synced = asyncio.Event()
        self._fanout = Fanout(self.name, tuning.queue_size, self._synced, self._replay, self._packer)
        self._reads = ConsistentReads(self.name, self._store, source.probe_fn, fence,
                                      catch_up=tuning.catch_up, fence_wait=tuning.fence_wait)
        self._reflector = Reflector(
            self.name, source.list_fn, source.watch_fn, on_list=self._on_list, on_event=self._on_event,
            resource_version=lambda: self._store.rv, backoff_initial=tuning.backoff_initial,
            backoff_max=tuning.backoff_max, monotonic=lambda: asyncio.get_running_loop().time(),
        )
        self._list_meta: JSON = {}
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        _INFORMERS.add(self)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start listing and watching in a background task (idempotent)."""
        self._stopped = self._fanout.closed = False
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._reflector.run(), name=f"informer:{self.name}")

    async def stop(self) -> None:
        """Stop the background task and end every subscription (subscribers see end-of-stream)."""
        self._stopped = self._fanout.closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.end_subscriptions()

    def end_subscriptions(self) -> None:
        """End every subscription (subscribers see end-of-stream) and keep the cache running.

        For an owner that changes what it serves from the same objects (a kind whose definition
        changed): its watchers start over, as kube-apiserver's do when a CRD changes, while the
        cache is not listed again.
        """
        self._fanout.end_all()

    async def wait_synced(self) -> None:
        """Wait for the first successful list (bound it with ``asyncio.timeout`` if needed)."""
        await self._synced.wait()

    async def require_synced(self, wait: float = 0.05) -> None:
        """Raise 503 unless the first list completes within ``wait`` seconds.

        A watch served before the cache ever listed would be a silent stream; kube-apiserver
        answers 503 while its own watch cache initializes, and so do we.  ``wait`` is kept
        shorter than the API server's watch start grace so the answer is a Status response.
        """
        if self.synced:
            return
        try:
            async with asyncio.timeout(wait):
                await self.wait_synced()
        except TimeoutError:
            raise errors.unavailable(
                f"the {self.name} watch cache is initializing: its first list from kube-apiserver has not completed"
            ) from None

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (from a list, an event or a bookmark)."""
        return self._store.rv

    @property
    def consistent_lists(self) -> dict[str, int]:
        """How the consistent lists asked of this cache were answered (see :func:`consistent_list_answers`)."""
        return self._reads.answers

    # ------------------------------------------------------------------ reads

    @property
    def size(self) -> int:
        """How many objects the cache holds now."""
        return len(self._store)

    def unpack(self, packed: Packed) -> JSON:
        """A fresh decoded copy of one of this cache's packed objects (from :meth:`entries` or :meth:`lookup`)."""
        return self._packer.unpack(packed)

    def holds(self, key: Key) -> bool:
        """Whether the cache holds the object ``key`` (namespace, name) now."""
        return key in self._store

    async def entries(self, resource_version: str | None,
                      namespace: str | None = None) -> tuple[list[Cached], str] | None:
        """The cached objects, still packed (sorted by namespace and name, as kube-apiserver lists them;
        only ``namespace``'s when given), and the resourceVersion they are current at, when kube's
        semantics for ``resource_version`` allow answering from the cache (:mod:`.consistency`);
        None when the caller must read kube-apiserver instead."""
        if not self.synced or self._stopped:
            self._reads.declined(resource_version)
            return None
        if not await self._reads.may_answer(resource_version):
            return None
        return self._store.cached(namespace), self._store.rv

    async def kept(self, keep: Callable[[JSON], T], where: Callable[[JSON], bool] = lambda _obj: True, *,
                   slice_s: float = KEPT_SLICE_S) -> list[T] | None:
        """What ``keep`` makes of every cached object ``where`` accepts, each decoded in turn, at a state as
        current as a consistent list's (:meth:`entries` with no resourceVersion); None when the cache cannot
        answer one (not synced, stopped, or its freshness not proven).

        For a caller that would otherwise list every object from kube-apiserver to look at each once (a
        definition's rollout round). It is background work beside the requests the service serves, so it
        yields to them whenever it has held the event loop for ``slice_s`` seconds.
        """
        cached = await self.entries(None)
        if cached is None:
            return None
        out: list[T] = []
        yield_at = time.monotonic() + slice_s
        for entry in cached[0]:
            obj = self.unpack(entry.packed)
            if where(obj):
                out.append(keep(obj))
            if time.monotonic() >= yield_at:
                await asyncio.sleep(0)
                yield_at = time.monotonic() + slice_s
        return out

    async def lookup(self, key: Key, resource_version: str) -> Lookup | None:
        """One cached object when kube's semantics for a GET at ``resource_version`` allow answering from
        the cache (``"0"``: any state; ``N``: not older than N), as kube-apiserver answers such a GET from
        its watch cache; None when the caller must read kube-apiserver instead."""
        if not self.synced or self._stopped or not resource_version:
            return None
        if not await self._reads.may_answer(resource_version):
            return None
        entry = self._store.objects().get(key)
        return Lookup(entry.packed, entry.rv) if entry is not None else Lookup(None)

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, resource_version: str | None = None, *, bookmarks: bool = False,
                  replay_keys: Callable[[Key], bool] | None = None) -> Subscription:
        """Events after ``resource_version``; None/""/"0" means current state as ADDED, then live.

        ``replay_keys``, when given, leaves out every object whose ``(namespace, name)`` it rejects: of that
        current state, of a resumed watch's history and of the live events.  A watcher of one name or one
        namespace, which would drop the others, then has none of them decoded for it (at 10 000 objects, a
        quarter of a second in which the event loop serves nothing else), and other objects' changes never fill
        its buffer (a watcher of one name is not cut off with 410 because the kind is busy).

        Iterating raises ``ApiError`` 410 when the RV is older than the retained history, or
        later when the subscriber fell too far behind; the caller ends its watch with an ERROR
        event carrying that Status, and the client re-lists.
        """
        return self._fanout.subscribe(resource_version, bookmarks, replay_keys)

    def _replay(self, sub: Subscription) -> None:
        """What ``sub`` missed, by its start: the whole cache as ADDED, or the history after its RV."""
        rv = sub.start_rv
        if rv in (None, "", "0"):
            sub.replay.extend((ADDED, entry.packed, None) for entry in self._store.snapshot(sub.replay_keys))
            sub.min_rv = self._store.rv_int
        else:
            try:
                want = parse_rv(rv)
            except ValueError:
                raise errors.bad_request(f'invalid resource version "{rv}"') from None
            sub.replay.extend(self._history.after(want, rv, sub.replay_keys))
            sub.min_rv = max(want, self._store.rv_int)
        if sub.bookmarks and self._store.rv and sub.min_rv == self._store.rv_int:
            sub.replay.append((BOOKMARK, self._bookmark_object(self._store.rv), None))

    def _bookmark_object(self, rv: str) -> JSON:
        obj: JSON = {"metadata": {"resourceVersion": rv}}
        kind = str(self._list_meta.get("kind") or "")
        if kind.endswith("List"):
            obj["kind"] = kind[: -len("List")]
        if self._list_meta.get("apiVersion"):
            obj["apiVersion"] = self._list_meta["apiVersion"]
        return obj

    # ------------------------------------------------------------------ what the reflector reads

    def _on_event(self, event: JSON) -> None:
        type_ = str(event.get("type"))
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event {type_} without an object")
        text = rv_text(obj)
        rv = parse_rv(text)
        key = key_of(obj)  # transforms keep namespace and name
        if type_ == BOOKMARK or key == self._fence_key:
            if rv > self._store.rv_int:
                self._fanout.broadcast(BOOKMARK, self._bookmark_object(text), rv)
                self._store.advance(text, rv)
            return
        if type_ not in (ADDED, MODIFIED, DELETED):
            log.debug("%s: ignoring watch event of type %s", self.name, type_)
            return
        if rv <= self._store.rv_int:
            # Already seen (kube never resends, but a duplicate must never reach subscribers).
            return
        packed = self._packer.pack(self._transform(obj) if self._transform is not None else obj)
        before = self._store.objects().get(key) if type_ == MODIFIED else None
        if type_ == DELETED:
            self._store.remove(key)
        else:
            self._store.put(key, Cached(key, rv, packed))
        self._record(Record(rv, type_, packed, key, before.packed if before is not None else None))
        self._store.advance(text, rv)

    def _record(self, record: Record) -> None:
        self._history.append(record)
        self._fanout.broadcast(record.type, record.obj, record.rv, record.prev, record.key)

    def _on_list(self, data: JSON) -> None:
        meta = data.get("metadata") or {}
        text = str(meta.get("resourceVersion") or "")
        list_rv = parse_rv(text)
        self._list_meta = {"kind": data.get("kind"), "apiVersion": data.get("apiVersion")}
        fresh = self._entries_of(data.get("items") or [])
        if not self._synced.is_set():
            self._restart(fresh, text, list_rv)
            self._synced.set()
            log.info("%s: synced %d objects at resourceVersion %s", self.name, len(fresh), text)
            return
        try:
            changes = relist_changes(self._store.objects(), fresh, self._store.rv_int, list_rv, self._packer)
        except Reset as why:
            log.warning("%s: %s; closing all watches with 410", self.name, why)
            self._fanout.end_all(errors.gone(f"the watch cache was reset: {why}"))
            self._restart(fresh, text, list_rv)
            return
        self._store.replace(fresh)
        for record in changes:
            self._record(record)
        if changes:
            log.info("%s: relist at %s emitted %d synthetic events", self.name, text, len(changes))
        self._fanout.broadcast(BOOKMARK, self._bookmark_object(text), list_rv)
        self._store.advance(text, list_rv)

    def _entries_of(self, items: list[Any]) -> dict[Key, Cached]:
        if self._keeps_listed:
            return {key: entry for key, entry in items if entry is not None}
        fresh: dict[Key, Cached] = {}
        for item in items:
            key, entry = self._entry_of(item)
            if entry is not None:
                fresh[key] = entry
        return fresh

    def _listed(self, item: JSON, page: JSON) -> tuple[Key, Cached | None]:
        """A listed item as the cache keeps it, made as its page arrives (see ``keep`` of the source)."""
        self._list_meta = {"kind": page.get("kind"), "apiVersion": page.get("apiVersion")}
        return self._entry_of(item)

    def _listed_encoded(self, item: RawObject, page: JSON) -> tuple[Key, Cached | None]:
        """:meth:`_listed` of an item whose fields are still encoded: only its metadata is decoded."""
        self._list_meta = {"kind": page.get("kind"), "apiVersion": page.get("apiVersion")}
        meta = rawlist.fields(item.get("metadata"))
        key = (rawlist.text(meta.get("namespace")), rawlist.text(meta.get("name")))
        if key == self._fence_key:
            return key, None
        for field, value in self._missing_type(item).items():
            item[field] = rawlist.encoded(value)
        shape = self._transform
        encoded = shape.encoded(item, meta) if isinstance(shape, CacheShape) else rawlist.encode(item)
        rv = parsed_rv_or_zero(rawlist.text(meta.get("resourceVersion")))
        return key, Cached(key, rv, self._packer.pack_encoded(encoded))

    def _entry_of(self, item: JSON) -> tuple[Key, Cached | None]:
        """(key, entry) of one listed item; no entry for the read fence, which is never kept."""
        key = key_of(item)
        if key == self._fence_key:
            return key, None
        self._fill_type(item)
        if self._transform is not None:
            item = self._transform(item)
        return key, Cached(key, rv_or_zero(item), self._packer.pack(item))

    def _restart(self, fresh: dict[Key, Cached], text: str, list_rv: int) -> None:
        """Hold ``fresh`` as listed at ``list_rv``, with no history before it."""
        self._store.replace(fresh)
        self._history.restart(list_rv)
        self._store.advance(text, list_rv)

    def _fill_type(self, item: JSON) -> None:
        item.update(self._missing_type(item))

    def _missing_type(self, item: JSON | RawObject) -> dict[str, str]:
        """Items of built-in kinds come without apiVersion/kind; the list carries them."""
        missing: dict[str, str] = {}
        kind = str(self._list_meta.get("kind") or "")
        if "kind" not in item and kind.endswith("List"):
            missing["kind"] = kind[: -len("List")]
        if "apiVersion" not in item and self._list_meta.get("apiVersion"):
            missing["apiVersion"] = str(self._list_meta["apiVersion"])
        return missing
