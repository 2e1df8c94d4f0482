"""Workflow fan-outs on history (docs/design/workflows-protocol.md, "Fan-out"), on the real
shard databases over real gRPC: a fan-out's BEGIN, its children created with their parent
link, the child-end outbox every terminal path writes, the delivery loop and the striped
barrier (exactly once under concurrency, redelivery and a crash), fail_fast and its cancel
cascade, a parent's cancel cascading to children and grandchildren, the children's listing."""

from __future__ import annotations

import asyncio
import json
import random

import grpc
import pytest

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.shardmap import ShardMap, new_task_id
from ratchet.services.history.workflows import fanout

from .helpers import RPC_TIMEOUT, eventually, unique

LEASE_S = 60.0
MAP = ShardMap.even([1, 2])  # the server's routing (ShardMap.even over its shard ids)


async def _run(hist, tenant: str | None = None, app: str | None = None, task_type: str = "flow"):
    """A new run on shard 1 (its id routes there), leased: (tenant, app, its LeasedTask)."""
    tenant, app = tenant or unique("t"), app or unique("app")
    t = hist.task(tenant, app, task_type=task_type)
    t.task_id = new_task_id(slot=random.randrange(0, 32768))
    assert MAP.shard_for_task(t.task_id) == 1
    await hist.create(t)
    return tenant, app, await hist.lease_one(app, lease_s=LEASE_S)


async def _begin(hist, leased, position: int, n: int, *, name: str = "fan", kind: str = "PARALLEL",
                 on_failure: str = "COLLECT", task_type: str = "work") -> wpb.StepResponse:
    req = wpb.StepRequest(lease=wpb.LeaseRef(shard_id=leased.shard_id, task_id=leased.task_id,
                                             lease_epoch=leased.lease_epoch),
                          op=wpb.STEP_OP_BEGIN, position=position, name=name,
                          kind=wpb.StepKind.Value(f"STEP_KIND_{kind}"),
                          children=[wpb.ChildSpec(task_type=task_type, payload_json=json.dumps({"i": i}).encode())
                                    for i in range(n)],
                          on_failure=wpb.ParallelFailure.Value(f"PARALLEL_FAILURE_{on_failure}"))
    return (await hist.stub.WorkflowStep(h.WorkflowStepRequest(step=req), timeout=RPC_TIMEOUT)).step


async def _start(hist, tenant: str, app: str, parent: str, position: int, ids, task_type: str = "work") -> int:
    """StartChildren as the gateway does it: per shard, one CreateTasks of children with parents."""
    by_shard: dict[int, list[h.NewTask]] = {}
    for i, cid in enumerate(ids):
        t = h.NewTask(task_id=cid, tenant_id=tenant, app_id=app, task_type=task_type,
                      payload_json=json.dumps({"i": i}).encode(),
                      parent=h.ChildOf(parent_id=parent, position=position, index=i))
        by_shard.setdefault(MAP.shard_for_task(cid), []).append(t)
    created = 0
    for shard, tasks in by_shard.items():
        for k in range(0, len(tasks), 1000):
            r = await hist.stub.CreateTasks(h.CreateTasksRequest(shard_id=shard, tasks=tasks[k:k + 1000]),
                                            timeout=RPC_TIMEOUT)
            created += sum(1 for x in r.results if not x.deduplicated)
    return created


async def _suspend(hist, leased, position: int) -> wpb.CompletionResult:
    return await hist.complete_one(leased, "SUSPENDED", suspend_position=position)


async def _lease_all(hist, app: str, shard: int, want: int) -> list[wpb.LeasedTask]:
    out: list[wpb.LeasedTask] = []
    for _ in range(50):
        r = await hist.lease(app, shard=shard, max_tasks=min(1000, want - len(out)), lease_s=LEASE_S)
        out.extend(r.tasks)
        if len(out) >= want:
            return out
        await asyncio.sleep(0.05)
    raise AssertionError(f"leased {len(out)} of {want} on shard {shard}")


async def _complete(hist, leased: list[wpb.LeasedTask], outcome_of, chunk: int = 50) -> None:
    """Complete these leases in concurrent batches (outcome_of(lease) -> (outcome, kw))."""
    async def batch(part):
        comps = []
        for t in part:
            outcome, kw = outcome_of(t)
            comps.append(wpb.Completion(shard_id=t.shard_id, task_id=t.task_id, lease_epoch=t.lease_epoch,
                                        outcome=wpb.CompletionOutcome.Value(f"COMPLETION_OUTCOME_{outcome}"), **kw))
        await hist.complete(*comps, shard=part[0].shard_id)
    await asyncio.gather(*(batch(leased[k:k + chunk]) for k in range(0, len(leased), chunk)))


def _ok(t):
    return "SUCCEEDED", {"result_json": json.dumps({"done": json.loads(t.payload_json)["i"]}).encode()}


async def _barrier(hist, parent: str, position: int) -> list[tuple[int, int]]:
    rows = await hist.sql(1, "SELECT stripe, remaining FROM workflow_barriers WHERE workflow_id = $1::uuid "
                             "AND position = $2 ORDER BY stripe", parent, position)
    return [tuple(r) for r in rows]


async def _step_state(hist, parent: str, position: int) -> str | None:
    rows = await hist.sql(1, "SELECT state FROM workflow_steps WHERE workflow_id = $1::uuid AND position = $2",
                          parent, position)
    return rows[0]["state"] if rows else None


