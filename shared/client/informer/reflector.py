"""The list/watch loop of one cache (client-go's ``Reflector``): list, watch from the list's revision,
watch again when a watch ends, list again when it fails or expires.

It knows nothing of what is done with what it reads: the owner gets each list and each event.
Failures back off exponentially with jitter (tenacity); any progress starts the backoff over. A ``429`` says when
to come back (``Retry-After``; kube-apiserver answers a list so while the watch cache of its resource initializes
after a restart, and priority and fairness when it sheds load): it is tried again after that long instead, as
client-go's REST client does. The backoff would otherwise grow to many times the wait the server asked for, and
the kinds would be served that much later after a restart of kube-apiserver.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter
from tenacity.wait import wait_base

from shared.api.errors import ApiError
from shared.bodies import JSON

log = logging.getLogger(__name__)

ERROR = "ERROR"

#: A full list: ``{"items": [...], "metadata": {"resourceVersion": ...}}``.
ListFn = Callable[[], Awaitable[JSON]]
#: Raw ``{"type", "object"}`` events after the given resourceVersion until the stream ends; raises on failure.
WatchFn = Callable[[str], AsyncIterator[JSON]]

#: A watch that ends sooner than this without an event counts as a failure to back off from: an
#: upstream that closes every watch at once must not become a busy loop.
MIN_QUIET_WATCH = 1.0


class _Idle(Exception):
    """The watch ended at once without an event."""


class WaitRetryAfterOr(wait_base):
    """After a ``429``, what its ``Retry-After`` says (at most ``cap`` seconds); else ``otherwise``'s wait."""

    def __init__(self, otherwise: wait_base, cap: float) -> None:
        self._otherwise = otherwise
        self._cap = cap

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        failure = outcome.exception() if outcome is not None else None
        if isinstance(failure, ApiError) and failure.code == 429 and failure.retry_after is not None:
            return float(min(max(failure.retry_after, 0), self._cap))
        return float(self._otherwise(retry_state))


class Reflector:
    """Feeds ``on_list`` and ``on_event`` from ``list_fn``/``watch_fn`` until cancelled.

    ``resource_version`` tells where the next watch starts (the owner's current revision).
    """

    def __init__(self, name: str, list_fn: ListFn, watch_fn: WatchFn, *,
                 on_list: Callable[[JSON], None], on_event: Callable[[JSON], None],
                 resource_version: Callable[[], str], backoff_initial: float, backoff_max: float,
                 monotonic: Callable[[], float]) -> None:
        self.name = name
        self._list_fn = list_fn
        self._watch_fn = watch_fn
        self._on_list = on_list
        self._on_event = on_event
        self._resource_version = resource_version
        self._wait = WaitRetryAfterOr(
            wait_exponential_jitter(multiplier=backoff_initial, max=backoff_max, jitter=backoff_initial), backoff_max)
        self._monotonic = monotonic
        self._need_list = True

    async def run(self) -> None:
        while True:
            retrying = AsyncRetrying(wait=self._wait, retry=retry_if_exception_type(Exception),
                                     before_sleep=self._log_retry)
            async for attempt in retrying:
                with attempt:
                    await self._cycle()

    async def _cycle(self) -> None:
        """List if needed, then one watch; returns only after progress (raises otherwise)."""
        started = self._monotonic()
        try:
            if self._need_list:
                self._on_list(await self._list_fn())
                self._need_list = False
            progressed, self._need_list = await self._watch_once()
        except Exception:
            self._need_list = True
            raise
        if not progressed and self._monotonic() - started < MIN_QUIET_WATCH:
            raise _Idle()

    async def _watch_once(self) -> tuple[bool, bool]:
        """One upstream watch from the current revision: (applied any event, must list again)."""
        progressed = False
        stream = self._watch_fn(self._resource_version())
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
                    self._on_event(event)
                    progressed = True
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        return progressed, False

    def _log_retry(self, state: RetryCallState) -> None:
        outcome = state.outcome
        failure = outcome.exception() if outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        if isinstance(failure, _Idle):
            log.debug("%s: watch ended at once; watching again in ~%.1fs", self.name, wait)
        elif isinstance(failure, ApiError) and failure.code == 429 and failure.retry_after is not None:
            log.info("%s: list/watch answered %s (%s); again in %.1fs, as it asked", self.name, failure.code,
                     failure.message, wait)
        else:
            log.warning("%s: list/watch failed (%s); retrying in ~%.1fs", self.name, failure, wait)
