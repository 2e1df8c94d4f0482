"""The completion batcher (no I/O)."""

from __future__ import annotations

import asyncio

from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.dispatcher.completions import CompletionBatcher
from ratchet.services.dispatcher.errors import HistoryRejected, ShardUnavailable


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
