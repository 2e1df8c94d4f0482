"""Timer loop sleeps (fake clock) and the completion batcher (no I/O)."""

from __future__ import annotations

import asyncio

import pytest
from dispatch_clock import RecordingClock

from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.dispatcher.completions import CompletionBatcher
from ratchet.services.dispatcher.errors import HistoryRejected, ShardUnavailable
from ratchet.services.dispatcher.loops.timers import MIN_SLEEP_S, TimerLoop


class TimerClient:
    def __init__(self, replies):
        self.replies = list(replies)
        self.calls = []

    async def fire_timers(self, shard, max_timers):
        self.calls.append((shard, max_timers))
        reply = self.replies.pop(0) if self.replies else hpb.FireTimersResponse()
        if isinstance(reply, Exception):
            raise reply
        return reply


def _next_in(ms):
    reply = hpb.FireTimersResponse(fired=1)
    reply.next_in.FromMilliseconds(ms)
    return reply


async def test_timer_loop_sleeps_interval_next_in_or_not_at_all():
    client = TimerClient([hpb.FireTimersResponse(fired=0), _next_in(40), _next_in(900),
                          hpb.FireTimersResponse(fired=500, ready=True), _next_in(0),
                          ShardUnavailable(0, "down"), hpb.FireTimersResponse()])
    clock, woken = RecordingClock(), []
    loop = TimerLoop(client, [0], 0.25, woken.append, clock)
    with pytest.raises(asyncio.CancelledError):
        await loop.run()
    assert clock.sleeps[:7] == [0.25, 0.04, 0.25, 0.0, MIN_SLEEP_S, 0.5, 0.25]
    assert woken[0] == 0 and {c[1] for c in client.calls} == {500}


class CompleteClient:
    rpc_timeout_s = 1.0

    def __init__(self, fail: Exception | None = None, reject_task: str | None = None):
        self.calls = []
        self.fail = fail
        self.reject_task = reject_task
        self.gate: asyncio.Event | None = None  # if set, calls wait for it

    async def complete_tasks(self, shard, completions):
        self.calls.append((shard, [c.task_id for c in completions]))
        await asyncio.sleep(0)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise self.fail
        if self.reject_task and any(c.task_id == self.reject_task for c in completions):
            raise HistoryRejected(shard, __import__("grpc").StatusCode.INVALID_ARGUMENT, "bad completion")
        return hpb.CompleteTasksResponse(results=[wpb.CompletionResult(task_id=c.task_id, accepted=True)
                                                  for c in completions])


def _c(task_id):
    return wpb.Completion(shard_id=0, task_id=task_id, lease_epoch=1, outcome=wpb.COMPLETION_OUTCOME_SUCCEEDED)


async def test_batcher_sends_alone_when_idle_and_groups_while_busy():
    client = CompleteClient()
    batcher = CompletionBatcher(client, max_in_flight=1)
    results = await asyncio.gather(*(batcher.complete(0, [_c(f"t{i}"), _c(f"u{i}")]) for i in range(5)))
    # The first goes out at once; the four that arrive while it is in flight share one call.
    assert client.calls == [(0, ["t0", "u0"]), (0, ["t1", "u1", "t2", "u2", "t3", "u3", "t4", "u4"])]
    assert [[r.task_id for r in rs] for rs in results] == [[f"t{i}", f"u{i}"] for i in range(5)]
    await batcher.complete(0, [_c("late")])
    assert client.calls[-1] == (0, ["late"])


async def test_batcher_shards_do_not_wait_for_each_other():
    client = CompleteClient()
    batcher = CompletionBatcher(client, max_in_flight=1)
    await asyncio.gather(batcher.complete(0, [_c("a")]), batcher.complete(1, [_c("b")]))
    assert sorted(client.calls) == [(0, ["a"]), (1, ["b"])]


async def test_batcher_failure_reaches_every_waiter():
    batcher = CompletionBatcher(CompleteClient(fail=ShardUnavailable(0, "down")), max_in_flight=1)
    results = await asyncio.gather(*(batcher.complete(0, [_c(f"t{i}")]) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, ShardUnavailable) for r in results)


