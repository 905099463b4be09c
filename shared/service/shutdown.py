"""Who takes SIGTERM, and what a slow stop says about itself.

kopf installs its own SIGTERM/SIGINT handlers when it starts, over any the service had. Once kopf is up the
service takes them back, so that a stop is logged when it is asked for, ``/readyz`` fails from that moment
(a Service stops sending new connections while the replica drains), and a stop that takes long names what
it waits for: kopf stops by cancelling every task started after it, once, and waits for each to end, so one
task that outlives its cancellation would hold the process until the kubelet kills it at the end of the pod's
grace period, and without this report nothing would say which task it was.
"""

from __future__ import annotations

import asyncio
import logging
import signal

log = logging.getLogger(__name__)

#: Seconds after a stop is asked for before the tasks still running are reported (and every as many after).
SLOW_AFTER = 10.0
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def take_signals(stop: asyncio.Event, slow_after: float = SLOW_AFTER) -> None:
    """From now on SIGTERM and SIGINT set ``stop`` (call it after kopf has installed its own handlers)."""
    loop = asyncio.get_running_loop()
    for sig in SIGNALS:
        loop.add_signal_handler(sig, _requested, loop, stop, sig, slow_after)


def _requested(loop: asyncio.AbstractEventLoop, stop: asyncio.Event, sig: signal.Signals, slow_after: float) -> None:
    if stop.is_set():
        log.info("stop already under way", extra={"signal": sig.name})
        return
    log.info("stop requested", extra={"signal": sig.name})
    stop.set()
    loop.call_later(slow_after, _report_slow, loop, loop.time(), slow_after)


def _report_slow(loop: asyncio.AbstractEventLoop, since: float, every: float) -> None:
    running = [_describe(task) for task in asyncio.all_tasks(loop) if not task.done()]
    log.warning("the stop is slow: tasks still running",
                extra={"seconds": round(loop.time() - since, 1), "tasks": running})
    loop.call_later(every, _report_slow, loop, since, every)


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
