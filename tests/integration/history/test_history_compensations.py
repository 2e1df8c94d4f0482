"""Compensations (ctx.on_cancel) on history, on real shard databases over real gRPC
(docs/design/workflows-protocol.md, "Compensations: ctx.on_cancel"): ON_CANCEL rows, the cancel
of a run that logged one (kept in workflow_cancels, the run due again instead of CANCELED), the
CANCELLED answers of its replay, COMPENSATE steps, the kill after the cancel grace, and runs
without compensations cancelled as before."""

from __future__ import annotations

import json

import grpc

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.history.policy import duration

from .helpers import eventually, unique
from .test_history_workflows import LEASE_S, _code_of, _deliver, _is, _run, _step, _steps, _suspend

DONE, RUN, CANCELLED = wpb.STEP_STATUS_DONE, wpb.STEP_STATUS_RUN, wpb.STEP_STATUS_CANCELLED


async def _cancels(hist, task_id: str) -> list[tuple]:
    return [tuple(r) for r in await hist.sql(1, "SELECT reason FROM workflow_cancels WHERE workflow_id = $1::uuid",
                                             task_id)]


async def _claim_commit(hist, leased, position: int, name: str, kind: str = "STEP", result: bytes = b"1"):
    r = await _step(hist, leased, "BEGIN", position, name, kind)
    assert r.status == RUN, r
    done = await _step(hist, leased, "COMMIT", position, name, kind, result_json=result)
    assert done.status == DONE, done
    return r


async def _lease_again(hist, app: str, task_id: str, tenant: str):
    await eventually(lambda: _is(hist, task_id, tenant, "ENQUEUED"))
    leased = await hist.lease_one(app, lease_s=LEASE_S)
    assert leased.task_id == task_id
    return leased


async def test_cancel_of_a_waiting_run_with_compensations_replays_done_then_cancelled(hist):
    tenant, app, leased = await _run(hist)
    await _claim_commit(hist, leased, 0, "reserve", result=b'{"seat": 7}')
    reg = await _step(hist, leased, "BEGIN", 1, "release", "ON_CANCEL", result_json=b'[7]')
    assert reg.status == DONE
    assert (await _step(hist, leased, "BEGIN", 1, "release", "ON_CANCEL")).status == DONE  # present: DONE
    r = await _step(hist, leased, "BEGIN", 2, "approved", "WAIT", duration=duration(3600))
    assert r.status == wpb.STEP_STATUS_SUSPEND
    assert (await _suspend(hist, leased, 2, 3600)).state == tasks_pb2.TASK_STATE_WAITING
    c = await hist.cancel(leased.task_id, tenant)
    assert (c.state, c.cancel_requested) == (tasks_pb2.TASK_STATE_ENQUEUED, True)
    assert await _cancels(hist, leased.task_id) == [("user",)]
    assert "wake" not in await hist.timers(leased.task_id)
    assert await hist.sql(1, "SELECT 1 FROM workflow_waits WHERE workflow_id = $1::uuid", leased.task_id) == []
    log = await hist.log(leased.task_id)
    assert log[-1][1:3] == ("WAITING", "ENQUEUED")
    again = await hist.cancel(leased.task_id, tenant)  # a second cancel changes nothing
    assert (again.state, again.cancel_requested) == (tasks_pb2.TASK_STATE_ENQUEUED, True)
    assert await hist.log(leased.task_id) == log and await _cancels(hist, leased.task_id) == [("user",)]

    second = await _lease_again(hist, app, leased.task_id, tenant)
    before = await _steps(hist, leased.task_id)
    memo = await _step(hist, second, "BEGIN", 0, "reserve")
    assert memo.status == DONE and json.loads(memo.result_json) == {"seat": 7}
    assert (await _step(hist, second, "BEGIN", 1, "release", "ON_CANCEL")).status == DONE
    stop = await _step(hist, second, "BEGIN", 2, "approved", "WAIT", duration=duration(3600))
    assert (stop.status, stop.compensate_from) == (CANCELLED, 3)  # the open wait keeps position 2
    assert await _steps(hist, leased.task_id) == before  # nothing written
    await _claim_commit(hist, second, 3, "compensate:release", "COMPENSATE", b'"released"')
    end = await hist.complete_one(second, "CANCELED")
    assert end.accepted and end.state == tasks_pb2.TASK_STATE_CANCELED
    assert await _cancels(hist, leased.task_id) == []
    assert (await _steps(hist, leased.task_id))[3][:4] == (3, "compensate:release", "COMPENSATE", "COMPLETED")
    code, _ = await _code_of(_deliver(hist, tenant, "approved", {}, workflow_id=leased.task_id))
    assert code == grpc.StatusCode.FAILED_PRECONDITION  # the run ended


