"""Retry rules per error class, schedule fields and checkpoints, end to end
over gRPC on real shard databases."""

from __future__ import annotations

import datetime as dt

import grpc
import pytest
from google.protobuf import json_format

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.history.policy import duration
from ratchet.services.history.store import QUERIES

from .helpers import RPC_TIMEOUT, unique


def _err(cls: str) -> tasks_pb2.TaskError:
    return tasks_pb2.TaskError(error_class=cls, message="m")


def _with_rules(t: h.NewTask) -> h.NewTask:
    t.retry.max_attempts = 1
    t.retry.non_retryable.append("KeyError")
    t.retry.rules["TimeoutError"].max_attempts = 3
    t.retry.rules["TimeoutError"].base.CopyFrom(duration(0.05))
    t.retry.rules["TimeoutError"].jitter = False
    t.retry.rules["ValueError"].non_retryable = True
    return t


async def test_rules_schedule_fields_are_stored_and_returned(hist):
    tenant, app = unique("t"), unique("app")
    t = _with_rules(hist.task(tenant, app, schedule_id="sched-9"))
    t.non_retryable.append("OSError")
    t.scheduled_time.FromDatetime(dt.datetime(2024, 3, 31, 1, 30))
    await hist.create(t)
    leased = await hist.lease_one(app)
    assert leased.schedule_id == "sched-9"
    assert leased.scheduled_time.ToDatetime() == dt.datetime(2024, 3, 31, 1, 30)
    assert not leased.HasField("last_checkpoint_json")
    got = await hist.get(t.task_id, tenant)
    assert got.schedule_id == "sched-9" and got.scheduled_time == t.scheduled_time
    assert sorted(got.retry.non_retryable) == ["KeyError", "OSError"]
    assert got.retry.rules["ValueError"].non_retryable
    assert got.retry.rules["TimeoutError"].max_attempts == 3 and not got.retry.rules["TimeoutError"].jitter
    assert not got.retry.rules["TimeoutError"].HasField("factor")  # inherited, so unset
    assert not got.HasField("checkpoint") and got.retried_as == "" and got.retry_of == ""


@pytest.mark.parametrize("cls, want", [("ValueError", "FAILED"), ("KeyError", "FAILED"), ("IOError", "FAILED"),
                                       ("TimeoutError", "RETRY_WAIT")])
async def test_the_failing_class_picks_the_rule(hist, cls, want):
    tenant, app = unique("t"), unique("app")
    t = _with_rules(hist.task(tenant, app))
    await hist.create(t)
    r = await hist.complete_one(await hist.lease_one(app), "FAILED", error=_err(cls))
    assert tasks_pb2.TaskState.Name(r.state) == f"TASK_STATE_{want}"


async def test_a_rule_budget_and_backoff_carry_a_task_past_the_policy_budget(hist):
    tenant, app = unique("t"), unique("app")
    t = _with_rules(hist.task(tenant, app))  # the policy allows 1 attempt, TimeoutError 3, 50 ms apart
    await hist.create(t)
    for attempt in (1, 2, 3):
        leased = await hist.lease_one(app)
        assert leased.attempt == attempt and leased.max_attempts == 1
        r = await hist.complete_one(leased, "FAILED", error=_err("TimeoutError"))
        if attempt < 3:
            assert r.state == tasks_pb2.TASK_STATE_RETRY_WAIT
            await hist.fire_until_state(t.task_id, tenant, "ENQUEUED", timeout=3)
    assert r.state == tasks_pb2.TASK_STATE_FAILED
    got = await hist.get(t.task_id, tenant)
    assert got.error.error_class == "TimeoutError" and got.attempt == 3


async def test_a_bad_rule_is_refused(hist):
    t = hist.task(unique("t"), unique("app"))
    t.retry.rules["X"].factor = 50
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.create(t)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "rules['X'].factor" in e.value.details()


async def _heartbeat(hist, task_id, epoch, checkpoint: bytes | None = None) -> wpb.HeartbeatResult:
    ref = wpb.LeaseRef(shard_id=1, task_id=task_id, lease_epoch=epoch)
    if checkpoint is not None:
        ref.checkpoint_json = checkpoint
    r = await hist.stub.RecordHeartbeats(h.RecordHeartbeatsRequest(shard_id=1, leases=[ref]), timeout=RPC_TIMEOUT)
    return r.results[0]


