"""Heartbeat and Complete: grouping by shard, request order, failing shards,
retried completions, coalescing."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from dispatch_helpers import AUTH, poll

from ratchet.api.tasks.v1 import tasks_pb2 as tpb
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.dispatcher.heartbeats import UNCHANGED_REASON


async def _leased(stub, history, shards: list[int]) -> list[wpb.LeasedTask]:
    """Lease one task per entry of `shards` and return them in that order."""
    ids = [history.fake.add_task(s) for s in shards]
    got = {t.task_id: t for t in await poll(stub, capacity=len(ids), max_wait=2)}
    return [got[i] for i in ids]


def _refs(tasks):
    return [wpb.LeaseRef(shard_id=t.shard_id, task_id=t.task_id, lease_epoch=t.lease_epoch) for t in tasks]


def _done(tasks, outcome=wpb.COMPLETION_OUTCOME_SUCCEEDED):
    return [wpb.Completion(shard_id=t.shard_id, task_id=t.task_id, lease_epoch=t.lease_epoch, outcome=outcome,
                           result_json=b"{}") for t in tasks]


@pytest.fixture
async def stub3(make_dispatcher, stub_for):
    return await stub_for(await make_dispatcher(shard_ids=[0, 1, 2]))


async def test_heartbeats_are_grouped_by_shard_and_answered_in_request_order(stub3, history):
    tasks = await _leased(stub3, history, [0, 1, 0, 2, 1])
    history.fake.calls.clear()
    reply = await stub3.Heartbeat(wpb.HeartbeatRequest(worker_id="w", leases=_refs(tasks)), metadata=AUTH, timeout=5)
    assert [r.task_id for r in reply.results] == [t.task_id for t in tasks]
    assert [r.reason for r in reply.results] == [f"fake shard {s}" for s in (0, 1, 0, 2, 1)]
    calls = {c.shard_id: [ref.task_id for ref in c.request.leases] for c in history.fake.calls_of("RecordHeartbeats")}
    assert calls == {0: [tasks[0].task_id, tasks[2].task_id], 1: [tasks[1].task_id, tasks[4].task_id],
                     2: [tasks[3].task_id]}
    assert all(c.request.lease_duration.seconds == 30 for c in history.fake.calls_of("RecordHeartbeats"))


async def test_a_failing_shard_answers_continue_with_the_lease_unchanged(stub3, history):
    tasks = await _leased(stub3, history, [0, 1, 2])
    history.fake.unavailable.add(1)
    reply = await stub3.Heartbeat(wpb.HeartbeatRequest(worker_id="w", leases=_refs(tasks)), metadata=AUTH, timeout=5)
    assert [(r.task_id, r.action) for r in reply.results] == [(t.task_id, wpb.LEASE_ACTION_CONTINUE) for t in tasks]
    assert [r.reason for r in reply.results] == ["fake shard 0", UNCHANGED_REASON, "fake shard 2"]
    assert reply.results[1].lease_epoch == tasks[1].lease_epoch


async def test_heartbeat_is_unavailable_when_every_shard_failed(stub3, history):
    tasks = await _leased(stub3, history, [0, 1])
    history.fake.unavailable.update({0, 1})
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub3.Heartbeat(wpb.HeartbeatRequest(worker_id="w", leases=_refs(tasks)), metadata=AUTH, timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "no lease was extended" in info.value.details()


async def test_completions_are_grouped_by_shard_and_answered_in_request_order(stub3, history):
    tasks = await _leased(stub3, history, [2, 0, 1, 0])
    history.fake.calls.clear()
    reply = await stub3.Complete(wpb.CompleteRequest(worker_id="w", completions=_done(tasks)), metadata=AUTH,
                                 timeout=5)
    assert [(r.task_id, r.accepted, r.state) for r in reply.results] == \
        [(t.task_id, True, tpb.TASK_STATE_SUCCEEDED) for t in tasks]
    calls = {c.shard_id: [x.task_id for x in c.request.completions] for c in history.fake.calls_of("CompleteTasks")}
    assert calls == {2: [tasks[0].task_id], 0: [tasks[1].task_id, tasks[3].task_id], 1: [tasks[2].task_id]}


async def test_a_failing_shard_fails_the_completion_and_a_retry_tells_what_landed(stub3, history):
    tasks = await _leased(stub3, history, [0, 1])
    history.fake.unavailable.add(1)
    request = wpb.CompleteRequest(worker_id="w", completions=_done(tasks))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub3.Complete(request, metadata=AUTH, timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "retry the whole call" in info.value.details()
    history.fake.unavailable.clear()
    reply = await stub3.Complete(request, metadata=AUTH, timeout=5)
    # Shard 0 had applied it already: not accepted again, but the state says it landed.
    assert (reply.results[0].accepted, reply.results[0].state) == (False, tpb.TASK_STATE_SUCCEEDED)
    assert (reply.results[1].accepted, reply.results[1].state) == (True, tpb.TASK_STATE_SUCCEEDED)


async def test_concurrent_completions_for_a_shard_are_coalesced(stub, history):
    tasks = await _leased(stub, history, [0] * 20)
    history.fake.calls.clear()
    history.fake.complete_latency_s = 0.005
    replies = await asyncio.gather(*(
        stub.Complete(wpb.CompleteRequest(worker_id="w", completions=_done([t])), metadata=AUTH, timeout=5)
        for t in tasks))
    assert [r.results[0].task_id for r in replies] == [t.task_id for t in tasks]
    assert all(r.results[0].accepted for r in replies)
    calls = history.fake.calls_of("CompleteTasks")
    assert sum(len(c.request.completions) for c in calls) == 20
    assert len(calls) < 20, "concurrent completions should share CompleteTasks calls"


async def test_a_hung_shard_answers_before_the_agent_gives_up(stub3, history):
    import time
    tasks = await _leased(stub3, history, [0, 1])
    history.fake.hanging.add(1)
    started = time.monotonic()
    reply = await stub3.Heartbeat(wpb.HeartbeatRequest(worker_id="w", leases=_refs(tasks)), metadata=AUTH,
                                  timeout=1.0)
    assert time.monotonic() - started < 1.0
    assert [r.reason for r in reply.results] == ["fake shard 0", UNCHANGED_REASON]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub3.Complete(wpb.CompleteRequest(worker_id="w", completions=_done(tasks)), metadata=AUTH,
                             timeout=1.0)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE, "the dispatcher, not the deadline, answers"
    assert "outcome is unknown" in info.value.details()
