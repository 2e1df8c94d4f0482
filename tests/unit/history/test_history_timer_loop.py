"""History's timer loop (loops/timers.py) against scripted firings (no I/O): when it fires,
what wakes it early, what a firing that made work ready announces, failures."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import pytest

from ratchet.libs.loops import Loops
from ratchet.services.history.errors import ShardUnavailable
from ratchet.services.history.loops.timers import MIN_SLEEP_S, TimerLoop
from ratchet.services.history.ready import ReadyHub
from ratchet.services.history.timers import firing
from ratchet.services.history.timers.firing import FireOut


class _Shard:
    def __init__(self, sid: int, available: bool = True):
        self.id, self.available = sid, available

    @contextlib.asynccontextmanager
    async def conn(self):
        yield self.id  # the fake firing reads the shard off its "connection"


class _Shards:
    def __init__(self, *shards: _Shard):
        self._shards = list(shards)

    @property
    def ids(self) -> list[int]:
        return [s.id for s in self._shards]

    def __iter__(self):
        return iter(self._shards)


IDLE = FireOut(0, False, None)  # nothing fired, no timer pending


class _Firings:
    """firing.fire_timers answering from a script per shard (then `idle`), recording when."""

    def __init__(self, script: dict[int, list] | None = None, idle: FireOut = IDLE):
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.idle = idle
        self.at: dict[int, list[float]] = {}

    async def __call__(self, sid, store, *, max_timers, grace_s, rand):
        self.at.setdefault(sid, []).append(asyncio.get_running_loop().time())
        steps = self.script.get(sid)
        out = steps.pop(0) if steps else self.idle
        if isinstance(out, BaseException):
            raise out
        return out


@contextlib.asynccontextmanager
async def _running(monkeypatch, shards: _Shards, firings: _Firings, hub: ReadyHub | None = None, **kw):
    monkeypatch.setattr(firing, "fire_timers", firings)  # the loop looks it up at each call
    loop = TimerLoop(shards, None, hub or ReadyHub(), grace_s=1.0, **kw)
    loops = Loops("history")
    loops.start("timers", loop.run)
    try:
        yield loop
    finally:
        await loops.stop()


async def _calls(firings: _Firings, sid: int, n: int, within_s: float) -> list[float]:
    deadline = asyncio.get_running_loop().time() + within_s
    while len(firings.at.get(sid, [])) < n:
        assert asyncio.get_running_loop().time() < deadline, f"{len(firings.at.get(sid, []))} firings, not {n}"
        await asyncio.sleep(0.002)
    return firings.at[sid]


async def test_it_fires_when_the_next_timer_is_due_and_at_once_after_a_full_batch(monkeypatch):
    firings = _Firings({0: [FireOut(0, False, 0.05), FireOut(3, True, 0.0), FireOut(500, True, 0.0),
                            FireOut(2, False, 0.2)]})
    async with _running(monkeypatch, _Shards(_Shard(0)), firings, idle_s=30.0, max_timers=500):
        at = await _calls(firings, 0, 5, 2.0)
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert 0.045 < gaps[0] < 0.15, gaps  # the next timer was due in 50 ms
    assert MIN_SLEEP_S * 0.9 < gaps[1] < 0.05, gaps  # due now, a partial batch: the minimum sleep, no hot loop
    assert gaps[2] < 0.02, gaps  # a full batch: again at once
    assert 0.18 < gaps[3] < 0.3, gaps


async def test_an_idle_shard_is_read_every_idle_s_and_a_commit_s_timer_cuts_the_sleep_short(monkeypatch):
    firings = _Firings()
    async with _running(monkeypatch, _Shards(_Shard(0), _Shard(1)), firings, idle_s=0.3) as loop:
        await _calls(firings, 0, 1, 1.0)
        await asyncio.sleep(0.1)
        hinted = asyncio.get_running_loop().time()
        loop.due(0, 0.05)
        loop.due(0, 5.0)  # a later timer does not push the earlier one back
        loop.due(9, 0.0)  # not a shard of this loop: ignored
        at = await _calls(firings, 0, 2, 1.0)
        assert 0.04 < at[1] - hinted < 0.12, at[1] - hinted
        await _calls(firings, 0, 3, 1.0)
        assert 0.25 < firings.at[0][2] - at[1] < 0.45  # then idle_s again
        # Shard 1 heard of nothing: read every idle_s only.
        assert 2 <= len(firings.at[1]) <= 3, firings.at[1]


async def test_a_timer_later_than_the_planned_wake_up_does_not_wake_the_loop(monkeypatch):
    firings = _Firings(idle=FireOut(0, False, 0.2))  # the next pending timer is due in 200 ms
    async with _running(monkeypatch, _Shards(_Shard(0)), firings, idle_s=30.0) as loop:
        await _calls(firings, 0, 1, 1.0)
        loop.due(0, 10.0)
        assert not loop._wake[0].is_set()
        at = await _calls(firings, 0, 2, 1.0)
        assert 0.18 < at[1] - at[0] < 0.3


async def test_a_firing_that_made_work_ready_announces_it_on_watch_ready(monkeypatch):
    hub = ReadyHub()
    watcher = hub.watch([0], wanted=True)
    firings = _Firings({0: [FireOut(0, False, 0.02), FireOut(1, True, None)]})
    async with _running(monkeypatch, _Shards(_Shard(0)), firings, hub=hub, idle_s=30.0):
        assert await asyncio.wait_for(watcher.next(), 2) == [0]
        assert len(firings.at[0]) == 2  # the first firing made nothing ready: no event


async def test_failures_back_off_and_the_loop_goes_on(monkeypatch):
    firings = _Firings({0: [ShardUnavailable(0, "down"), RuntimeError("a bug"), FireOut(0, False, None)]})
    async with _running(monkeypatch, _Shards(_Shard(0)), firings, idle_s=30.0):
        at = await _calls(firings, 0, 3, 2.0)
    assert 0.09 < at[1] - at[0] < 0.2 and 0.18 < at[2] - at[1] < 0.35  # 0.1 s, then 0.2 s


async def test_a_shard_not_connected_is_not_fired_until_it_connects(monkeypatch):
    late = _Shard(5, available=False)
    firings = _Firings()
    async with _running(monkeypatch, _Shards(_Shard(0), late), firings, idle_s=30.0) as loop:
        await _calls(firings, 0, 1, 1.0)
        loop.wake_all()  # another shard connecting wakes this one too: still not connected, no firing
        await asyncio.sleep(0.05)
        assert 5 not in firings.at
        late.available = True
        loop.wake_all()  # what the server does when the connect loop brought a shard
        await _calls(firings, 5, 1, 1.0)


def _other_tasks() -> set[asyncio.Task]:
    return asyncio.all_tasks() - {asyncio.current_task()}


async def test_cancelling_run_ends_every_shard_s_loop():
    loop = TimerLoop(_Shards(_Shard(0, available=False), _Shard(1, available=False)), None, ReadyHub(),
                     grace_s=1.0)
    before = _other_tasks()
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0.01)
    assert len(_other_tasks() - before) >= 3  # run(), a loop per shard (and the waits they started)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert _other_tasks() == before


class _Crashing(_Shard):
    @property
    def available(self):
        raise RuntimeError("a bug in the shard's loop")

    @available.setter
    def available(self, value):
        pass


async def test_a_shard_s_loop_that_crashes_ends_the_others_so_a_restart_runs_one_per_shard():
    loop = TimerLoop(_Shards(_Shard(0, available=False), _Crashing(1)), None, ReadyHub(), grace_s=1.0)
    before = _other_tasks()
    with pytest.raises(ExceptionGroup) as crash:
        await asyncio.wait_for(loop.run(), 1)
    assert crash.group_contains(RuntimeError, match="a bug")
    assert _other_tasks() == before  # shard 0's loop ended with it
