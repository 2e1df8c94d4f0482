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
    return "SUCCEEDED", {"result_json": json.dumps({"done": json.loads(t.payload_json).get("i")}).encode()}


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
    return sum([(await hist.sql(s, "SELECT count(*) FROM workflow_child_outbox"))[0][0]
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


async def _start_n(hist, tenant, app, parent, position, ids, *, max_attempts: int | None = None,
                   task_type: str = "work", indexes=None, **task_kw) -> None:
    """StartChildren of some children (indexes: which; default all), with a retry policy."""
    by_shard: dict[int, list[h.NewTask]] = {}
    for i in indexes if indexes is not None else range(len(ids)):
        t = h.NewTask(task_id=ids[i], tenant_id=tenant, app_id=app, task_type=task_type,
                      payload_json=json.dumps({"i": i}).encode(),
                      parent=h.ChildOf(parent_id=parent, position=position, index=i), **task_kw)
        if max_attempts is not None:
            t.retry.max_attempts = max_attempts
        by_shard.setdefault(MAP.shard_for_task(ids[i]), []).append(t)
    for shard, tasks in by_shard.items():
        await hist.stub.CreateTasks(h.CreateTasksRequest(shard_id=shard, tasks=tasks), timeout=RPC_TIMEOUT)


async def _done_rows(hist, parent: str, position: int = 0) -> list[tuple]:
    rows = await hist.sql(1, "SELECT child_index, state, error_class FROM workflow_child_done "
                             "WHERE workflow_id = $1::uuid AND position = $2 ORDER BY child_index", parent, position)
    return [tuple(r) for r in rows]


async def _wakes(hist, parent: str) -> int:
    return sum(1 for x in await hist.log(parent) if x[1:3] == ("WAITING", "ENQUEUED"))


def _shard_of(task_id: str) -> int:
    return MAP.shard_for_task(task_id)


async def test_a_5000_child_fanout_spreads_over_the_shards_under_concurrent_deliverers(hist):
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 5000)).child_ids)
    assert len(set(ids)) == 5000
    per_shard = {s: sum(1 for c in ids if _shard_of(c) == s) for s in (1, 2)}
    assert min(per_shard.values()) > 2000  # spread by the hash: about half on each
    await _start(hist, tenant, app, parent, 0, ids)
    await _suspend(hist, leased, 0)
    mesh = hist.server.mesh
    stop = asyncio.Event()

    async def deliverer(shard: int) -> None:  # two more loops per shard, racing the server's
        while not stop.is_set():
            if not await fanout.deliver(mesh, shard, 100):
                await asyncio.sleep(0.01)
    extra = [asyncio.create_task(deliverer(s)) for s in (1, 2, 1, 2)]
    try:
        for shard in (1, 2):
            await _complete(hist, await _lease_all(hist, app, shard, per_shard[shard]), _ok, chunk=100)
        await eventually(lambda: _is(hist, parent, tenant, "ENQUEUED"), timeout=30)
    finally:
        stop.set()
        await asyncio.gather(*extra)
    assert await _done_count(hist, parent, 5000) and await _wakes(hist, parent) == 1
    assert all(r == 0 for _, r in await _barrier(hist, parent, 0))
    steps = await hist.stub.GetWorkflowSteps(h.GetWorkflowStepsRequest(shard_id=1, workflow_id=parent,
                                                                       tenant_id=tenant), timeout=RPC_TIMEOUT)
    assert (steps.steps[0].child_count, steps.steps[0].children_done) == (5000, 5000)
    page = await hist.stub.ListWorkflowChildren(h.ListWorkflowChildrenRequest(
        shard_id=1, workflow_id=parent, tenant_id=tenant, position=0, from_index=4990, page_size=100),
        timeout=RPC_TIMEOUT)
    assert [c.index for c in page.children] == list(range(4990, 5000)) and page.next_index == -1
    assert [c.child_id for c in page.children] == ids[4990:]
    assert all(c.state == tasks_pb2.TASK_STATE_SUCCEEDED for c in page.children)
    assert page.children[0].result.struct_value["done"] == 4990
    again = await hist.lease_one(app, lease_s=LEASE_S)
    done = await _begin(hist, again, 0, 5000)
    assert [c.index for c in done.children] == list(range(5000)) and [c.child_id for c in done.children] == ids


