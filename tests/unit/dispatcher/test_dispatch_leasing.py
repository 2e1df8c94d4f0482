"""Leasing rounds and the poll flow against an in-memory history client (no I/O)."""

from __future__ import annotations

import asyncio

from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.clock import SystemClock
from ratchet.services.dispatcher.errors import ShardUnavailable
from ratchet.services.dispatcher.leasing import LeaseAsk, Leaser
from ratchet.services.dispatcher.parking import ParkingLot
from ratchet.services.dispatcher.polling import Poller, PollSpec
from ratchet.services.dispatcher.rotation import ShardRotation
from ratchet.services.dispatcher.shards import ShardBook


class Client:
    """Ready counts per shard; records (shard, max_tasks, cursor) per call."""

    rpc_timeout_s = 1.0

    def __init__(self, ready: dict[int, int], down: set[int] = frozenset()):
        self.ready = dict(ready)
        self.down = set(down)
        self.calls: list[tuple[int, int, str]] = []

    async def lease_tasks(self, shard, worker_id, max_tasks, app_ids, cursor, timeout=None):
        self.calls.append((shard, max_tasks, cursor))
        await asyncio.sleep(0)
        if shard in self.down:
            raise ShardUnavailable(shard, "down")
        n = min(max_tasks, self.ready.get(shard, 0))
        self.ready[shard] = self.ready.get(shard, 0) - n
        tasks = [wpb.LeasedTask(shard_id=shard, task_id=f"{shard}-{i}") for i in range(n)]
        return hpb.LeaseTasksResponse(tasks=tasks, more=self.ready[shard] > 0,
                                      next_tenant_cursor=f"c{shard}-{len(self.calls)}" if n else "")


def _setup(client, shards=(0, 1, 2, 3)):
    clock = SystemClock()
    book = ShardBook(shards, clock)
    return Leaser(client, book, clock), book, clock


async def _round(leaser, clock, capacity, shards):
    got = []

    async def emit(tasks):
        got.extend(tasks)
    result = await leaser.round(LeaseAsk("w", (), clock.monotonic() + 5), capacity, shards, emit)
    return result, got


async def test_capacity_is_split_and_refilled_from_shards_with_more():
    client = Client({0: 0, 1: 10, 2: 1, 3: 0})
    leaser, _, clock = _setup(client)
    result, got = await _round(leaser, clock, 8, [0, 1, 2, 3])
    assert len(got) == result.leased == 8
    # Pass 1 splits 8 over four shards; pass 2 gives the 5 left to the shard that had more.
    assert [(shard, n) for shard, n, _ in client.calls] == [(0, 2), (1, 2), (2, 2), (3, 2), (1, 5)]
    assert result.drained == {0, 2, 3} and 1 in result.more


async def test_small_capacity_asks_one_shard_at_a_time_in_order():
    client = Client({2: 1})
    leaser, _, clock = _setup(client)
    _result, got = await _round(leaser, clock, 1, [0, 1, 2, 3])
    assert [c[0] for c in client.calls] == [0, 1, 2]
    assert [t.task_id for t in got] == ["2-0"]


async def test_a_failed_shard_backs_off_and_is_skipped_next_round():
    client = Client({0: 5, 1: 5}, down={0})
    leaser, book, clock = _setup(client, (0, 1))
    result, got = await _round(leaser, clock, 4, [0, 1])
    assert result.failed == {0} and len(got) == 4
    assert not book.available(0)
    client.calls.clear()
    await _round(leaser, clock, 1, [0, 1])
    assert [c[0] for c in client.calls] == [1]


async def test_the_cursor_returned_is_used_next_time_and_an_empty_one_is_ignored():
    client = Client({0: 3})
    leaser, book, clock = _setup(client, (0,))
    await _round(leaser, clock, 1, [0])
    assert book[0].tenant_cursor == "c0-1"
    await _round(leaser, clock, 1, [0])
    assert client.calls[-1][2] == "c0-1"
    client.ready[0] = 0
    await _round(leaser, clock, 1, [0])
    assert book[0].tenant_cursor == "c0-2"


async def test_a_woken_poll_asks_only_the_signalled_shards():
    client = Client({})
    leaser, _, clock = _setup(client)
    lot = ParkingLot()
    poller = Poller(leaser, lot, ShardRotation([0, 1, 2, 3]), clock)

    async def emit(tasks):
        pass
    pending = asyncio.ensure_future(poller.poll(PollSpec("w", 2, (), 5.0), emit))
    while not client.calls or lot.parked() == 0:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)
    client.calls.clear()
    client.ready[3] = 1
    lot.signal({3})
    assert await asyncio.wait_for(pending, 1) == 1
    assert [c[0] for c in client.calls] == [3]
    assert lot.parked() == 0
