"""Who takes SIGTERM, the order a service stops in, and what a slow stop says about itself.

kopf installs its own SIGTERM/SIGINT handlers when it starts, over any the service had. Once kopf is up the
service takes them back, so that a stop is logged when it is asked for, ``/readyz`` fails from that moment
(a Service stops sending new connections while the replica drains), and a stop that takes long names what
it waits for: kopf stops by cancelling every task started after it, once, and waits for each to end, so one
task that outlives its cancellation would hold the process until the kubelet kills it at the end of the pod's
grace period, and without this report nothing would say which task it was.

The service's own stop (:func:`stop_when_asked`) runs beside kopf's, from the moment a stop is asked for. kopf
gives every task started after it 5 s to end before it cancels it, and the service's tasks (connections kept
alive by kube-apiserver, the kinds' caches, the Event writer) are among them: ended by the service's own steps
first, they no longer hold kopf for those 5 s.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

#: One step of a stop: its name in the log, and what it awaits.
Step = tuple[str, Callable[[], Awaitable[Any]]]

#: Seconds after a stop is asked for before the tasks still running are reported (and every as many after).
SLOW_AFTER = 10.0
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalWatch:
    """SIGTERM and SIGINT set ``stop`` while this is installed; :meth:`give_back` removes it again."""

    def __init__(self, stop: asyncio.Event, slow_after: float = SLOW_AFTER) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop, self._every = stop, slow_after
        self._since = 0.0
        self._report: asyncio.TimerHandle | None = None
        for sig in SIGNALS:
            self._loop.add_signal_handler(sig, self._requested, sig)

    def give_back(self) -> None:
        """Remove the handlers and any pending slow-stop report (a process that exits needs neither)."""
        for sig in SIGNALS:
            self._loop.remove_signal_handler(sig)
        if self._report is not None:
            self._report.cancel()

    def _requested(self, sig: signal.Signals) -> None:
        if self._stop.is_set():
            log.info("stop already under way", extra={"signal": sig.name})
            return
        log.info("stop requested", extra={"signal": sig.name})
        self._stop.set()
        self._since = self._loop.time()
        self._report = self._loop.call_later(self._every, self._report_slow)

    def _report_slow(self) -> None:
        running = [_describe(task) for task in asyncio.all_tasks(self._loop) if not task.done()]
        log.warning("the stop is slow: tasks still running",
                    extra={"seconds": round(self._loop.time() - self._since, 1), "tasks": running})
        self._report = self._loop.call_later(self._every, self._report_slow)


def take_signals(stop: asyncio.Event, slow_after: float = SLOW_AFTER) -> SignalWatch:
    """From now on SIGTERM and SIGINT set ``stop`` (call it after kopf has installed its own handlers)."""
    return SignalWatch(stop, slow_after)


def _describe(task: asyncio.Task[object]) -> str:
    """The task's name, its chain of awaiting coroutines and where the innermost one waits.

    Walked by hand: ``Task.get_stack`` gives only the task's outermost coroutine (for a request, aiohttp's
    handler loop), not the awaited coroutine that is stuck.
    """
    names: list[str] = []
    where = ""
    awaited: object = task.get_coro()
    while (frame := getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)) is not None:
        names.append(frame.f_code.co_name)
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    return f"{task.get_name()}: {' > '.join(names)} at {where}" if names else task.get_name()


async def stop_when_asked(stop: asyncio.Event, steps: Sequence[Step], delay: float = 0.0) -> float:
    """Once ``stop`` is set: serve on for ``delay`` seconds (``/readyz`` fails meanwhile), then run ``steps`` in
    order, each timed; returns the ``time.monotonic()`` at which the stop was asked for.

    The delay is the drain a replica behind a Service needs: the endpoints that still send it connections are
    updated a moment after the pod is told to stop (kube-apiserver's ``--shutdown-delay-duration`` is the same
    idea). A step that fails is logged, and the next one runs all the same: what the later steps write (the
    queued Events) is not lost to an earlier failure.
    """
    await stop.wait()
    asked = time.monotonic()
    if delay > 0:
        log.info("serving on before the stop", extra={"seconds": delay})
        await asyncio.sleep(delay)
    log.info("shutting down")
    for name, step in steps:
        started = time.monotonic()
        try:
            await step()
        except Exception:
            log.exception("shutdown step failed", extra={"step": name})
            continue
        log.info("shutdown step done", extra={"step": name, "seconds": round(time.monotonic() - started, 3)})
    return asked


async def cancel_and_wait(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until each has ended, whatever it raised."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