async def test_a_redelivered_batch_changes_nothing(hist):
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 40)).child_ids)
    await _start(hist, tenant, app, parent, 0, ids)
    await _suspend(hist, leased, 0)
    children = await _lease_all(hist, app, 1, 40)
    await _complete(hist, children[:20], _ok)
    await eventually(lambda: _done_count(hist, parent, 20))
    before = (await _barrier(hist, parent, 0), await _done_rows(hist, parent))
    rows = await hist.sql(1, "SELECT d.child_id, d.workflow_id AS parent_id, d.position, d.child_index, d.state, "
                             "d.result, d.error_class, d.error_message, d.ended_at FROM workflow_child_done d "
                             "WHERE d.workflow_id = $1::uuid", parent)
    ends = [fanout.ChildEnd.of(r) for r in rows]
    mesh = hist.server.mesh
    await fanout.record(mesh, hist.server.shards.get(1), ends)  # the same batch again
    await asyncio.gather(*(fanout.record(mesh, hist.server.shards.get(1), ends) for _ in range(3)))
    assert (await _barrier(hist, parent, 0), await _done_rows(hist, parent)) == before
    await _complete(hist, children[20:], _ok)
    await eventually(lambda: _is(hist, parent, tenant, "ENQUEUED"))
    await fanout.record(mesh, hist.server.shards.get(1), ends)  # after the barrier fired: nothing either
    assert await _wakes(hist, parent) == 1 and len(await _done_rows(hist, parent)) == 40


async def test_a_crash_between_the_parents_commit_and_the_outbox_delete_is_delivered_once(make_hist):
    hist = await make_hist()
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 20)).child_ids)
    await _start(hist, tenant, app, parent, 0, ids)
    await _suspend(hist, leased, 0)
    crashes = 0

    async def crash(_name: str) -> None:  # the parent's shard committed; the outbox delete never runs
        nonlocal crashes
        crashes += 1
        raise ConnectionResetError("history died before the outbox delete")
    hist.server.store.before["workflow_outbox_delete"] = crash
    await _complete(hist, await _lease_all(hist, app, 1, 20), _ok)
    await eventually(lambda: _is(hist, parent, tenant, "ENQUEUED"), timeout=10)
    await eventually(lambda: _crashed(lambda: crashes, 2), timeout=10)  # redelivered after the crash too
    assert await _outbox(hist) == 20  # kept: the deliveries rolled back on the child's shard
    del hist.server.store.before["workflow_outbox_delete"]
    await eventually(lambda: _outbox_empty(hist), timeout=10)
    assert len(await _done_rows(hist, parent)) == 20 and await _wakes(hist, parent) == 1
    assert all(r == 0 for _, r in await _barrier(hist, parent, 0))
    assert await _step_state(hist, parent, 0) == "COMPLETED"


async def _crashed(count, n: int) -> bool:
    return count() >= n


async def test_fail_fast_completes_at_the_first_failure_and_cancels_the_siblings(hist):
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 30, on_failure="FAIL_FAST")).child_ids)
    await _start_n(hist, tenant, app, parent, 0, ids, max_attempts=1, indexes=range(5))
    await _suspend(hist, leased, 0)
    running = await _lease_all(hist, app, 1, 5)  # five leased; the rest created after them, ENQUEUED
    await _start_n(hist, tenant, app, parent, 0, ids, max_attempts=1, indexes=range(5, 30))
    failed, held = running[0], running[1:]
    err = tasks_pb2.TaskError(error_class="ValueError", message="bad input")
    await _complete(hist, [failed], lambda t: ("FAILED", {"error": err}))
    await eventually(lambda: _is(hist, parent, tenant, "ENQUEUED"), timeout=10)
    assert await _step_state(hist, parent, 0) == "COMPLETED"
    rest = [c for c in ids if c not in {t.task_id for t in running}]
    await eventually(lambda: _all_state(hist, tenant, rest, "CANCELED"), timeout=10)
    for t in held:  # running: asked to stop (the same decision CancelTask makes)
        got = await hist.get(t.task_id, tenant)
        assert got.state == tasks_pb2.TASK_STATE_LEASED and got.cancel_requested
    again = await hist.lease_one(app, lease_s=LEASE_S)
    done = await _begin(hist, again, 0, 30, on_failure="FAIL_FAST")
    assert done.status == wpb.STEP_STATUS_DONE
    by = {c.child_id: c for c in done.children}
    assert by[failed.task_id].state == tasks_pb2.TASK_STATE_FAILED
    assert by[failed.task_id].error.error_class == "ValueError"
    assert await _wakes(hist, parent) == 1
    await eventually(lambda: _cascades_empty(hist))


