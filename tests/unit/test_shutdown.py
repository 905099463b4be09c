"""A SIGTERM sets the service's stop once, and a stop that takes long names the task it waits for."""

from __future__ import annotations

import asyncio
import logging
import signal

import pytest

from shared.service import shutdown


async def test_sigterm_sets_stop_and_a_slow_stop_names_the_task_it_waits_for(
        caplog: pytest.LogCaptureFixture) -> None:
    stop = asyncio.Event()
    watch = shutdown.take_signals(stop, slow_after=0.2)
    try:
        await _stop_and_report(stop, caplog)
    finally:
        watch.give_back()
    reports = len([r for r in caplog.records if r.getMessage().startswith("the stop is slow")])
    await asyncio.sleep(0.5)
    assert len([r for r in caplog.records if r.getMessage().startswith("the stop is slow")]) == reports, \
        "given back, the watch reports no more"


async def _stop_and_report(stop: asyncio.Event, caplog: pytest.LogCaptureFixture) -> None:
    async def outlives_its_cancellation() -> None:
        await asyncio.Event().wait()

    stuck = asyncio.create_task(outlives_its_cancellation(), name="stuck-stream")
    caplog.set_level(logging.INFO, logger=shutdown.__name__)
    signal.raise_signal(signal.SIGTERM)
    await asyncio.wait_for(stop.wait(), 5)
    signal.raise_signal(signal.SIGTERM)  # a second signal does not start a second stop
    await asyncio.sleep(0.5)
    stuck.cancel()

    messages = [(r.getMessage(), r.__dict__.get("signal")) for r in caplog.records]
    assert messages[:2] == [("stop requested", "SIGTERM"), ("stop already under way", "SIGTERM")]
    slow = [r for r in caplog.records if r.getMessage() == "the stop is slow: tasks still running"]
    assert len(slow) >= 2, "reported once per interval while the stop lasts"
    tasks: list[str] = slow[0].__dict__["tasks"]
    named = [t for t in tasks if t.startswith("stuck-stream: ")]
    assert len(named) == 1, tasks
    chain, _, where = named[0].removeprefix("stuck-stream: ").partition(" at ")
    assert chain == "outlives_its_cancellation > wait"
    assert where.startswith(asyncio.locks.__file__ + ":")
