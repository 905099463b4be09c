"""A short-lived, fail-closed cache of kube-apiserver's answers to review requests.

Delegated authentication (TokenReview) and authorization (SubjectAccessReview) ask kube-apiserver
on behalf of a request; one review per request would double the latency of every call, so
answers are kept briefly (per answer, so revocations take effect quickly) and concurrent identical
questions share one review.  Anything that prevents a review from completing (kube-apiserver
unreachable, slow, erroring) refuses the request with a 503 and ``Retry-After``: failing open would
hand out access, and a 401/403 would tell the caller something about themselves that is not true.
Reviews are time-bounded, so an unresponsive kube-apiserver never hangs a request, and failures
are not remembered, so the next request asks again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

from shared.api import errors

log = logging.getLogger(__name__)

#: Bound on one review round trip, in seconds.
REVIEW_TIMEOUT = 10.0

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReviewCache(Generic[K, V]):
    """Answers by key, each kept for ``ttl(answer)`` seconds; at most ``max_entries`` (least recently used go)."""

    def __init__(
        self,
        what: str,
        ttl: Callable[[V], float],
        *,
        max_entries: int = 10_000,
        review_timeout: float = REVIEW_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._what = what
        self._ttl = ttl
        self._max_entries = max_entries
        self._review_timeout = review_timeout
        self._clock = clock
        self._cache: OrderedDict[K, tuple[V, float]] = OrderedDict()
        self._inflight: dict[K, asyncio.Future[V]] = {}

    def __len__(self) -> int:
        return len(self._cache)

    def _cached(self, key: K) -> tuple[V] | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        answer, expires = entry
        if self._clock() >= expires:
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return (answer,)

    def _store(self, key: K, answer: V) -> None:
        self._cache[key] = (answer, self._clock() + self._ttl(answer))
        self._cache.move_to_end(key)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)

    async def get(self, key: K, review: Callable[[], Awaitable[V]], context: Mapping[str, Any]) -> V:
        """The cached answer for ``key``, else ``await review()`` (shared with concurrent askers).

        Raises a 503 :class:`~shared.api.errors.ApiError` when the review could not be completed;
        ``context`` is logged with the failure.
        """
        cached = self._cached(key)
        if cached is not None:
            return cached[0]
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            try:
                async with asyncio.timeout(self._review_timeout):
                    answer = await review()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error(f"{self._what} failed; refusing the request", extra={**context, "error": repr(exc)})
                failure = errors.unavailable(f"the {self._what} could not be completed; try again")
                future.set_exception(failure)
                future.exception()  # retrieved: sharing waiters re-raise it, nobody else must log it
                raise failure from exc
            self._store(key, answer)
            future.set_result(answer)
            return answer
        finally:
            if not future.done():
                future.set_exception(errors.unavailable(f"the {self._what} was cancelled; try again"))
                future.exception()
            self._inflight.pop(key, None)