async def _all_state(hist, tenant, ids, state) -> bool:
    for c in ids:
        if await hist.state(c, tenant, _shard_of(c)) != state:
            return False
    return True


async def _cascades_empty(hist) -> bool:
    rows = await hist.sql(1, "SELECT count(*) FROM workflow_cascades")
    return rows[0][0] == 0


async def test_collect_keeps_each_failure_in_place_and_waits_for_every_child(hist):
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 10)).child_ids)
    await _start_n(hist, tenant, app, parent, 0, ids, max_attempts=1)
    await _suspend(hist, leased, 0)
    children = await _lease_all(hist, app, 1, 10)
    index = {t.task_id: json.loads(t.payload_json)["i"] for t in children}

    def outcome(t):
        if index[t.task_id] in (2, 7):
            return "FAILED", {"error": tasks_pb2.TaskError(error_class="KeyError", message=f"no {index[t.task_id]}")}
        return _ok(t)
    await _complete(hist, [t for t in children if index[t.task_id] != 9], outcome)
    await eventually(lambda: _done_count(hist, parent, 9))
    assert await _is(hist, parent, tenant, "WAITING")  # collect: the failures do not fire it
    await _complete(hist, [t for t in children if index[t.task_id] == 9], outcome)
    await eventually(lambda: _is(hist, parent, tenant, "ENQUEUED"))
    again = await hist.lease_one(app, lease_s=LEASE_S)
    done = await _begin(hist, again, 0, 10)
    assert [c.index for c in done.children] == list(range(10))
    assert [c.state for c in done.children] == [tasks_pb2.TASK_STATE_FAILED if i in (2, 7)
                                                else tasks_pb2.TASK_STATE_SUCCEEDED for i in range(10)]
    assert done.children[7].error.error_class == "KeyError" and done.children[7].error.message == "no 7"
    assert json.loads(done.children[3].result_json) == {"done": 3}


async def test_a_cancelled_parent_cascades_to_its_children_and_a_child_runs_children(hist):
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 4)).child_ids)
    await _start_n(hist, tenant, app, parent, 0, ids, task_type="flow", indexes=[0])
    await _suspend(hist, leased, 0)
    child_run = await hist.lease_one(app, lease_s=LEASE_S)  # child 0 is a workflow run with its own fan-out
    assert child_run.task_id == ids[0]
    app2 = unique("app2")
    grand = list((await _begin(hist, child_run, 0, 3)).child_ids)
    await _start_n(hist, tenant, app2, ids[0], 0, grand)
    await _suspend(hist, child_run, 0)
    await _start_n(hist, tenant, app, parent, 0, ids, indexes=[1, 2, 3])
    held = await hist.lease_one(app, lease_s=LEASE_S)  # one child running
    gheld = await hist.lease_one(app2, lease_s=LEASE_S)  # one grandchild running
    r = await hist.cancel(parent, tenant)
    assert r.state == tasks_pb2.TASK_STATE_CANCELED
    others = [c for c in ids if c != held.task_id]
    gothers = [c for c in grand if c != gheld.task_id]
    await eventually(lambda: _all_state(hist, tenant, others + gothers, "CANCELED"), timeout=10)
    for t in (held, gheld):
        got = await hist.get(t.task_id, tenant)
        assert got.state == tasks_pb2.TASK_STATE_LEASED and got.cancel_requested
    await eventually(lambda: _cascades_empty(hist))
    # the children's ends are still recorded on the cancelled parent (harmless)
    await eventually(lambda: _done_count(hist, parent, 3))


