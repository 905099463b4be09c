"""The watch writer's wait for its next event gives way to a shutdown.

On shutdown kopf cancels every task the service started after it, once, and waits until each has ended; the
tasks serving open watches are among them. A wait that keeps the event and drops the cancellation leaves the
stream running, and the process never exits (seen in CI: a replica still running 20 s after SIGTERM).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.server.watch import next_item


async def test_a_cancel_that_comes_with_an_event_ends_the_wait() -> None:
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    waits = 0

    async def writer() -> None:  # as the watch's writer loops: wait, write, wait again
        nonlocal waits
        while waits < 5:
            waits += 1
            await next_item(queue, 1.0, None)

    task = asyncio.create_task(writer())
    await asyncio.sleep(0.01)
    queue.put_nowait(("event", {"type": "ADDED"}))  # the event and the cancel in one loop turn
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert waits == 1
    assert queue.qsize() == 1, "the event stays queued; it is not lost to a reader that goes on"


async def test_the_wait_ends_at_its_timeout_or_at_what_is_left_of_the_watch() -> None:
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await next_item(queue, 0.2, None) is None
    assert 0.15 <= loop.time() - started < 1.0
    started = loop.time()
    assert await next_item(queue, 5.0, 0.1) is None
    assert loop.time() - started < 1.0
    queue.put_nowait(("end", None))
    assert await next_item(queue, 5.0, None) == ("end", None)
