"""WatchReady (ready events while the caller wants them) and history's own timer loop, on real
shard databases over real gRPC: a commit's timer fires when due, without anyone asking, and
the ready work it makes is announced like an enqueue's."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.services.history.loops.timers import IDLE_S
from ratchet.services.history.policy import duration

from .helpers import eventually, unique


async def _true(value: bool) -> bool:
    return value


class _Watch:
    """One WatchReady stream: `got` collects the shard ids, `want()` flips wanted."""

    def __init__(self, hist, shard_ids: list[int], wanted: bool):
        self._wants: asyncio.Queue = asyncio.Queue()
        self.got: list[int] = []
        self.arrived: list[float] = []  # time.monotonic() of each event

        async def requests():
            yield h.WatchReadyRequest(shard_ids=shard_ids, wanted=wanted)
            while True:
                yield h.WatchReadyRequest(wanted=await self._wants.get())

        self.stream = hist.stub.WatchReady(requests(), timeout=30)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.stream:
            self.got.append(msg.shard_id)
            self.arrived.append(time.monotonic())

    async def want(self, wanted: bool) -> None:
        await self._wants.put(wanted)

    async def close(self) -> None:
        self.stream.cancel()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


async def _watching(hist, shard_ids: list[int], wanted: bool = True) -> _Watch:
    before = hist.server.hub.watcher_count
    w = _Watch(hist, shard_ids, wanted)
    await w.stream.initial_metadata()  # history's headers: it accepted the shards
    await eventually(lambda: _true(hist.server.hub.watcher_count > before), 5)
    if wanted:  # the flip to wanted announces every watched shard once: take those
        await eventually(lambda: _true(len(w.got) >= len(shard_ids)), 5)
        w.got.clear()
        w.arrived.clear()
    return w


async def test_watchers_hear_once_per_shard_after_enqueues_commit(hist):
    w = await _watching(hist, [2])
    try:
        tenant = unique("t")
        await hist.create(hist.task(tenant), shard=1)  # not watched
        await hist.create(hist.task(tenant, delay=duration(60)), shard=2)  # not due: no event
        await hist.create(hist.task(tenant), shard=2)
        await eventually(lambda: _true(w.got == [2]), 5)
        for _ in range(5):
            await hist.create(hist.task(tenant), shard=2)
        await eventually(lambda: _true(len(w.got) >= 2), 5)
        assert set(w.got) == {2} and len(w.got) <= 6
    finally:
        await w.close()


async def test_unwanted_events_are_dropped_and_a_flip_to_wanted_sends_every_shard(hist):
    """No event per commit while the dispatcher has no poll waiting; a flip to wanted sends every
    watched shard at once (work that arrived meanwhile must still wake a poll)."""
    w = await _watching(hist, [1, 2], wanted=False)
    try:
        (watcher,) = [x for x in hist.server.hub._watchers if x.shard_ids == {1, 2}]
        tenant = unique("t")
        for _ in range(3):
            await hist.create(hist.task(tenant), shard=2)
        # Each commit's event reached the watcher and was dropped there, so none is pending.
        await eventually(lambda: _true(watcher.dropped >= 3), 5)
        assert w.got == [], "events flowed while nobody wanted them"
        await w.want(True)
        await eventually(lambda: _true(sorted(w.got) == [1, 2]), 5)  # both shards, once, at the flip
        await hist.create(hist.task(tenant), shard=1)
        await eventually(lambda: _true(sorted(w.got) == [1, 1, 2]), 5)
        await w.want(False)
        await eventually(lambda: _true(not watcher.wanted), 5)
        dropped = watcher.dropped
        await hist.create(hist.task(tenant), shard=1)
        await eventually(lambda: _true(watcher.dropped > dropped), 5)
        assert sorted(w.got) == [1, 1, 2]
    finally:
        await w.close()


async def test_a_watch_naming_an_unknown_shard_or_other_shards_later_is_refused(hist):
    async def unknown():
        yield h.WatchReadyRequest(shard_ids=[99], wanted=True)
        await asyncio.sleep(5)

    with pytest.raises(grpc.aio.AioRpcError) as e:
        async for _ in hist.stub.WatchReady(unknown(), timeout=10):
            pass
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "known shards: [1, 2]" in e.value.details()

    async def others():
        yield h.WatchReadyRequest(shard_ids=[1], wanted=False)
        yield h.WatchReadyRequest(shard_ids=[2], wanted=True)
        await asyncio.sleep(5)

    with pytest.raises(grpc.aio.AioRpcError) as e:
        async for _ in hist.stub.WatchReady(others(), timeout=10):
            pass
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "named by the first request" in e.value.details()


async def test_a_delayed_task_is_announced_when_history_fires_its_timer(make_hist):
    """Nobody calls history: its timer loop fires the delay when it is due (the create told it,
    in-process) and the ready work goes out on WatchReady like an enqueue's."""
    hist = await make_hist()
    w = await _watching(hist, [1])
    try:
        created = time.monotonic()
        task_id = await hist.create_one("t", "app", delay=duration(0.5), shard=1)
        await asyncio.sleep(0.2)
        assert w.got == []  # a delayed enqueue is not ready work
        await eventually(lambda: _true(w.got == [1]), 5)
        late = w.arrived[0] - created - 0.5
        assert -0.01 < late < 0.25, f"announced {late:.3f}s after the due time"
        assert "delay" not in await hist.timers(task_id)
        assert [t.task_id for t in (await hist.lease("app")).tasks] == [task_id]
    finally:
        await w.close()