async def test_a_leased_parent_woken_by_its_suspension_when_the_barrier_fired_first(hist):
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 3)).child_ids)
    await _start(hist, tenant, app, parent, 0, ids)
    await _complete(hist, await _lease_all(hist, app, 1, 3), _ok)  # before the parent suspends
    await eventually(lambda: _step_is(hist, parent, "COMPLETED"))
    assert await _is(hist, parent, tenant, "LEASED")
    r = await _suspend(hist, leased, 0)
    assert r.accepted and r.state == tasks_pb2.TASK_STATE_ENQUEUED  # the suspension finds it no longer RUNNING


async def _step_is(hist, parent, state) -> bool:
    return await _step_state(hist, parent, 0) == state


# -- the outbox: every terminal path, and only children --------------------------------------

async def test_every_terminal_path_of_a_child_writes_its_outbox_row_and_no_other_task_does(make_hist):
    hist = await make_hist()
    held = asyncio.Event()

    async def hold(_name: str) -> None:  # the delivery waits: the outbox rows stay to be read
        await held.wait()
    hist.server.store.before["workflow_outbox_take"] = hold
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 6)).child_ids)
    await _start_n(hist, tenant, app, parent, 0, ids, max_attempts=1, indexes=[0, 1, 2])
    await _suspend(hist, leased, 0)
    plain = await hist.create_one(tenant, app)  # an ordinary task beside them
    got = await _lease_all(hist, app, 1, 4)
    by = {t.task_id: t for t in got}
    await _complete(hist, [by[ids[0]]], _ok)  # completion
    await _complete(hist, [by[ids[1]]], lambda t: ("FAILED", {"error": tasks_pb2.TaskError(error_class="E")}))
    await _complete(hist, [by[plain]], _ok)
    # lease expiry: re-lease child 2 with a short lease, never heartbeat it
    await hist.sql(1, "UPDATE tasks SET lease_expires_at = now(), lease_check_at = now() WHERE task_id = $1::uuid",
                   ids[2])
    await hist.sql(1, "UPDATE timer_queue SET fire_at = now() WHERE task_id = $1::uuid AND kind = 'lease'", ids[2])
    hist.server.timers.wake_all()
    await _start_n(hist, tenant, app, parent, 0, ids, indexes=[3])
    await hist.cancel(ids[3], tenant)  # cancel of an ENQUEUED child
    await _start_n(hist, tenant, app, parent, 0, ids, indexes=[4],
                   timeouts=tasks_pb2.Timeouts(schedule_to_close=_seconds(0.2)))  # expiry
    await eventually(lambda: _is(hist, ids[4], tenant, "EXPIRED"), timeout=10)
    bulk_app = unique("bulk")  # (the bulk cancel's scope: child 5 and another ordinary task)
    await _start_n(hist, tenant, bulk_app, parent, 0, ids, indexes=[5])
    plain2 = await hist.create_one(tenant, bulk_app)
    await hist.start_bulk(unique("op"), tenant, bulk_app, kind="CANCEL")  # the bulk cancel
    want = {ids[0]: "SUCCEEDED", ids[1]: "FAILED", ids[2]: "FAILED", ids[3]: "CANCELED", ids[4]: "EXPIRED",
            ids[5]: "CANCELED"}
    await eventually(lambda: _outbox_is(hist, want), timeout=15)
    rows = await hist.sql(1, "SELECT child_id::text, parent_id::text, position, child_index, convert_from(result, "
                             "'UTF8') AS result, error_class FROM workflow_child_outbox ORDER BY child_index")
    assert [(r["parent_id"], r["position"], r["child_index"]) for r in rows] == [(parent, 0, i) for i in range(6)]
    assert json.loads(rows[0]["result"]) == {"done": 0} and rows[1]["error_class"] == "E"
    assert await _is(hist, plain, tenant, "SUCCEEDED") and await _is(hist, plain2, tenant, "CANCELED")
    held.set()
    await eventually(lambda: _outbox_empty(hist), timeout=10)
    assert [s for _, s, _ in await _done_rows(hist, parent)] == [want[c] for c in ids]
    await eventually(lambda: _is(hist, parent, tenant, "ENQUEUED"))


