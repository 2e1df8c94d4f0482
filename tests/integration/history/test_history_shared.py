"""CreateTasksRequest.shared (session 8): a batch call's common fields sent once, and the
create statement's shared columns (one-element arrays) next to per-row ones."""

from __future__ import annotations

import datetime as dt

import grpc
import pytest

from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.libs.shardmap import new_task_id
from ratchet.services.history.policy import duration

from .helpers import RPC_TIMEOUT, unique

# Every column a create writes, except the ones that name or time the task.
COLUMNS = ("app_id, task_type, queue, payload, max_attempts, retry_policy, timeouts, non_retryable, "
           "idempotency_key, retry_rules, schedule_id, scheduled_time, state, version, attempt, "
           "run_at > created_at + interval '30 seconds' AS delayed")


async def _rows(hist, tenant: str, ids: list[str]) -> list[dict]:
    rows = {str(r["task_id"]): dict(r) for r in await hist.sql(
        1, f"SELECT task_id, {COLUMNS} FROM tasks WHERE tenant_id = $1", tenant)}
    return [{k: v for k, v in rows[i].items() if k != "task_id"} for i in ids]


async def _create(hist, tasks: list[h.NewTask], shared: h.NewTask | None = None) -> h.CreateTasksResponse:
    return await hist.stub.CreateTasks(h.CreateTasksRequest(shard_id=1, tasks=tasks, shared=shared),
                                       timeout=RPC_TIMEOUT)


def _mixed(tenant: str | None) -> list[h.NewTask]:
    """Five tasks that differ in queue, due time, key and non-retryable classes, nothing else."""
    tasks = [h.NewTask(task_id=new_task_id(), payload_json=b'{"i":%d}' % i) for i in range(5)]
    tasks[1].queue = "q1"
    tasks[2].delay.CopyFrom(duration(60))
    tasks[3].idempotency_key, tasks[3].fingerprint = unique("k"), "fp"
    tasks[4].non_retryable.append("ValueError")
    if tenant is not None:
        for t in tasks:
            t.tenant_id, t.app_id, t.task_type = tenant, "app", "work"
            t.retry.max_attempts = 3
            t.retry.base.CopyFrom(duration(2))
            t.timeouts.schedule_to_close.CopyFrom(duration(3600))
    return tasks


async def test_shared_fields_make_the_rows_the_same_fields_on_every_task_make(hist):
    alone, together = unique("t"), unique("t")
    spelled = _mixed(alone)
    await _create(hist, spelled)
    shared = h.NewTask(tenant_id=together, app_id="app", task_type="work")
    shared.retry.max_attempts = 3
    shared.retry.base.CopyFrom(duration(2))
    shared.timeouts.schedule_to_close.CopyFrom(duration(3600))
    bare = _mixed(None)
    r = await _create(hist, bare, shared)
    assert [x.task_id for x in r.results] == [t.task_id for t in bare]
    want = await _rows(hist, alone, [t.task_id for t in spelled])
    got = await _rows(hist, together, [t.task_id for t in bare])
    assert [g.pop("idempotency_key") for g in got] == [None, None, None, bare[3].idempotency_key, None]
    assert [w.pop("idempotency_key") for w in want] == [None, None, None, spelled[3].idempotency_key, None]
    assert got == want
    assert [g["queue"] for g in got] == [None, "q1", None, None, None]  # (the default stored as NULL)
    assert [g["delayed"] for g in got] == [False, False, True, False, False]
    assert got[4]["non_retryable"] == ["ValueError"] and got[0]["non_retryable"] is None
    assert {g["max_attempts"] for g in got} == {3}
    timers = await hist.timers(bare[0].task_id)
    assert set(timers) == {"schedule_to_close"}  # the shared timeouts reach the timers too


