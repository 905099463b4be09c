"""When a cache may answer a list in kube-apiserver's place, by the list's resourceVersion.

``"0"`` means any state, so the cache answers as it is.  Any other given RV means "not older than":
the cache answers once it has reached it (waiting ``catch_up`` seconds for events in flight).  An
empty RV is a consistent read: one ``limit=1`` list (the cheapest consistent read) tells the current
revision; when the cache has not seen it yet, it cannot tell "no event of mine happened since" from
"an event is late" (kube-apiserver sends no progress bookmark on demand), so it writes its fence
(:mod:`shared.client.fence`) and answers once it has seen that write.  Without a fence, or when the
fence cannot be written, the cache declines and the caller's direct read keeps the answer consistent.
"""

from __future__ import annotations

import logging
from collections import Counter

from shared.api.errors import ApiError
from shared.client.fence import ReadFence

from .packing import parse_rv
from .source import ProbeFn
from .store import Store

log = logging.getLogger(__name__)


class ConsistentReads:
    """The read rules of one cache, and how its consistent lists were answered.

    ``answers`` counts consistent lists by answer: ``cache`` (current as it was), ``fence`` (current
    once its read fence came back) or ``kube`` (declined: kube-apiserver answered).
    """

    def __init__(self, name: str, store: Store, probe_fn: ProbeFn | None, fence: ReadFence | None, *,
                 catch_up: float, fence_wait: float) -> None:
        self.name = name
        self._store = store
        self._probe_fn = probe_fn
        self._fence = fence
        self._catch_up = catch_up
        self._fence_wait = fence_wait
        self._fence_failure = ""
        self.answers: Counter[str] = Counter()

    def declined(self, resource_version: str | None) -> None:
        """The cache could not answer at all (not synced yet, or stopped)."""
        if not resource_version:
            self.answers["kube"] += 1

    async def may_answer(self, resource_version: str | None) -> bool:
        """Whether a list at ``resource_version`` may be answered from the store as it is now."""
        if resource_version == "0":
            return True
        if resource_version:
            try:
                wanted = parse_rv(resource_version)
            except ValueError:
                return False
            return await self._store.reached(wanted, self._catch_up)
        return self._probe_fn is not None and await self._current()

    async def _current(self) -> bool:
        """Whether the store has seen the current revision, behind a fence if need be (counted by answer)."""
        assert self._probe_fn is not None
        wanted, wait, answer = parse_rv(await self._probe_fn()), self._catch_up, "cache"
        if self._store.rv_int < wanted and (fenced := await self._fenced()) is not None:
            wanted, wait, answer = fenced, self._fence_wait, "fence"
        reached = await self._store.reached(wanted, wait)
        self.answers[answer if reached else "kube"] += 1
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