async def test_checkpoints_are_fenced_and_delivered_to_the_next_attempt(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, base_s=0.01)
    first = await hist.lease_one(app)
    assert (await _heartbeat(hist, task_id, first.lease_epoch, b'{"row": 100}')).action == wpb.LEASE_ACTION_CONTINUE
    assert (await _heartbeat(hist, task_id, first.lease_epoch)).action == wpb.LEASE_ACTION_CONTINUE  # keeps it
    assert json_format.MessageToDict((await hist.get(task_id, tenant)).checkpoint) == {"row": 100}
    stale = await _heartbeat(hist, task_id, first.lease_epoch + 1, b'{"row": -1}')
    assert stale.action == wpb.LEASE_ACTION_LEASE_LOST
    # The completion's checkpoint (taken after the last heartbeat) is stored with the outcome.
    r = await hist.complete_one(first, "CRASHED", checkpoint_json=b'{"row": 250}')
    assert r.accepted and r.state == tasks_pb2.TASK_STATE_RETRY_WAIT
    await hist.fire_until_state(task_id, tenant, "ENQUEUED")
    second = await hist.lease_one(app)
    assert second.attempt == 2 and second.last_checkpoint_json == b'{"row": 250}'
    # The first attempt's worker, late, changes nothing.
    before = await hist.snapshot(task_id)
    assert (await _heartbeat(hist, task_id, first.lease_epoch, b'{"row": 1}')).action == wpb.LEASE_ACTION_LEASE_LOST
    late = await hist.complete_one(first, "FAILED", error=_err("E"), checkpoint_json=b'{"row": 2}')
    assert not late.accepted
    assert await hist.snapshot(task_id) == before
    await hist.complete_one(second, "SUCCEEDED", result_json=b"1", checkpoint_json=b'{"row": 300}')
    assert json_format.MessageToDict((await hist.get(task_id, tenant)).checkpoint) == {"row": 300}


async def test_an_oversize_or_malformed_checkpoint_is_refused_and_changes_nothing(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app)
    leased = await hist.lease_one(app)
    before = await hist.snapshot(task_id)
    big = b'"' + b"x" * (64 * 1024) + b'"'
    for bad in (big, b"{nope"):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await _heartbeat(hist, task_id, leased.lease_epoch, bad)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "checkpoint_json" in e.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await hist.complete_one(leased, "SUCCEEDED", result_json=b"1", checkpoint_json=bad)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await hist.snapshot(task_id) == before
    limit = b'"' + b"x" * (64 * 1024 - 2) + b'"'
    assert (await _heartbeat(hist, task_id, leased.lease_epoch, limit)).action == wpb.LEASE_ACTION_CONTINUE


async def test_a_checkpoint_heartbeat_is_one_hot_update(make_hist):
    """Cheap: one statement, and HOT (checkpoint is in no index), so no index entry is written.
    A fresh shard, so the row's page surely has room for the new version."""
    hist = await make_hist()
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app)
    leased = await hist.lease_one(app)
    conn = await __import__("asyncpg").connect(hist.dsns[1], timeout=10)
    try:
        async with conn.transaction():
            rows = await conn.fetch(QUERIES["task_heartbeat_batch"], [__import__("uuid").UUID(task_id)],
                                    [leased.lease_epoch], 30.0, 1.0, [b'{"cursor": 12}'])
            assert len(rows) == 1
            hot = await conn.fetchval("SELECT pg_stat_get_xact_tuples_hot_updated('tasks'::regclass)")
            updated = await conn.fetchval("SELECT pg_stat_get_xact_tuples_updated('tasks'::regclass)")
        assert (updated, hot) == (1, 1)
        indexed = await conn.fetch("SELECT indexdef FROM pg_indexes WHERE tablename = 'tasks' "
                                   "AND indexdef LIKE '%checkpoint%'")
        assert indexed == []
    finally:
        await conn.close()