def _seconds(s: float):
    from ratchet.services.history.policy import duration
    return duration(s)


async def _outbox_is(hist, want: dict[str, str]) -> bool:
    rows = await hist.sql(1, "SELECT child_id::text, state FROM workflow_child_outbox")
    return {r["child_id"]: r["state"] for r in rows} == want


# -- the completion statement: the plan and the A/B ------------------------------------------

def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


async def _load_children(hist, n: int) -> None:
    """n fan-out links of other runs (workflow_children large: a seq scan of it would show)."""
    await hist.sql(1, f"""INSERT INTO workflow_children (child_id, parent_id, position, child_index)
                          SELECT gen_random_uuid(), gen_random_uuid(), 0, g FROM generate_series(1, {n}) g""")
    await hist.sql(1, "ANALYZE workflow_children")


async def test_the_completion_statement_probes_workflow_children_only_for_children(make_hist):
    from .test_history_plans import BATCH, _explain_generic, _load
    hist = await make_hist(check_logs=False)
    await _load(hist, "LEASED", version=4, attempt=2)
    await _load_children(hist, 20000)
    ids = [r["task_id"] for r in await hist.sql(1, f"SELECT task_id FROM tasks LIMIT {2 * BATCH}")]
    kids = ids[BATCH:BATCH + 30]
    await hist.sql(1, "UPDATE tasks SET parent_id = gen_random_uuid() WHERE task_id = ANY($1::uuid[])", kids)
    await hist.sql(1, """INSERT INTO workflow_children (child_id, parent_id, position, child_index)
                         SELECT t.task_id, t.parent_id, 0, 0 FROM tasks t WHERE t.task_id = ANY($1::uuid[])""", kids)
    types = ["uuid[]", "text[]", "bigint[]", "text[]", "float8[]", "bytea[]"] + ["text[]"] * 8 + ["bytea[]", "text[]"]

    def args(batch):
        n = len(batch)
        return [batch, ["LEASED"], [2], ["SUCCEEDED"], [None], [b"null"], [None], [None], [None], ["succeeded"],
                ["SUCCEEDED"], [None], [None], [None], [None], [""]] if n else []
    for batch, children in ((ids[:BATCH], 0), (ids[BATCH:2 * BATCH], 30)):
        root, outbox = await _explain_generic(hist.dsns[1], "task_transition_apply", args(batch), types,
                                              after="SELECT count(*) FROM workflow_child_outbox")
        assert outbox == children
        wc = [p for p in _nodes(root) if p.get("Relation Name") == "workflow_children"]
        assert wc and all(p["Node Type"] != "Seq Scan" for p in wc), json.dumps(root)[:3000]
        probes = sum(p.get("Actual Loops", 0) for p in wc if p.get("Actual Rows", 0) or p.get("Actual Loops", 0))
        assert probes <= children, (probes, children)  # one probe per child, none for the others


def _without_child_end(sql: str) -> str:
    """task_transition_apply as it was before the outbox (the A of the A/B)."""
    start = sql.index("child_end AS (")
    end = sql.index("tr AS (", start)
    sql = sql[:start] + sql[end:]
    sql = sql.replace(",\n              t.parent_id\n", "\n")
    return sql.replace(", EXISTS (SELECT 1 FROM child_end) AS child_ends FROM upd", " FROM upd")


