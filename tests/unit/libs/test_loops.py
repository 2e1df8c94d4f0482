"""libs/loops: a crashed loop comes back after the delay on the injected clock, one that
returns stays stopped, stop() cancels and waits (some first, in order), all within bounds."""

from __future__ import annotations

import asyncio
import logging

import pytest

from ratchet.libs.clock import FakeClock
from ratchet.libs.loops import Loops

pytestmark = pytest.mark.timeout(10)  # a loop that never ends fails here, it does not hang the run

BOUND_S = 2.0  # how long any one wait below may take before the test fails


async def _until(predicate, what: str) -> None:
    async def poll():
        while not predicate():
            await asyncio.sleep(0)
    try:
        await asyncio.wait_for(poll(), BOUND_S)
    except TimeoutError:
        pytest.fail(f"no {what} within {BOUND_S}s")


class Script:
    """A run() that counts its calls and does what the test scripted for each: raise an
    exception, return (None), or wait to be cancelled (anything else)."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.calls = 0
        self.cancelled = 0

    async def __call__(self) -> None:
        self.calls += 1
        step = self.steps.pop(0) if self.steps else "forever"
        if isinstance(step, BaseException):
            raise step
        if step is None:
            return
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


def until_cancelled(name: str, ended: list[str], cleanup_s: float = 0.0):
    """A run() that waits to be cancelled, then (after cleanup_s) records that it ended."""
    async def run():
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(cleanup_s)
            ended.append(name)
    return run


async def test_a_crashed_loop_restarts_after_the_delay_on_the_injected_clock(caplog):
    clock = FakeClock()
    run = Script(RuntimeError("a bug"), RuntimeError("again"))
    loops = Loops("cron", clock, restart_s=1.5)
    with caplog.at_level(logging.ERROR, logger="ratchet.libs.loops"):
        loops.start("fire", run)
        await _until(lambda: clock._waiters, "restart wait")
        assert run.calls == 1 and loops.running("fire")
        clock.advance(1.4)
        await asyncio.sleep(0)
        assert run.calls == 1  # the delay is the clock's, not the event loop's
        clock.advance(0.1)
        await _until(lambda: run.calls == 2 and clock._waiters, "second crash")
        clock.advance(1.5)
        await _until(lambda: run.calls == 3, "second restart")
    crashes = [r for r in caplog.records if "crashed" in r.getMessage()]
    assert [r.getMessage() for r in crashes] == ["cron fire loop crashed; restarting in 1.5s"] * 2
    assert crashes[0].exc_info is not None and "a bug" in caplog.text  # with the traceback
    await asyncio.wait_for(loops.stop(), BOUND_S)
    assert run.cancelled == 1 and not loops.running("fire")


async def test_a_loop_that_returns_stays_stopped():
    clock = FakeClock()
    run = Script(None)
    loops = Loops("dispatcher", clock)
    loops.start("health", run)
    await _until(lambda: not loops.running("health"), "return")
    clock.advance(3600)
    await asyncio.sleep(0)
    assert run.calls == 1 and not clock._waiters
    loops.start("health", run)  # a name whose loop ended may start again
    await _until(lambda: run.calls == 2, "second start")
    await asyncio.wait_for(loops.stop(), BOUND_S)


async def test_a_name_still_running_cannot_start_twice():
    loops = Loops("history", FakeClock())
    loops.start("timers", Script())
    with pytest.raises(ValueError, match="timers"):
        loops.start("timers", Script())
    await asyncio.wait_for(loops.stop(), BOUND_S)


async def test_stop_cancels_every_loop_and_waits_for_each_to_end():
    clock = FakeClock()
    ended: list[str] = []
    crashed = Script(RuntimeError("a bug"))
    loops = Loops("history", clock)
    for name in ("shard-connect", "timers", "bulk"):
        loops.start(name, until_cancelled(name, ended, cleanup_s=0.01))  # stop waits for the cleanup
    loops.start("crashed", crashed)  # waiting on the clock to restart: stop ends that wait too
    await _until(lambda: clock._waiters, "restart wait")
    await asyncio.wait_for(loops.stop(), BOUND_S)
    assert sorted(ended) == ["bulk", "shard-connect", "timers"]
    assert not any(loops.running(n) for n in ("shard-connect", "timers", "bulk", "crashed"))
    assert crashed.calls == 1
    clock.advance(3600)
    await asyncio.sleep(0)
    assert crashed.calls == 1  # stopped for good, not restarted
    await asyncio.wait_for(loops.stop(), BOUND_S)  # again: nothing left, no error


async def test_stop_with_names_ends_those_first_in_that_order_and_leaves_the_rest():
    order: list[str] = []
    loops = Loops("hostagent", FakeClock())
    for name in ("completions", "heartbeat", "poll", "serving"):
        # poll is the slowest to end: cancelled together, serving would end first
        loops.start(name, until_cancelled(name, order, cleanup_s=0.02 if name == "poll" else 0.0))
    await asyncio.sleep(0)
    await asyncio.wait_for(loops.stop("poll", "serving", "not-a-loop"), BOUND_S)
    assert order == ["poll", "serving"]  # each ended before the next was cancelled
    assert loops.running("heartbeat") and loops.running("completions")
    await asyncio.wait_for(loops.stop(), BOUND_S)
    assert sorted(order[2:]) == ["completions", "heartbeat"]


async def test_a_caller_cancelled_while_stop_waits_is_cancelled():
    release = asyncio.Event()

    async def stubborn():
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()  # takes its time to end

    loops = Loops("cron", FakeClock())
    loops.start("deliver", stubborn)
    await asyncio.sleep(0)
    stopping = asyncio.ensure_future(loops.stop())
    await asyncio.sleep(0.01)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(stopping, BOUND_S)
    release.set()
    await asyncio.sleep(0.01)  # the loop ends now, before the event loop closes