async def test_one_bad_completion_does_not_fail_the_ones_it_was_coalesced_with():
    client = CompleteClient(reject_task="bad")
    batcher = CompletionBatcher(client, max_in_flight=1)
    results = await asyncio.gather(batcher.complete(0, [_c("first")]), batcher.complete(0, [_c("ok1")]),
                                   batcher.complete(0, [_c("bad")]), batcher.complete(0, [_c("ok2")]),
                                   return_exceptions=True)
    assert [r[0].task_id for r in (results[0], results[1], results[3])] == ["first", "ok1", "ok2"]
    assert isinstance(results[2], HistoryRejected)


async def test_coalescing_off_sends_each_submission_alone():
    client = CompleteClient()
    batcher = CompletionBatcher(client, max_in_flight=None)
    await asyncio.gather(*(batcher.complete(0, [_c(f"t{i}")]) for i in range(3)))
    assert len(client.calls) == 3


async def test_a_caller_that_gave_up_is_left_out_of_the_batch():
    client = CompleteClient()
    client.gate = asyncio.Event()
    batcher = CompletionBatcher(client, max_in_flight=1)
    first = asyncio.ensure_future(batcher.complete(0, [_c("first")]))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(batcher.complete(0, [_c("gone")]))
    stays = asyncio.ensure_future(batcher.complete(0, [_c("stays")]))
    await asyncio.sleep(0)
    gone.cancel()
    client.gate.set()
    assert [r.task_id for r in await stays] == ["stays"]
    await first
    assert client.calls == [(0, ["first"]), (0, ["stays"])]


class _GatedTimers:
    """fire_timers answering `next_in` (None: no timer pending), recording when it was asked."""

    def __init__(self, next_in_s=None):
        self.next_in_s = next_in_s
        self.at: list[float] = []

    async def fire_timers(self, shard, max_timers):
        self.at.append(asyncio.get_running_loop().time())
        reply = hpb.FireTimersResponse()
        if self.next_in_s is not None:
            reply.next_in.FromNanoseconds(int(self.next_in_s * 1e9))
        return reply


async def _calls_reach(client: _GatedTimers, n: int, within_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while len(client.at) < n:
        assert asyncio.get_running_loop().time() < deadline, f"{len(client.at)} calls, not {n}, in {within_s} s"
        await asyncio.sleep(0.005)


async def test_with_hints_live_an_idle_shard_sleeps_idle_s_and_a_hint_cuts_it_short():
    from ratchet.libs.clock import SystemClock
    client = _GatedTimers()
    loop = TimerLoop(client, [0], 0.05, lambda _s: None, SystemClock(), idle_s=30.0, hints_live=lambda: True)
    task = asyncio.ensure_future(loop.run())
    try:
        await _calls_reach(client, 1, 2.0)
        await asyncio.sleep(0.3)  # a window: without hints (0.05 s interval) it would hold ~6 calls
        assert len(client.at) == 1, "hints live: no second call within the 30 s idle interval"
        hinted = asyncio.get_running_loop().time()
        loop.hint(0, 0.1)
        loop.hint(0, 5.0)  # a later hint does not push the earlier one back
        await _calls_reach(client, 2, 2.0)
        assert 0.08 < client.at[1] - hinted < 0.3, client.at[1] - hinted  # asked ~0.1 s after the hint
        loop.hint(9, 0.0)  # a shard this loop does not own: ignored
        loop.hints_lost()  # the stream broke: hints may be lost, ask at once
        await _calls_reach(client, 3, 0.1)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_without_hints_the_idle_shard_is_asked_every_interval():
    from ratchet.libs.clock import SystemClock
    client = _GatedTimers()
    live = [False]
    loop = TimerLoop(client, [0], 0.05, lambda _s: None, SystemClock(), idle_s=30.0, hints_live=lambda: live[0])
    task = asyncio.ensure_future(loop.run())
    try:
        await asyncio.sleep(0.33)
        assert 4 <= len(client.at) <= 8, client.at
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