async def test_the_completion_statement_costs_the_same_with_the_outbox_a_b(make_hist):
    """Interleaved A/B of task_transition_apply's per-statement time on a batch of 120 first-lease
    successes (the drain's completion): A without the child_end CTE, B as shipped. Printed; B
    must not be measurably slower (within 25% + 0.3 ms on this noisy 2-core box)."""
    import time

    import asyncpg

    from ratchet.services.history.store import QUERIES

    from .test_history_plans import BATCH, _load
    hist = await make_hist(check_logs=False)
    for _ in range(3):  # 60,000 leased rows: 500 statements of 120
        await _load(hist, "LEASED", version=2, attempt=1)
    await _load_children(hist, 20000)
    new_sql = QUERIES["task_transition_apply"]
    old_sql = _without_child_end(new_sql)
    body = "\n".join(x for x in old_sql.splitlines() if not x.lstrip().startswith("--"))
    assert "child_end" not in body and "parent_id" not in body
    ids = [r["task_id"] for r in await hist.sql(1, "SELECT task_id FROM tasks")]
    rounds = len(ids) // BATCH
    conn = await asyncpg.connect(hist.dsns[1])
    times: dict[str, list[float]] = {"A": [], "B": []}
    try:
        for k in range(rounds):
            batch = ids[k * BATCH:(k + 1) * BATCH]
            which = "AB"[(k + k // 2) % 2]  # ABBA...: drift cancels out
            sql = old_sql if which == "A" else new_sql
            async with conn.transaction():  # (the statement timed, not the commit's WAL flush)
                t0 = time.perf_counter()
                recs = await conn.fetch(sql, batch, ["LEASED"], [1], ["SUCCEEDED"], [None], [b"null"], [None],
                                        [None], [None], ["succeeded"], ["SUCCEEDED"], [None], [None], [None], [None],
                                        [""])
                dt = time.perf_counter() - t0
            assert len(recs) == len(batch)
            if k >= 20:  # (the first rounds plan and warm the caches)
                times[which].append(dt)
    finally:
        await conn.close()
    a, b = (sum(v) / len(v) * 1000 for v in (times["A"], times["B"]))
    ma, mb = (sorted(v)[len(v) // 2] * 1000 for v in (times["A"], times["B"]))
    print(f"task_transition_apply, {BATCH} completions: A (before) {a:.3f} ms, B (with the outbox) {b:.3f} ms "
          f"per statement (medians {ma:.3f} / {mb:.3f}) over {len(times['A'])}/{len(times['B'])} statements")
    assert b <= a * 1.25 + 0.3, (a, b)


# -- reads and event ids -----------------------------------------------------------------

async def test_the_children_list_shows_ended_live_and_missing_children_by_index(hist):
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 6)).child_ids)
    await _start_n(hist, tenant, app, parent, 0, ids, indexes=[0, 1, 2, 3])
    await _suspend(hist, leased, 0)
    got = {t.task_id: t for t in await _lease_all(hist, app, 1, 4)}
    await _complete(hist, [got[ids[0]], got[ids[2]]], _ok)
    await eventually(lambda: _done_count(hist, parent, 2))

    async def page(from_index: int, size: int, **kw):
        return await hist.stub.ListWorkflowChildren(h.ListWorkflowChildrenRequest(
            shard_id=1, workflow_id=kw.get("wid", parent), tenant_id=kw.get("tenant", tenant),
            position=kw.get("position", 0), from_index=from_index, page_size=size), timeout=RPC_TIMEOUT)
    first = await page(0, 4)
    assert first.next_index == 4 and [c.child_id for c in first.children] == ids[:4]
    assert [c.state for c in first.children] == [tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_LEASED,
                                                 tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_LEASED]
    assert {c.task_type for c in first.children} == {"work"}  # ended (0, 2) and live (1, 3) alike
    assert (await hist.get(ids[0], tenant)).parent_workflow_id == parent  # GetTask names the parent run
    assert (await hist.get(ids[1], tenant)).parent_workflow_id == parent
    assert (await hist.get(parent, tenant)).parent_workflow_id == ""
    assert first.children[2].result.struct_value["done"] == 2
    rest = await page(4, 4)
    assert rest.next_index == -1 and [(c.index, c.state, c.task_type) for c in rest.children] == [(4, 0, ""),
                                                                                                (5, 0, "")]
    steps = await hist.stub.GetWorkflowSteps(h.GetWorkflowStepsRequest(shard_id=1, workflow_id=parent,
                                                                       tenant_id=tenant), timeout=RPC_TIMEOUT)
    assert (steps.steps[0].child_count, steps.steps[0].children_done) == (6, 2)
    for kw in ({"tenant": "someone-else"}, {"position": 1}, {"wid": new_task_id()}):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await page(0, 10, **kw)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_resent_inbox_event_with_its_id_is_kept_once_and_answers_as_the_first(hist):
    tenant, _, leased = await _run(hist)
    run = leased.task_id

    async def send(event_id: str, data: dict, name: str = "approved") -> int:
        req = h.DeliverEventRequest(shard_id=1, tenant_id=tenant, name=name, data_json=json.dumps(data).encode(),
                                    workflow_id=run, event_id=event_id)
        return (await hist.stub.DeliverEvent(req, timeout=RPC_TIMEOUT)).delivered
    assert await send("e-1", {"by": "ann"}) == 0  # no wait yet: kept in the inbox
    assert await send("e-1", {"by": "ann"}) == 0  # resent: kept once
    assert await send("e-2", {"by": "bob"}, name="other") == 0
    rows = await hist.sql(1, "SELECT event_id FROM workflow_inbox WHERE workflow_id = $1::uuid ORDER BY seq", run)
    assert [r["event_id"] for r in rows] == ["e-1", "e-2"]
    req = wpb.StepRequest(lease=wpb.LeaseRef(shard_id=1, task_id=run, lease_epoch=leased.lease_epoch),
                          op=wpb.STEP_OP_BEGIN, position=0, name="approved", kind=wpb.STEP_KIND_WAIT)
    r = (await hist.stub.WorkflowStep(h.WorkflowStepRequest(step=req), timeout=RPC_TIMEOUT)).step
    assert r.status == wpb.STEP_STATUS_DONE  # the wait took e-1 from the inbox
    assert await send("e-1", {"by": "ann"}) == 0  # still what the first delivery answered
    req.position, req.name = 1, "shipped"
    r = (await hist.stub.WorkflowStep(h.WorkflowStepRequest(step=req), timeout=RPC_TIMEOUT)).step
    assert r.status == wpb.STEP_STATUS_SUSPEND
    assert await send("s-1", {"n": 1}, name="shipped") == 1  # completed the open wait
    assert await send("s-1", {"n": 1}, name="shipped") == 1  # resent: the same answer, kept once
    rows = await hist.sql(1, "SELECT count(*) FROM workflow_inbox WHERE workflow_id = $1::uuid", run)
    assert rows[0][0] == 3
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.stub.DeliverEvent(h.DeliverEventRequest(shard_id=1, tenant_id=tenant, name="x", data_json=b"{}",
                                                           event_id="b-1"), timeout=RPC_TIMEOUT)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "event_id" in e.value.details()


async def test_a_child_coalesced_with_ordinary_single_enqueues_is_linked_and_they_are_not(hist):
    """The gateway coalesces single enqueues (a CHILD's one child among them) into one call;
    history looks at the first and the last task only (O(1) per request: the ordinary path
    pays nothing), so the child must come first or last (the gateway's side, noted)."""
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 2)).child_ids)
    a, b = hist.task(tenant, app), hist.task(tenant, app)
    kids = [h.NewTask(task_id=c, tenant_id=tenant, app_id=app, task_type="work", payload_json=b"{}",
                      parent=h.ChildOf(parent_id=parent, position=0, index=i)) for i, c in enumerate(ids)]
    for tasks in ([a, kids[0]], [kids[1], b]):
        r = await hist.stub.CreateTasks(h.CreateTasksRequest(shard_id=1, tasks=tasks), timeout=RPC_TIMEOUT)
        assert [x.task_id for x in r.results] == [t.task_id for t in tasks]
        assert not any(x.deduplicated for x in r.results)
        again = await hist.stub.CreateTasks(h.CreateTasksRequest(shard_id=1, tasks=tasks), timeout=RPC_TIMEOUT)
        assert all(x.deduplicated for x in again.results)
    rows = await hist.sql(1, "SELECT task_id::text, parent_id::text FROM tasks WHERE task_id = ANY($1::uuid[])",
                          [a.task_id, b.task_id, *ids])
    assert {r["task_id"]: r["parent_id"] for r in rows} == {a.task_id: None, b.task_id: None, ids[0]: parent,
                                                            ids[1]: parent}
    await _suspend(hist, leased, 0)
    got = {t.task_id: t for t in await _lease_all(hist, app, 1, 4)}
    await _complete(hist, [got[a.task_id], got[b.task_id], got[ids[0]]], _ok)
    await eventually(lambda: _done_count(hist, parent, 1))
    await asyncio.sleep(0.2)
    assert await _is(hist, parent, tenant, "WAITING")  # ordinary tasks are no children
    await _complete(hist, [got[ids[1]]], _ok)
    await eventually(lambda: _is(hist, parent, tenant, "ENQUEUED"))