async def test_a_second_activation_after_a_crash_answers_the_done_compensations_done(hist):
    tenant, app, leased = await _run(hist, max_attempts=5)
    await _claim_commit(hist, leased, 0, "book")
    for pos, name in ((1, "refund"), (2, "unbook")):
        assert (await _step(hist, leased, "BEGIN", pos, name, "ON_CANCEL")).status == DONE
    assert (await _step(hist, leased, "BEGIN", 3, "nap", "SLEEP", duration=duration(3600))).status == \
        wpb.STEP_STATUS_SUSPEND
    await _suspend(hist, leased, 3, 3600)
    assert (await hist.cancel(leased.task_id, tenant)).state == tasks_pb2.TASK_STATE_ENQUEUED
    second = await _lease_again(hist, app, leased.task_id, tenant)
    for pos, name, kind in ((0, "book", "STEP"), (1, "refund", "ON_CANCEL"), (2, "unbook", "ON_CANCEL")):
        assert (await _step(hist, second, "BEGIN", pos, name, kind)).status == DONE
    stop = await _step(hist, second, "BEGIN", 3, "nap", "SLEEP", duration=duration(3600))
    assert (stop.status, stop.compensate_from) == (CANCELLED, 4)
    await _claim_commit(hist, second, 4, "compensate:unbook", "COMPENSATE")  # the last registered first
    r = await _step(hist, second, "BEGIN", 5, "compensate:refund", "COMPENSATE")
    assert (r.status, r.attempt) == (RUN, 1)
    crashed = await hist.complete_one(second, "CRASHED", retry_after=duration(0))  # died mid-compensation
    assert crashed.state == tasks_pb2.TASK_STATE_RETRY_WAIT and await _cancels(hist, leased.task_id) == [("user",)]

    third = await _lease_again(hist, app, leased.task_id, tenant)
    for pos, name, kind in ((0, "book", "STEP"), (1, "refund", "ON_CANCEL"), (2, "unbook", "ON_CANCEL")):
        assert (await _step(hist, third, "BEGIN", pos, name, kind)).status == DONE
    assert (await _step(hist, third, "BEGIN", 3, "nap", "SLEEP", duration=duration(3600))).compensate_from == 4
    # Code that went on past the cancel point meets the compensation there: CANCELLED from it.
    other = await _step(hist, third, "BEGIN", 4, "ship")
    assert (other.status, other.compensate_from) == (CANCELLED, 4)
    assert (await _step(hist, third, "BEGIN", 4, "compensate:unbook", "COMPENSATE")).status == DONE
    r = await _step(hist, third, "BEGIN", 5, "compensate:refund", "COMPENSATE")
    assert (r.status, r.attempt) == (RUN, 2)
    assert (await _step(hist, third, "COMMIT", 5, "compensate:refund", "COMPENSATE", result_json=b"1")).status == DONE
    assert (await hist.complete_one(third, "CANCELED")).state == tasks_pb2.TASK_STATE_CANCELED
    assert await _cancels(hist, leased.task_id) == []


