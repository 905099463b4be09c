"""A watch-backed cache of one resource, with a replayable event history.

It plays two roles at once, the way client-go's reflector and kube-apiserver's watch cache do:

* a *cache*: an initial list, then a watch from the list's resourceVersion, keeps every current
  object in memory so lists of the served kinds are answered without kube-apiserver serializing
  them (:meth:`Informer.entries`, which keeps kube's resourceVersion semantics for reads);
* a *watch source*: the last N events are retained with their resourceVersions, so a client of
  the aggregated API that watches from resourceVersion X gets exactly the events after X, or a
  410 when X is older than what is retained -- the contract kubectl and informers rely on.

When the upstream watch breaks (kube-apiserver restarted, 410, network), the cache lists again and
emits the *difference* between what it held and what the new list says as synthetic
ADDED/MODIFIED/DELETED events, so downstream watchers neither miss a change nor see one twice.

Ordering resourceVersions.  The API treats resourceVersions as opaque strings, and this module
compares them for equality wherever that suffices (e.g. "did this object change?").  It must also
*order* them: to replay history after a client's RV, to detect an RV older than the retained
history, and to assign RVs to synthetic DELETED events.  For one resource served by
kube-apiserver, resourceVersions are etcd revisions -- one global, strictly increasing integer
per etcd cluster -- so comparing them as integers is exact.  If a relist ever observes the RV
going *backwards* (etcd was replaced), the history is meaningless: every subscriber is closed
with 410 and the history starts over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import weakref
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import NamedTuple

from shared.api import errors
from shared.api.errors import ApiError
from shared.bodies import JSON, clone, dumps, loads
from shared.client.fence import ReadFence
from shared.client.kube import ObjectClient

Key = tuple[str, str]
ListFn = Callable[[], Awaitable[JSON]]
WatchFn = Callable[[str], AsyncIterator[JSON]]
ProbeFn = Callable[[], Awaitable[str]]
Transform = Callable[[JSON], JSON]

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"


#: A cached object as the informer keeps it: its JSON encoding (see :func:`pack`).
Packed = bytes


class _Record(NamedTuple):
    rv: int
    type: str
    obj: Packed


class _Entry(NamedTuple):
    """One current object of the cache: its resourceVersion and its packed form."""

    rv: int
    packed: Packed


class Cached(NamedTuple):
    """One object of an :meth:`Informer.entries` answer, still packed: a reader that keeps
    something derived from it can tell by ``rv`` whether that is still current without decoding it."""

    key: Key
    rv: int
    packed: Packed


def pack(obj: JSON) -> Packed:
    """An object as the cache keeps it: its compact JSON encoding.

    Decoded JSON costs 3-4 times its encoded size in Python objects (a dict of a few keys is a few
    hundred bytes); a cache of 10 000 backing objects is mostly that.  Every read decodes a fresh
    copy (orjson, a few microseconds an object), which also frees readers from the "do not mutate"
    rule a shared dict would impose.
    """
    # orjson's bytes keep the buffer it grew while writing (4 KiB for a 1.4 KB object): the cache
    # keeps an exact-size copy.
    return bytes(memoryview(dumps(obj)))


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _key(obj: JSON) -> Key:
    meta = _meta(obj)
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _rv_str(obj: JSON) -> str:
    return str(_meta(obj).get("resourceVersion") or "")


def parse_rv(rv: str) -> int:
    """The integer behind a kube resourceVersion (an etcd revision); ValueError if it is not one."""
    value = int(rv)
    if value < 0 or not rv.isdigit():
        raise ValueError(f"invalid resource version {rv!r}")
    return value


#: The process's informers, for its ``/metrics`` (a service process runs one server).
_INFORMERS: weakref.WeakSet[Informer] = weakref.WeakSet()


def consistent_list_answers() -> Iterator[tuple[str, str, int]]:
    """(informer, answer, count) of every informer's consistent lists: ``cache`` (current as it was),
    ``fence`` (current once its read fence came back) or ``kube`` (declined: kube-apiserver answered)."""
    for informer in list(_INFORMERS):
        for answer, count in informer.consistent_lists.items():
            yield informer.name, answer, count


class _Reset(Exception):
    """The upstream state cannot be reconciled with the history; subscribers must re-list."""


class Informer:
    """Cache and replayable watch of one resource (optionally one namespace / label selector).

    Either pass an :class:`ObjectClient` or inject ``list_fn``/``watch_fn`` (tests, other
    sources): ``list_fn()`` returns a full list ``{"items": [...], "metadata": {"resourceVersion"}}``
    and ``watch_fn(rv)`` yields raw ``{"type", "object"}`` events after ``rv`` until the stream
    ends, raising on failure.

    The cache keeps each object packed (:func:`pack`); :meth:`entries` hands them out still packed, and
    subscriptions hand out fresh copies, which their readers may mutate.
    """

    def __init__(
        self,
        client: ObjectClient | None = None,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        list_fn: ListFn | None = None,
        watch_fn: WatchFn | None = None,
        history_size: int = 1000,
        queue_size: int = 1000,
        page_size: int = 500,
        watch_timeout: int = 300,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        name: str = "",
        transform: Transform | None = None,
        probe_fn: ProbeFn | None = None,
        catch_up: float = 0.01,
        fence: ReadFence | None = None,
        fence_wait: float = 1.0,
    ) -> None:
        if list_fn is None or watch_fn is None:
            if client is None:
                raise ValueError("Informer needs an ObjectClient or both list_fn and watch_fn")
            oc = client

            async def default_list() -> JSON:
                return await oc.list_all(namespace, label_selector, page_size=page_size)

            def default_watch(rv: str) -> AsyncIterator[JSON]:
                return oc.watch(
                    namespace, label_selector, rv, timeout_seconds=watch_timeout, allow_bookmarks=True
                )

            async def default_probe() -> str:
                # The cheapest consistent read there is: its list RV is the current revision.
                page = await oc.list(namespace, limit=1)
                return str((page.get("metadata") or {}).get("resourceVersion") or "")

            list_fn = list_fn or default_list
            watch_fn = watch_fn or default_watch
            probe_fn = probe_fn or default_probe
        self.name = name or (client.gvr.plural if client else "informer")
        self._list_fn: ListFn = list_fn
        self._watch_fn: WatchFn = watch_fn
        self._probe_fn = probe_fn
        self._transform = transform
        self._catch_up = catch_up
        self._fence = fence
        self._fence_wait = fence_wait
        #: The fence's events move the cache's resourceVersion on; the object itself is never kept.
        self._fence_key = fence.key if fence is not None else None
        self._fence_failure = ""
        #: How the consistent lists asked of this cache were answered (see :func:`consistent_list_answers`).
        self.consistent_lists: Counter[str] = Counter()
        _INFORMERS.add(self)
        #: Set (and replaced) whenever the cache's resourceVersion advances; readers wait on it.
        self._advanced = asyncio.Event()
        self._history: deque[_Record] = deque(maxlen=max(history_size, 1))
        self._max_q = max(queue_size, 1)
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._objects: dict[Key, _Entry] = {}
        self._rv = ""
        self._rv_int = 0
        #: Smallest RV a subscriber may resume from: every event after it is still in history.
        self._horizon = 0
        self._list_meta: JSON = {}
        self._subs: set[Subscription] = set()
        #: Subscriptions still waiting for the first list (so stop() can end them too).
        self._waiting: set[Subscription] = set()
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start listing and watching in a background task (idempotent)."""
        self._stopped = False
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"informer:{self.name}")

    async def stop(self) -> None:
        """Stop the background task and end every subscription (subscribers see end-of-stream)."""
        self._stopped = True
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
        for sub in list(self._subs) + list(self._waiting):
            sub._finish(None)
        self._subs.clear()

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
                f"the {self.name} watch cache is initializing: kube-apiserver is not reachable yet"
            ) from None

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (from a list, an event or a bookmark)."""
        return self._rv

    # ------------------------------------------------------------------ reads

    @property
    def size(self) -> int:
        """How many objects the cache holds now."""
        return len(self._objects)

    def holds(self, key: Key) -> bool:
        """Whether the cache holds the object ``key`` (namespace, name) now."""
        return key in self._objects

    async def entries(self, resource_version: str | None,
                      namespace: str | None = None) -> tuple[list[Cached], str] | None:
        """The cached objects, still packed (sorted by namespace and name, as kube-apiserver lists them;
        only ``namespace``'s when given), and the resourceVersion they are current at, when kube's
        semantics for ``resource_version`` allow answering from the cache; None when the caller must
        read kube-apiserver instead.

        ``"0"`` means any state, so the cache answers as it is.  ``""``/None is a consistent read: one
        ``limit=1`` list (the cheapest consistent read) tells the current revision; when the cache has
        not seen it yet, the cache cannot tell "no event of mine happened since" from "an event is
        late" (kube-apiserver sends no progress bookmark on demand), so it writes its fence
        (:mod:`shared.client.fence`) and answers once it has seen that write.  Without a fence, or when
        the fence cannot be written, it waits ``catch_up`` seconds for events in flight and otherwise
        declines, and the caller's direct read keeps the answer consistent.  Any other RV is "not
        older than" it.
        """
        if not self.synced or self._stopped:
            if not resource_version:
                self.consistent_lists["kube"] += 1
            return None
        if resource_version == "0":
            pass
        elif resource_version:
            try:
                wanted = parse_rv(resource_version)
            except ValueError:
                return None
            if not await self._reached(wanted, self._catch_up):
                return None
        elif self._probe_fn is None or not await self._current():
            return None
        return [Cached(key, entry.rv, entry.packed) for key, entry in sorted(self._objects.items())
                if not namespace or key[0] == namespace], self._rv

    async def _current(self) -> bool:
        """Whether the cache has seen the current revision, behind a fence if need be (counted by answer)."""
        assert self._probe_fn is not None
        wanted, wait, answer = parse_rv(await self._probe_fn()), self._catch_up, "cache"
        if self._rv_int < wanted and (fenced := await self._fenced()) is not None:
            wanted, wait, answer = fenced, self._fence_wait, "fence"
        reached = await self._reached(wanted, wait)
        self.consistent_lists[answer if reached else "kube"] += 1
        return reached

    async def _fenced(self) -> int | None:
        """The resourceVersion of a fence write sent after this call began; None without a fence or
        when it could not be written (logged once per distinct failure)."""
        if self._fence is None:
            return None
        try:
            rv = parse_rv(await self._fence())
        except (ApiError, ValueError) as exc:
            failure = f"{exc.code} {exc.reason}: {exc}" if isinstance(exc, ApiError) else str(exc)
            if failure != self._fence_failure:
                self._fence_failure = failure
                log.warning("%s: read fence not written (%s); consistent lists go to kube-apiserver",
                            self.name, failure)
            return None
        self._fence_failure = ""
        return rv

    async def _reached(self, rv: int, wait: float) -> bool:
        """Whether the cache reaches ``rv`` within ``wait`` seconds."""
        if self._rv_int >= rv:
            return True
        try:
            async with asyncio.timeout(wait):
                while self._rv_int < rv:
                    await self._advanced.wait()
        except TimeoutError:
            return False
        return True

    def _notify_advanced(self) -> None:
        self._advanced.set()
        self._advanced = asyncio.Event()

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, resource_version: str | None = None, *, bookmarks: bool = False) -> Subscription:
        """Events after ``resource_version``; None/""/"0" means current state as ADDED, then live.

        Iterating raises ``ApiError`` 410 when the RV is older than the retained history, or
        later when the subscriber fell too far behind; the caller ends its watch with an ERROR
        event carrying that Status, and the client re-lists.
        """
        return Subscription(self, resource_version, bookmarks, self._max_q)

    def _register(self, sub: Subscription) -> None:
        """Attach ``sub``: queue what it missed, then live events.  Synchronous on purpose --
        no event can slip in between the replay snapshot and the registration."""
        if self._stopped:
            sub._finish(None)
            return
        rv = sub.start_rv
        if rv in (None, "", "0"):
            snapshot = sorted(self._objects.values())
            sub._replay.extend((ADDED, entry.packed) for entry in snapshot)
            sub.min_rv = self._rv_int
        else:
            try:
                want = parse_rv(rv)
            except ValueError:
                raise errors.bad_request(f'invalid resource version "{rv}"') from None
            if want < self._horizon:
                raise errors.gone(f"too old resource version: {rv} ({self._horizon})")
            sub._replay.extend((r.type, r.obj) for r in self._history if r.rv > want)
            sub.min_rv = max(want, self._rv_int)
        if sub.bookmarks and self._rv and sub.min_rv == self._rv_int:
            sub._replay.append((BOOKMARK, self._bookmark_object(self._rv)))
        self._subs.add(sub)

    def _unregister(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    def _broadcast(self, type_: str, obj: Packed | JSON, rv: int) -> None:
        for sub in list(self._subs):
            if type_ == BOOKMARK and not sub.bookmarks:
                continue
            if type_ != BOOKMARK and rv <= sub.min_rv:
                continue
            if not sub._offer((type_, obj)):
                log.info("%s: a subscriber fell %d events behind; closing it (410)", self.name, self._max_q)
                self._subs.discard(sub)
                sub._finish(errors.gone("the watch fell too far behind; list again and re-watch"))

    def _bookmark_object(self, rv: str) -> JSON:
        obj: JSON = {"metadata": {"resourceVersion": rv}}
        kind = str(self._list_meta.get("kind") or "")
        if kind.endswith("List"):
            obj["kind"] = kind[: -len("List")]
        if self._list_meta.get("apiVersion"):
            obj["apiVersion"] = self._list_meta["apiVersion"]
        return obj

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        """List, then watch from the list's RV; re-watch when a watch ends, re-list on failure.

        Failures back off exponentially (with jitter, capped); any progress resets the backoff.
        """
        loop = asyncio.get_running_loop()
        backoff = self._backoff_initial
        need_list = True
        while True:
            started = loop.time()
            progressed = failed = False
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                progressed, need_list = await self._watch_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s: list/watch failed (%s); retrying in ~%.1fs", self.name, exc, backoff)
                need_list = failed = True
            if progressed:
                backoff = self._backoff_initial
            elif failed or loop.time() - started < 1.0:
                # Also a watch that ends at once without events: it must not become a busy loop.
                await self._sleep(backoff)
                backoff = min(backoff * 2, self._backoff_max)

    async def _watch_once(self) -> tuple[bool, bool]:
        """One upstream watch from the current RV: (applied any event, must re-list)."""
        progressed = False
        stream = self._watch_fn(self._rv)
        try:
            async for event in stream:
                type_ = event.get("type")
                if type_ == ERROR:
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        log.info("%s: watch expired (%s); re-listing", self.name, status.get("message"))
                        return progressed, True
                    raise ApiError(
                        int(status.get("code") or 500),
                        str(status.get("reason") or "InternalError"),
                        str(status.get("message") or "watch error"),
                    )
                if type_:
                    self._apply(event)
                    progressed = True
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        return progressed, False

    @staticmethod
    async def _sleep(seconds: float) -> None:
        await asyncio.sleep(seconds * random.uniform(0.8, 1.2))

    def _apply(self, event: JSON) -> None:
        type_ = str(event.get("type"))
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event {type_} without an object")
        rv_text = _rv_str(obj)
        rv = parse_rv(rv_text)
        key = _key(obj)  # transforms keep namespace and name
        if type_ == BOOKMARK or key == self._fence_key:
            if rv > self._rv_int:
                self._rv, self._rv_int = rv_text, rv
                self._broadcast(BOOKMARK, self._bookmark_object(rv_text), rv)
                self._notify_advanced()
            return
        if type_ not in (ADDED, MODIFIED, DELETED):
            log.debug("%s: ignoring watch event of type %s", self.name, type_)
            return
        if rv <= self._rv_int:
            # Already seen (kube never resends, but a duplicate must never reach subscribers).
            return
        if self._transform is not None:
            obj = self._transform(obj)
        packed = pack(obj)
        if type_ == DELETED:
            self._objects.pop(key, None)
        else:
            self._objects[key] = _Entry(rv, packed)
        self._record(rv, type_, packed)
        self._rv = rv_text
        self._notify_advanced()

    def _record(self, rv: int, type_: str, obj: Packed) -> None:
        if len(self._history) == self._history.maxlen:
            self._horizon = self._history[0].rv
        self._history.append(_Record(rv, type_, obj))
        self._rv_int = rv
        self._broadcast(type_, obj, rv)

    async def _relist(self) -> None:
        data = await self._list_fn()
        meta = data.get("metadata") or {}
        rv_text = str(meta.get("resourceVersion") or "")
        list_rv = parse_rv(rv_text)
        self._list_meta = {"kind": data.get("kind"), "apiVersion": data.get("apiVersion")}
        fresh: dict[Key, _Entry] = {}
        for item in data.get("items") or []:
            if _key(item) == self._fence_key:
                continue
            self._fill_type(item)
            if self._transform is not None:
                item = self._transform(item)
            fresh[_key(item)] = _Entry(_rv_sort_key(item), pack(item))
        if not self._synced.is_set():
            self._reset(fresh, rv_text, list_rv)
            self._synced.set()
            self._notify_advanced()
            log.info("%s: synced %d objects at resourceVersion %s", self.name, len(fresh), rv_text)
            return
        try:
            changes = self._diff(fresh, list_rv)
        except _Reset as why:
            log.warning("%s: %s; closing all watches with 410", self.name, why)
            for sub in list(self._subs):
                sub._finish(errors.gone(f"the watch cache was reset: {why}"))
            self._subs.clear()
            self._reset(fresh, rv_text, list_rv)
            self._notify_advanced()
            return
        self._objects = fresh
        for rec in changes:
            self._record(rec.rv, rec.type, rec.obj)
        if changes:
            log.info("%s: relist at %s emitted %d synthetic events", self.name, rv_text, len(changes))
        self._rv, self._rv_int = rv_text, list_rv
        self._broadcast(BOOKMARK, self._bookmark_object(rv_text), list_rv)
        self._notify_advanced()

    def _reset(self, fresh: dict[Key, _Entry], rv_text: str, list_rv: int) -> None:
        self._objects = fresh
        self._history.clear()
        self._rv, self._rv_int, self._horizon = rv_text, list_rv, list_rv

    def _diff(self, fresh: dict[Key, _Entry], list_rv: int) -> list[_Record]:
        """Synthetic events turning the cached state into ``fresh``, ordered by resourceVersion.

        Changed objects keep their own RVs.  A deleted object's true deletion revision is
        unknown, but it lies in (last seen RV, list RV] and is not any surviving object's RV, so
        each DELETED gets a distinct unused integer from that window (highest first).  Distinct
        RVs matter: a client resuming from any one of these events must get exactly the rest.
        """
        last = self._rv_int
        if list_rv < last:
            raise _Reset(f"resourceVersion went backwards ({last} -> {list_rv})")
        changes: list[_Record] = []
        for key, entry in fresh.items():
            old = self._objects.get(key)
            if old is not None and old.rv == entry.rv:
                continue
            rv = entry.rv
            if not last < rv <= list_rv:
                raise _Reset(f"object {key} changed at resourceVersion {rv}, outside ({last}, {list_rv}]")
            changes.append(_Record(rv, ADDED if old is None else MODIFIED, entry.packed))
        gone_keys = [k for k in self._objects if k not in fresh]
        if gone_keys:
            used = {rec.rv for rec in changes}
            free: list[int] = []
            candidate = list_rv
            while len(free) < len(gone_keys) and candidate > last:
                if candidate not in used:
                    free.append(candidate)
                candidate -= 1
            if len(free) < len(gone_keys):
                raise _Reset("more deletions than revisions since the last seen resourceVersion")
            for key, rv in zip(sorted(gone_keys), free, strict=True):
                tomb = loads(self._objects[key].packed)
                tomb.setdefault("metadata", {})["resourceVersion"] = str(rv)
                changes.append(_Record(rv, DELETED, pack(tomb)))
        changes.sort(key=lambda rec: rec.rv)
        return changes

    def _fill_type(self, item: JSON) -> None:
        # Items of built-in kinds come without apiVersion/kind; the list carries them.
        kind = str(self._list_meta.get("kind") or "")
        if "kind" not in item and kind.endswith("List"):
            item["kind"] = kind[: -len("List")]
        if "apiVersion" not in item and self._list_meta.get("apiVersion"):
            item["apiVersion"] = self._list_meta["apiVersion"]


def without_managed_fields(obj: JSON) -> JSON:
    """A :data:`Transform` for caches whose readers never show ``managedFields`` (most of an
    object's metadata by size): the cached copy leaves them out."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def keeping_spec(fields: Iterable[str]) -> Transform:
    """A :data:`Transform` for caches whose readers look at only some of ``spec``: the cached copy
    has no ``managedFields`` and, of ``spec``, only ``fields``; metadata and status stay whole.

    The owner lists what its readers use; an object read from kube-apiserver directly (a get, the
    write path) is whole, so the owner's tests compare what both give.
    """
    kept = frozenset(fields)

    def transform(obj: JSON) -> JSON:
        obj = without_managed_fields(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict) and not kept.issuperset(spec):
            obj = {**obj, "spec": {k: v for k, v in spec.items() if k in kept}}
        return obj

    return transform


def _rv_sort_key(obj: JSON) -> int:
    try:
        return parse_rv(_rv_str(obj))
    except ValueError:
        return 0


_END = object()


def _copy(obj: Packed | JSON) -> JSON:
    """What a subscriber receives: its own copy of a packed object (or of a bookmark)."""
    copy: JSON = loads(obj) if isinstance(obj, bytes) else clone(obj)
    return copy


class Subscription:
    """One downstream watcher: replayed events first, then live ones from a bounded buffer.

    Use as ``async with informer.subscribe(rv) as sub: async for event in sub: ...`` (or call
    :meth:`aclose`).  Events are ``{"type": ..., "object": <copy>}``.
    """

    def __init__(self, informer: Informer, start_rv: str | None, bookmarks: bool, queue_size: int) -> None:
        self._informer = informer
        self.start_rv = start_rv
        self.bookmarks = bookmarks
        #: Live events at or below this RV were already covered by the replay.
        self.min_rv = 0
        self._max = queue_size
        #: Objects packed (the cache's own bytes), bookmarks as dicts.
        self._replay: deque[tuple[str, Packed | JSON]] = deque()
        self._buf: deque[tuple[str, Packed | JSON]] = deque()
        self._wake = asyncio.Event()
        self._started = False
        self._done = False
        self._error: ApiError | None = None

    def _offer(self, item: tuple[str, Packed | JSON]) -> bool:
        if self._done:
            return True
        if len(self._buf) >= self._max:
            return False
        self._buf.append(item)
        self._wake.set()
        return True

    def _finish(self, error: ApiError | None) -> None:
        """End the stream: after the buffered events (None), or at once with ``error``."""
        if self._done:
            return
        self._done = True
        self._error = error
        if error is not None:
            self._replay.clear()
            self._buf.clear()
        self._wake.set()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> JSON:
        if not self._started:
            self._started = True
            await self._wait_synced()
            if not self._done:
                try:
                    self._informer._register(self)
                except ApiError:
                    self._done = True
                    raise
        while True:
            if self._replay:
                type_, obj = self._replay.popleft()
                return {"type": type_, "object": _copy(obj)}
            if self._buf:
                type_, obj = self._buf.popleft()
                return {"type": type_, "object": _copy(obj)}
            if self._done:
                error, self._error = self._error, None
                if error is not None:
                    raise error
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()

    async def _wait_synced(self) -> None:
        """Wait for the informer's first list, unless the subscription is closed meanwhile."""
        informer = self._informer
        if informer.synced:
            return
        informer._waiting.add(self)
        try:
            while not informer.synced and not self._done:
                self._wake.clear()
                synced = asyncio.ensure_future(informer._synced.wait())
                woken = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait({synced, woken}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    synced.cancel()
                    woken.cancel()
        finally:
            informer._waiting.discard(self)

    async def aclose(self) -> None:
        """Detach from the informer; further iteration ends."""
        self._informer._unregister(self)
        self._finish(None)
        self._buf.clear()
        self._replay.clear()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