async def _is(hist, task_id: str, tenant: str, state: str, shard: int = 1) -> bool:
    return await hist.state(task_id, tenant, shard) == state


async def _outbox(hist) -> int:
    return sum([(await hist.sql(s, "SELECT count(*) FROM workflow_child_outbox WHERE state <> 'CASCADE'"))[0][0]
                for s in (1, 2)])


# -- BEGIN ---------------------------------------------------------------------------------

async def test_a_fanout_begin_inserts_the_barrier_and_names_the_same_ids_again(hist):
    _, _, leased = await _run(hist)
    r = await _begin(hist, leased, 0, 37)
    assert r.status == wpb.STEP_STATUS_RUN and r.attempt == 1 and len(r.child_ids) == 37
    assert list(r.child_ids) == fanout.child_ids(leased.task_id, 0, 37)
    assert {MAP.shard_for_task(c) for c in r.child_ids} == {1}  # <= 1,000: the parent's shard
    again = await _begin(hist, leased, 0, 37)
    assert again.status == wpb.STEP_STATUS_RUN and list(again.child_ids) == list(r.child_ids)
    # K = 16 stripes: 37 = 3 + 3 + 3 + 3 + 3 + 2 * 11; the top row counts the 16 stripes
    assert await _barrier(hist, leased.task_id, 0) == [(-1, 16)] + [(k, 3 if k < 5 else 2) for k in range(16)]
    for kw, logged in (({"n": 36}, "fan"), ({"n": 37, "name": "other"}, "fan"), ({"n": 1, "kind": "CHILD"}, "fan")):
        m = await _begin(hist, leased, 0, **kw)
        assert m.status == wpb.STEP_STATUS_MISMATCH and m.logged_name == logged
    small = await _begin(hist, leased, 1, 3, name="few")
    assert await _barrier(hist, leased.task_id, 1) == [(-1, 3), (0, 1), (1, 1), (2, 1)]
    assert len(small.child_ids) == 3


async def test_bad_fanouts_are_invalid_and_write_nothing(hist):
    _, _, leased = await _run(hist)
    for n, kw, what in ((0, {}, "1..10000"), (10_001, {}, "1..10000"), (2, {"kind": "CHILD"}, "exactly one"),
                        (1, {"task_type": ""}, "task_type")):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await _begin(hist, leased, 0, n, **kw)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and what in e.value.details()
    req = wpb.StepRequest(lease=wpb.LeaseRef(shard_id=1, task_id=leased.task_id, lease_epoch=leased.lease_epoch),
                          op=wpb.STEP_OP_BEGIN, position=0, name="fan", kind=wpb.STEP_KIND_PARALLEL,
                          children=[wpb.ChildSpec(task_type="work", payload_json=b"{nope")])
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.stub.WorkflowStep(h.WorkflowStepRequest(step=req), timeout=RPC_TIMEOUT)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "children[0].payload_json" in e.value.details()
    assert await _step_state(hist, leased.task_id, 0) is None and await _barrier(hist, leased.task_id, 0) == []


# -- the barrier ---------------------------------------------------------------------------

async def test_a_1000_child_fanout_fires_once_after_every_child_ended(hist):
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 1000)).child_ids)
    assert await _start(hist, tenant, app, parent, 0, ids) == 1000
    assert await _start(hist, tenant, app, parent, 0, ids[:10]) == 0  # a resend creates nothing
    links = await hist.sql(1, "SELECT count(*) FROM workflow_children WHERE parent_id = $1::uuid", parent)
    assert links[0][0] == 1000
    assert (await _suspend(hist, leased, 0)).state == tasks_pb2.TASK_STATE_WAITING
    children = await _lease_all(hist, app, 1, 1000)
    assert {c.task_id for c in children} == set(ids)
    last = children.pop()
    await _complete(hist, children, _ok)
    await eventually(lambda: _done_count(hist, parent, 999), timeout=20)
    assert await _step_state(hist, parent, 0) == "RUNNING" and await _is(hist, parent, tenant, "WAITING")
    await _complete(hist, [last], _ok)
    await eventually(lambda: _is(hist, parent, tenant, "ENQUEUED"), timeout=10)
    assert await _step_state(hist, parent, 0) == "COMPLETED"
    assert (await _barrier(hist, parent, 0))[0] == (-1, 0) and all(r == 0 for _, r in await _barrier(hist, parent, 0))
    log = await hist.log(parent)
    assert sum(1 for x in log if x[1:3] == ("WAITING", "ENQUEUED")) == 1  # woken once
    await eventually(lambda: _outbox_empty(hist))
    again = await hist.lease_one(app, lease_s=LEASE_S)
    done = await _begin(hist, again, 0, 1000)
    assert done.status == wpb.STEP_STATUS_DONE and [c.index for c in done.children] == list(range(1000))
    assert [c.child_id for c in done.children] == ids
    assert all(c.state == tasks_pb2.TASK_STATE_SUCCEEDED for c in done.children)
    assert [json.loads(c.result_json)["done"] for c in done.children] == list(range(1000))


async def _done_count(hist, parent: str, n: int) -> bool:
    rows = await hist.sql(1, "SELECT count(*) FROM workflow_child_done WHERE workflow_id = $1::uuid", parent)
    return rows[0][0] == n


async def _outbox_empty(hist) -> bool:
    return await _outbox(hist) == 0
