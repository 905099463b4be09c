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


async def test_the_stop_waits_for_the_signal_serves_on_for_the_delay_then_runs_every_step_in_order(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=shutdown.__name__)
    stop, ran = asyncio.Event(), []

    def step(name: str, fails: bool = False) -> shutdown.Step:
        async def run() -> None:
            ran.append((name, loop.time()))
            if fails:
                raise RuntimeError(f"{name} broke")
        return name, run

    loop = asyncio.get_running_loop()
    steps = [step("serving"), step("kinds", fails=True), step("events")]
    stopping = asyncio.create_task(shutdown.stop_when_asked(stop, steps, delay=0.3))
    await asyncio.sleep(0.1)
    assert not ran and not stopping.done(), "nothing stops before the stop is asked for"
    asked = loop.time()
    stop.set()
    await asyncio.sleep(0.15)
    assert not ran, "the replica serves on during the delay"
    assert abs(await asyncio.wait_for(stopping, 5) - asked) < 0.05, "it returns when the stop was asked for"
    assert [name for name, _ in ran] == ["serving", "kinds", "events"], "a failed step does not skip the next ones"
    assert ran[0][1] - asked >= 0.3
    failed = [r for r in caplog.records if r.getMessage() == "shutdown step failed"]
    assert [r.__dict__["step"] for r in failed] == ["kinds"] and failed[0].exc_info is not None
    done = [r.__dict__["step"] for r in caplog.records if r.getMessage() == "shutdown step done"]
    assert done == ["serving", "events"]
