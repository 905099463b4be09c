"""Waiting in an async unit test for something the event loop will do soon."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(condition: Callable[[], bool], seconds: float = 2.0) -> None:
    """Return once ``condition()`` holds, checking every millisecond; fail after ``seconds``."""
    for _ in range(int(seconds / 0.001)):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition not reached in time")