async def test_a_batch_whose_every_column_differs_reads_back_row_by_row(hist):
    """No column is shared, so each goes as a per-row array (the other branch of every CASE)."""
    tenants = [unique("t"), unique("t")]
    at = dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
    a = h.NewTask(task_id=new_task_id(), tenant_id=tenants[0], app_id="app-a", task_type="type-a", queue="qa",
                  payload_json=b'"a"', idempotency_key=unique("k"), fingerprint="fa", non_retryable=["E1"],
                  schedule_id="s-a")
    a.delay.CopyFrom(duration(120))
    a.retry.max_attempts = 2
    a.scheduled_time.FromDatetime(at)
    b = h.NewTask(task_id=new_task_id(), tenant_id=tenants[1], app_id="app-b", task_type="type-b",
                  payload_json=b'[1,2]')
    b.run_at.FromDatetime(at)
    b.retry.max_attempts = 7
    b.timeouts.start_to_close.CopyFrom(duration(5))
    await _create(hist, [a, b])
    (ra,) = await _rows(hist, tenants[0], [a.task_id])
    (rb,) = await _rows(hist, tenants[1], [b.task_id])
    assert (ra["app_id"], ra["task_type"], ra["queue"], ra["payload"], ra["max_attempts"], ra["non_retryable"],
            ra["idempotency_key"], ra["schedule_id"], ra["scheduled_time"], ra["delayed"]) == (
        "app-a", "type-a", "qa", b'"a"', 2, ["E1"], a.idempotency_key, "s-a", at, True)
    assert (rb["app_id"], rb["task_type"], rb["queue"], rb["payload"], rb["max_attempts"], rb["non_retryable"],
            rb["idempotency_key"], rb["schedule_id"], rb["scheduled_time"], rb["delayed"]) == (
        "app-b", "type-b", None, b"[1,2]", 7, None, None, None, None, True)
    (run_at,) = await hist.sql(1, "SELECT run_at FROM tasks WHERE task_id = $1::uuid", b.task_id)
    assert run_at["run_at"] == at
    assert ra["timeouts"] != rb["timeouts"] and ra["retry_policy"] != rb["retry_policy"]


@pytest.mark.parametrize("field", ["task_type", "retry", "non_retryable", "tenant_id"])
async def test_a_field_in_shared_and_on_a_task_is_refused_and_nothing_is_written(hist, field):
    tenant = unique("t")
    shared = h.NewTask(tenant_id=tenant, app_id="app", task_type="work", non_retryable=["E"])
    shared.retry.max_attempts = 3
    tasks = [h.NewTask(task_id=new_task_id(), payload_json=b"1") for _ in range(3)]
    if field == "task_type":
        tasks[1].task_type = "other"
    elif field == "retry":
        tasks[1].retry.max_attempts = 9
    elif field == "non_retryable":
        tasks[1].non_retryable.append("F")
    else:
        tasks[1].tenant_id = unique("t")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _create(hist, tasks, shared)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(f"tasks[1].{field} is set on the task and in shared"), e.value.details()
    assert await hist.sql(1, "SELECT 1 FROM tasks WHERE task_id = ANY($1::uuid[])", [t.task_id for t in tasks]) == []


@pytest.mark.parametrize("extra", ["task_id", "payload_json", "idempotency_key", "delay"])
async def test_shared_holds_only_the_common_fields(hist, extra):
    shared = h.NewTask(tenant_id=unique("t"), app_id="app", task_type="work")
    if extra == "delay":
        shared.delay.CopyFrom(duration(5))
    else:
        setattr(shared, extra, new_task_id() if extra == "task_id" else (b"1" if extra == "payload_json" else "k"))
    task = h.NewTask(task_id=new_task_id(), payload_json=b"1")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _create(hist, [task], shared)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "shared may hold only tenant_id, app_id, task_type, queue, retry, timeouts, non_retryable" in \
        e.value.details() and extra in e.value.details()


async def test_a_required_field_in_neither_place_is_named(hist):
    shared = h.NewTask(tenant_id=unique("t"), task_type="work")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _create(hist, [h.NewTask(task_id=new_task_id(), payload_json=b"1")] * 2, shared)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "tasks[0].app_id is required"