async def test_a_lease_expiry_and_its_retry_backoff_fire_on_their_own(make_hist):
    hist = await make_hist()
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, base_s=0.3)
    leased = await hist.lease_one(app, lease_s=0.3)
    t0 = time.monotonic()

    async def enqueued_again() -> bool:
        return await hist.state(task_id, tenant) == "ENQUEUED"
    await eventually(enqueued_again, 3, every=0.01)  # nobody asked history to fire anything
    # Expired at 0.3 s (the loop heard of the lease check from the lease), then a backoff of at
    # most 0.3 s (full jitter).
    assert time.monotonic() - t0 < 0.3 + 0.3 + 0.25
    assert [to for _, _, to, _ in await hist.log(task_id)] == ["ENQUEUED", "LEASED", "RETRY_WAIT", "ENQUEUED"]
    again = await hist.lease_one(app)
    assert again.lease_epoch == leased.lease_epoch + 1 and again.attempt == 2


async def test_a_timer_written_by_another_process_is_found_within_idle_s(make_hist):
    """Commits of this process tell its timer loop; a timer it did not write (another history
    process's, here an UPDATE on the side) is found by the loop's idle read, at most IDLE_S
    (2 s) late."""
    hist = await make_hist()
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, delay=duration(3600))
    await asyncio.sleep(0.3)  # the loop has read it: an hour away
    await hist.sql(1, "UPDATE tasks SET run_at = clock_timestamp() WHERE task_id = $1::uuid", task_id)
    await hist.sql(1, "UPDATE timer_queue SET fire_at = clock_timestamp() WHERE task_id = $1::uuid", task_id)
    t0 = time.monotonic()

    async def fired() -> bool:
        return "delay" not in await hist.timers(task_id)
    await eventually(fired, IDLE_S + 1, every=0.02)
    assert time.monotonic() - t0 < IDLE_S + 0.3


async def test_without_a_timer_loop_timers_fire_only_by_hand(make_hist):
    hist = await make_hist(timer_loop=False)
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, delay=duration(0.05))
    await asyncio.sleep(0.5)
    assert "delay" in await hist.timers(task_id)  # no loop: nothing fired it
    r = await hist.fire()
    assert r.fired == 1 and r.ready