async def test_compensate_needs_a_cancel_and_on_cancel_requests_are_checked(hist):
    _, _, leased = await _run(hist)
    await _claim_commit(hist, leased, 0, "a")
    for op, kw in (("BEGIN", {}), ("COMMIT", {"result_json": b"1"})):
        code, details = await _code_of(_step(hist, leased, op, 1, "compensate:x", "COMPENSATE", **kw))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "not cancelled" in details
    code, _ = await _code_of(_step(hist, leased, "COMMIT", 1, "x", "ON_CANCEL", result_json=b"1"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = await _code_of(_step(hist, leased, "BEGIN", 1, "x", "ON_CANCEL", result_json=b"{nope"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert len(await _steps(hist, leased.task_id)) == 1
    m = await _step(hist, leased, "BEGIN", 0, "x", "ON_CANCEL")  # another step here: MISMATCH
    assert (m.status, m.logged_name, m.logged_kind) == (wpb.STEP_STATUS_MISMATCH, "a", wpb.STEP_KIND_STEP)
    assert (await _step(hist, leased, "BEGIN", 1, "x", "ON_CANCEL")).status == DONE
    m = await _step(hist, leased, "BEGIN", 1, "y", "ON_CANCEL")
    assert (m.status, m.logged_name) == (wpb.STEP_STATUS_MISMATCH, "x")
    assert (await _steps(hist, leased.task_id))[1][:4] == (1, "x", "ON_CANCEL", "COMPLETED")


async def test_a_leased_run_with_compensations_is_killed_into_retry_wait_after_the_grace(hist):
    tenant, app, leased = await _run(hist, max_attempts=3)
    assert (await _step(hist, leased, "BEGIN", 0, "undo", "ON_CANCEL")).status == DONE
    assert (await _step(hist, leased, "BEGIN", 1, "work")).status == RUN  # a claim left open
    c = await hist.cancel(leased.task_id, tenant)
    assert (c.state, c.cancel_requested) == (tasks_pb2.TASK_STATE_LEASED, True)
    (hb,) = await hist.heartbeat((leased.task_id, leased.lease_epoch), lease_s=LEASE_S)
    assert hb.action == wpb.LEASE_ACTION_CANCEL
    stop = await _step(hist, leased, "BEGIN", 1, "work")  # the activation's next BEGIN
    assert (stop.status, stop.compensate_from) == (CANCELLED, 2)
    # The activation does not stop: after the grace (0.5 s) the lease timer kills it, into
    # RETRY_WAIT (not CANCELED: the compensations have not run), and it is due again.
    second = await _lease_again(hist, app, leased.task_id, tenant)
    edges = [x[1:3] for x in await hist.log(leased.task_id)]
    assert ("LEASED", "RETRY_WAIT") in edges and ("LEASED", "CANCELED") not in edges
    outcome = await hist.sql(1, "SELECT outcome FROM task_attempts WHERE task_id = $1::uuid AND lease_epoch = $2",
                             leased.task_id, leased.lease_epoch)
    assert [r["outcome"] for r in outcome] == ["CANCELED"]
    assert (await _step(hist, second, "BEGIN", 0, "undo", "ON_CANCEL")).status == DONE
    stop = await _step(hist, second, "BEGIN", 1, "work")  # the older claim: still CANCELLED, not re-claimed
    assert (stop.status, stop.compensate_from) == (CANCELLED, 2)
    assert (await _steps(hist, leased.task_id))[1][3:6] == ("RUNNING", leased.lease_epoch, 1)
    await _claim_commit(hist, second, 2, "compensate:undo", "COMPENSATE")
    assert (await hist.complete_one(second, "CANCELED")).state == tasks_pb2.TASK_STATE_CANCELED
    assert await _cancels(hist, leased.task_id) == []


async def test_a_kill_after_the_grace_out_of_attempts_fails_the_run(hist):
    tenant, _, leased = await _run(hist, max_attempts=1)
    assert (await _step(hist, leased, "BEGIN", 0, "undo", "ON_CANCEL")).status == DONE
    await hist.cancel(leased.task_id, tenant)
    await eventually(lambda: _is(hist, leased.task_id, tenant, "FAILED"))
    assert await _cancels(hist, leased.task_id) == []


async def test_a_cancelled_activation_that_fails_retries_and_one_that_suspends_wakes(hist):
    tenant, app, leased = await _run(hist, max_attempts=5)
    assert (await _step(hist, leased, "BEGIN", 0, "undo", "ON_CANCEL")).status == DONE
    await hist.cancel(leased.task_id, tenant)
    failed = await hist.complete_one(leased, "FAILED", error=tasks_pb2.TaskError(error_class="Boom"),
                                     retry_after=duration(0))
    assert failed.state == tasks_pb2.TASK_STATE_RETRY_WAIT  # a compensation failed, retryable: tried again
    second = await _lease_again(hist, app, leased.task_id, tenant)
    assert (await _step(hist, second, "BEGIN", 1, "w", "WAIT")).status == CANCELLED
    _, _, plain = await _run(hist)
    assert (await _step(hist, plain, "BEGIN", 0, "w", "WAIT")).status == wpb.STEP_STATUS_SUSPEND
    # A suspension of a run whose cancel is kept wakes it at once (its compensations must run).
    third_tenant, _, run = await _run(hist)
    await _step(hist, run, "BEGIN", 0, "undo", "ON_CANCEL")
    assert (await _step(hist, run, "BEGIN", 1, "w", "WAIT")).status == wpb.STEP_STATUS_SUSPEND
    await hist.cancel(run.task_id, third_tenant)  # LEASED: a request
    s = await _suspend(hist, run, 1)
    assert s.accepted and s.state == tasks_pb2.TASK_STATE_ENQUEUED
    assert await _cancels(hist, run.task_id) == [("user",)]


async def test_runs_and_tasks_without_compensations_are_cancelled_as_before(hist):
    tenant, _, leased = await _run(hist)
    await _claim_commit(hist, leased, 0, "a")
    await _step(hist, leased, "BEGIN", 1, "w", "WAIT")
    await _suspend(hist, leased, 1)
    c = await hist.cancel(leased.task_id, tenant)
    assert (c.state, c.cancel_requested) == (tasks_pb2.TASK_STATE_CANCELED, False)
    t2, _, running = await _run(hist)
    await _claim_commit(hist, running, 0, "a")
    assert (await hist.cancel(running.task_id, t2)).state == tasks_pb2.TASK_STATE_LEASED
    await eventually(lambda: _is(hist, running.task_id, t2, "CANCELED"))  # killed after the grace
    t3 = unique("t")
    plain = await hist.create_one(t3, unique("app"))
    assert (await hist.cancel(plain, t3)).state == tasks_pb2.TASK_STATE_CANCELED
    for tid in (leased.task_id, running.task_id, plain):
        assert await _cancels(hist, tid) == []


async def test_the_cancel_lock_of_an_ordinary_task_costs_what_task_lock_did_a_b(hist):
    """Interleaved A/B (ABBA) of CancelTask's lock statement on an ordinary task: task_lock (A,
    before compensations) and task_cancel_lock (B: the same row lock plus the two probes that
    find nothing), per statement inside a transaction."""
    import statistics
    import time

    import asyncpg

    from ratchet.services.history.store import QUERIES

    tenant = unique("t")
    ids = [await hist.create_one(tenant, unique("app")) for _ in range(4)]
    conn = await asyncpg.connect(hist.dsns[1])
    times: dict[str, list[float]] = {"A": [], "B": []}
    try:
        for i in range(800):
            arm = "ABBA"[i % 4]
            sql = QUERIES["task_lock" if arm == "A" else "task_cancel_lock"]
            async with conn.transaction():
                t0 = time.perf_counter()
                row = await conn.fetchrow(sql, ids[i % 4])
                times[arm].append(time.perf_counter() - t0)
            assert row is not None and (arm == "A" or not (row["has_compensations"] or row["cancelled"]))
    finally:
        await conn.close()
    a, b = (statistics.mean(times[k][40:]) * 1e3 for k in "AB")
    ma, mb = (statistics.median(times[k][40:]) * 1e3 for k in "AB")
    print(f"cancel lock ms: task_lock mean {a:.4f} median {ma:.4f}; task_cancel_lock mean {b:.4f} median {mb:.4f}")
    assert b <= 1.5 * a + 0.1


async def test_cancel_of_a_retry_waiting_run_with_compensations_makes_it_due_now(hist):
    tenant, app, leased = await _run(hist, max_attempts=5)
    assert (await _step(hist, leased, "BEGIN", 0, "undo", "ON_CANCEL")).status == DONE
    failed = await hist.complete_one(leased, "FAILED", error=tasks_pb2.TaskError(error_class="Boom"),
                                     retry_after=duration(3600))
    assert failed.state == tasks_pb2.TASK_STATE_RETRY_WAIT and "retry" in await hist.timers(leased.task_id)
    c = await hist.cancel(leased.task_id, tenant)
    assert (c.state, c.cancel_requested) == (tasks_pb2.TASK_STATE_ENQUEUED, True)
    assert "retry" not in await hist.timers(leased.task_id)
    assert (await hist.log(leased.task_id))[-1][1:3] == ("RETRY_WAIT", "ENQUEUED")
    second = await hist.lease_one(app, lease_s=LEASE_S)  # due now, not in an hour
    assert second.task_id == leased.task_id
    stop = await _step(hist, second, "BEGIN", 1, "next")
    assert (stop.status, stop.compensate_from) == (CANCELLED, 1)  # the log has nothing there


async def test_a_cancelled_run_with_compensations_cascades_to_its_open_fanouts_children(hist):
    from .test_history_fanout import _begin, _start_n
    from .test_history_fanout import _run as _fanout_run

    tenant, app, leased = await _fanout_run(hist)
    assert (await _step(hist, leased, "BEGIN", 0, "undo", "ON_CANCEL")).status == DONE
    ids = list((await _begin(hist, leased, 1, 3)).child_ids)
    await _start_n(hist, tenant, app, leased.task_id, 1, ids)
    await _suspend(hist, leased, 1)
    c = await hist.cancel(leased.task_id, tenant)
    assert c.state == tasks_pb2.TASK_STATE_ENQUEUED  # the run is due (its compensations), not ended

    async def children_cancelled() -> bool:
        return all([await _is(hist, cid, tenant, "CANCELED") for cid in ids])
    await eventually(children_cancelled, timeout=10)
    second = await _lease_again(hist, app, leased.task_id, tenant)
    assert (await _step(hist, second, "BEGIN", 0, "undo", "ON_CANCEL")).status == DONE
    # The cancelled children ended the fan-out (collect: all ended): its DONE is the replay.
    async def fanout_completed() -> bool:
        return (await _steps(hist, leased.task_id))[1][3] == "COMPLETED"
    await eventually(fanout_completed, timeout=10)
    fan = await _begin(hist, second, 1, 3)
    assert fan.status == DONE and [o.state for o in fan.children] == [tasks_pb2.TASK_STATE_CANCELED] * 3
    stop = await _step(hist, second, "BEGIN", 2, "ship")
    assert (stop.status, stop.compensate_from) == (CANCELLED, 2)