async def test_a_cancel_of_a_leased_parent_cancels_its_open_fanouts_children(hist):
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 5)).child_ids)
    await _start(hist, tenant, app, parent, 0, ids)
    r = await hist.cancel(parent, tenant)  # still LEASED: the activation is asked to stop
    assert r.state == tasks_pb2.TASK_STATE_LEASED and r.cancel_requested
    await eventually(lambda: _all_state(hist, tenant, ids, "CANCELED"), timeout=10)
    await eventually(lambda: _cascades_empty(hist))


async def test_a_crash_mid_cascade_resumes_at_its_cursor(make_hist):
    hist = await make_hist()
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    n = 1200  # spread over both shards; cascades go 500 children a batch
    ids = list((await _begin(hist, leased, 0, n, on_failure="FAIL_FAST")).child_ids)
    await _start_n(hist, tenant, app, parent, 0, ids, max_attempts=1)
    await _suspend(hist, leased, 0)
    calls, cursors = 0, []

    async def crash(_name: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:  # the first cancel of the second batch: the first batch committed
            rows = await hist.sql(1, "SELECT next_index AS child_index FROM workflow_cascades")
            cursors.append([r[0] for r in rows])
            raise ConnectionResetError("history died mid-cascade")
    hist.server.store.before["workflow_children_cancel_lock"] = crash
    failing = await hist.lease_one(app, shard=1, lease_s=LEASE_S)
    await _complete(hist, [failing], lambda t: ("FAILED", {"error": tasks_pb2.TaskError(error_class="E")}))
    await eventually(lambda: _is(hist, parent, tenant, "ENQUEUED"), timeout=10)
    await eventually(lambda: _cascades_empty(hist), timeout=20)
    assert cursors == [[500]]  # the first batch's progress was durable when it crashed
    rest = [c for c in ids if c != failing.task_id]
    counts = {}
    for s in (1, 2):
        for r in await hist.sql(s, "SELECT state, count(*) FROM tasks WHERE task_id = ANY($1::uuid[]) GROUP BY 1",
                                rest):
            counts[r[0]] = counts.get(r[0], 0) + r[1]
    assert counts == {"CANCELED": n - 1}
    await eventually(lambda: _done_count(hist, parent, n), timeout=20)  # every end recorded, once


async def test_a_barrier_firing_during_the_parents_suspension_still_wakes_it(make_hist):
    """The suspension has written WAITING (not committed) when the last child's end is
    delivered: the delivery waits for the parent's row, then wakes it."""
    hist = await make_hist()
    tenant, app, leased = await _run(hist)
    parent = leased.task_id
    ids = list((await _begin(hist, leased, 0, 2)).child_ids)
    await _start(hist, tenant, app, parent, 0, ids)
    children = await _lease_all(hist, app, 1, 2)
    await _complete(hist, children[:1], _ok)
    await eventually(lambda: _done_count(hist, parent, 1))

    async def race(_name: str) -> None:  # inside the suspension's transaction, after its UPDATE
        await _complete(hist, children[1:], _ok)
        await asyncio.sleep(0.5)  # the delivery runs meanwhile (the loop is woken by the commit)
    hist.server.store.after["workflow_suspend_batch"] = race
    r = await _suspend(hist, leased, 0)
    del hist.server.store.after["workflow_suspend_batch"]
    assert r.accepted
    await eventually(lambda: _is(hist, parent, tenant, "ENQUEUED"), timeout=10)
    assert await _step_state(hist, parent, 0) == "COMPLETED"
