"""Workflow runs on history (docs/design/workflows-protocol.md), on real shard databases over
real gRPC: the fenced step protocol (WorkflowStep), SUSPENDED completions and the wake-up,
events to a run's inbox and broadcast, cancel and expiry of a WAITING run, and the step log's
pages (GetWorkflowSteps). A run is a task whose type history does not look at."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.api.workflows.v1 import workflows_pb2
from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.shardmap import new_task_id
from ratchet.services.history.policy import duration
from ratchet.services.history.workflows import events
from ratchet.services.history.workflows.convert import Event

from .helpers import RPC_TIMEOUT, eventually, unique

LEASE_S = 30.0  # the shared server's default lease is 1 s: these runs hold theirs for the test


async def _run(hist, tenant: str | None = None, app: str | None = None, **kw):
    """A new run, leased: (tenant, app, its LeasedTask)."""
    tenant, app = tenant or unique("t"), app or unique("app")
    await hist.create_one(tenant, app, task_type="order_flow", **kw)
    return tenant, app, await hist.lease_one(app, lease_s=LEASE_S)


async def _step(hist, leased, op: str, position: int, name: str, kind: str = "STEP", *, epoch: int | None = None,
                **kw) -> wpb.StepResponse:
    lease = wpb.LeaseRef(shard_id=leased.shard_id, task_id=leased.task_id,
                         lease_epoch=leased.lease_epoch if epoch is None else epoch)
    req = wpb.StepRequest(lease=lease, op=wpb.StepOp.Value(f"STEP_OP_{op}"), position=position, name=name,
                          kind=wpb.StepKind.Value(f"STEP_KIND_{kind}"), **kw)
    return (await hist.stub.WorkflowStep(h.WorkflowStepRequest(step=req), timeout=RPC_TIMEOUT)).step


async def _suspend(hist, leased, position: int, wake_after_s: float | None = None) -> wpb.CompletionResult:
    kw = {"wake_after": duration(wake_after_s)} if wake_after_s is not None else {}
    return await hist.complete_one(leased, "SUSPENDED", suspend_position=position, **kw)


async def _deliver(hist, tenant: str, name: str, data: dict, workflow_id: str = "", shard: int = 1) -> int:
    req = h.DeliverEventRequest(shard_id=shard, tenant_id=tenant, name=name, data_json=json.dumps(data).encode(),
                                workflow_id=workflow_id)
    return (await hist.stub.DeliverEvent(req, timeout=RPC_TIMEOUT)).delivered


async def _steps(hist, task_id: str) -> list[tuple]:
    rows = await hist.sql(1, "SELECT position, name, kind, state, lease_epoch, attempt, convert_from(result, 'UTF8'), "
                             "error_class, fatal FROM workflow_steps WHERE workflow_id = $1::uuid ORDER BY position",
                          task_id)
    return [tuple(r) for r in rows]


async def _workflow_rows(hist, task_id: str) -> tuple:
    """The run's step log, waits and inbox, to prove a refused op wrote nothing."""
    out = [await _steps(hist, task_id)]
    for table in ("workflow_waits", "workflow_inbox"):
        rows = await hist.sql(1, f"SELECT * FROM {table} WHERE workflow_id = $1::uuid", task_id)
        out.append([tuple(r.items()) for r in rows])
    return tuple(out)


async def _code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code(), e.value.details()


# -- STEP ------------------------------------------------------------------------------

async def test_a_step_is_claimed_committed_and_memoized_and_resends_answer_the_same(hist):
    _, _, leased = await _run(hist)
    r = await _step(hist, leased, "BEGIN", 0, "charge")
    assert (r.status, r.attempt) == (wpb.STEP_STATUS_RUN, 1)
    again = await _step(hist, leased, "BEGIN", 0, "charge")  # a resent begin: the same claim
    assert (again.status, again.attempt) == (wpb.STEP_STATUS_RUN, 1)
    done = await _step(hist, leased, "COMMIT", 0, "charge", result_json=b'{"paid": 7}')
    assert (done.status, done.attempt, json.loads(done.result_json)) == (wpb.STEP_STATUS_DONE, 1, {"paid": 7})
    resent = await _step(hist, leased, "COMMIT", 0, "charge", result_json=b'{"paid": 8}')  # a resend: the first stays
    assert resent.status == wpb.STEP_STATUS_DONE and json.loads(resent.result_json) == {"paid": 7}
    memo = await _step(hist, leased, "BEGIN", 0, "charge")
    assert memo.status == wpb.STEP_STATUS_DONE and json.loads(memo.result_json) == {"paid": 7}
    assert await _steps(hist, leased.task_id) == [(0, "charge", "STEP", "COMPLETED", leased.lease_epoch, 1,
                                                    '{"paid": 7}', None, False)]


async def test_a_stale_lease_epoch_is_refused_and_writes_nothing(hist):
    tenant, _, leased = await _run(hist)
    await _step(hist, leased, "BEGIN", 0, "a")
    before = (await hist.snapshot(leased.task_id), await _workflow_rows(hist, leased.task_id))
    for epoch in (leased.lease_epoch - 1, leased.lease_epoch + 1):
        for op, kw in (("BEGIN", {}), ("COMMIT", {"result_json": b"1"})):
            code, details = await _code_of(_step(hist, leased, op, 0, "a", epoch=epoch, **kw))
            assert code == grpc.StatusCode.FAILED_PRECONDITION and f"lease {epoch} is not current" in details
        code, _ = await _code_of(_step(hist, leased, "BEGIN", 1, "b", "SLEEP", epoch=epoch, duration=duration(5)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert (await hist.snapshot(leased.task_id), await _workflow_rows(hist, leased.task_id)) == before
    await hist.complete_one(leased, "SUCCEEDED", result_json=b"1")
    code, _ = await _code_of(_step(hist, leased, "BEGIN", 1, "b"))  # the run ended: the lease is gone
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert len(await _steps(hist, leased.task_id)) == 1 and await hist.state(leased.task_id, tenant) == "SUCCEEDED"


async def test_a_claim_left_by_an_older_activation_is_claimed_again_as_attempt_2(hist):
    tenant, app, first = await _run(hist)
    assert (await _step(hist, first, "BEGIN", 0, "ship")).attempt == 1
    await hist.complete_one(first, "CRASHED", retry_after=duration(0))  # the activation died mid-step
    await eventually(lambda: _is(hist, first.task_id, tenant, "ENQUEUED"))
    second = await hist.lease_one(app, lease_s=LEASE_S)
    assert second.task_id == first.task_id and second.lease_epoch == first.lease_epoch + 1
    r = await _step(hist, second, "BEGIN", 0, "ship")
    assert (r.status, r.attempt) == (wpb.STEP_STATUS_RUN, 2)
    code, _ = await _code_of(_step(hist, first, "COMMIT", 0, "ship", result_json=b"1"))  # the old one's commit
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert (await _steps(hist, first.task_id))[0][3:6] == ("RUNNING", second.lease_epoch, 2)


async def _is(hist, task_id: str, tenant: str, state: str) -> bool:
    return await hist.state(task_id, tenant) == state


async def test_a_failed_step_is_tried_again_unless_fatal(hist):
    tenant, app, first = await _run(hist)
    await _step(hist, first, "BEGIN", 0, "flaky")
    err = tasks_pb2.TaskError(error_class="IOError", message="disk")
    r = await _step(hist, first, "COMMIT", 0, "flaky", error=err)
    assert r.status == wpb.STEP_STATUS_DONE and r.error.error_class == "IOError" and not r.result_json
    await _step(hist, first, "BEGIN", 1, "doomed")
    await _step(hist, first, "COMMIT", 1, "doomed", error=tasks_pb2.TaskError(error_class="Fatal"), fatal=True)
    await hist.complete_one(first, "FAILED", retry_after=duration(0))
    await eventually(lambda: _is(hist, first.task_id, tenant, "ENQUEUED"))
    second = await hist.lease_one(app, lease_s=LEASE_S)
    again = await _step(hist, second, "BEGIN", 0, "flaky")
    assert (again.status, again.attempt) == (wpb.STEP_STATUS_RUN, 2)
    fatal = await _step(hist, second, "BEGIN", 1, "doomed")
    assert fatal.status == wpb.STEP_STATUS_DONE and fatal.error.error_class == "Fatal"


async def test_another_step_at_a_logged_position_is_a_mismatch_that_writes_nothing(hist):
    _, _, leased = await _run(hist)
    await _step(hist, leased, "BEGIN", 0, "charge")
    before = await _workflow_rows(hist, leased.task_id)
    r = await _step(hist, leased, "BEGIN", 0, "refund")
    assert (r.status, r.logged_name, r.logged_kind) == (wpb.STEP_STATUS_MISMATCH, "charge", wpb.STEP_KIND_STEP)
    r = await _step(hist, leased, "BEGIN", 0, "charge", "SLEEP", duration=duration(1))
    assert (r.status, r.logged_kind) == (wpb.STEP_STATUS_MISMATCH, wpb.STEP_KIND_STEP)
    code, _ = await _code_of(_step(hist, leased, "COMMIT", 0, "refund", result_json=b"1"))  # not its claim
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert await _workflow_rows(hist, leased.task_id) == before


async def test_a_version_marker_is_recorded_kept_and_absent_where_the_run_passed_earlier(hist):
    _, _, leased = await _run(hist)
    new = await _step(hist, leased, "BEGIN", 0, "v_fee", "VERSION", version=2)
    assert new.status == wpb.STEP_STATUS_DONE and json.loads(new.result_json) == 2
    kept = await _step(hist, leased, "BEGIN", 0, "v_fee", "VERSION", version=3)  # the code moved on: the log decides
    assert kept.status == wpb.STEP_STATUS_DONE and json.loads(kept.result_json) == 2
    await _step(hist, leased, "BEGIN", 1, "charge")
    before = await _workflow_rows(hist, leased.task_id)
    absent = await _step(hist, leased, "BEGIN", 1, "v_tax", "VERSION", version=1)
    assert (absent.status, absent.logged_name) == (wpb.STEP_STATUS_ABSENT, "charge")
    assert await _workflow_rows(hist, leased.task_id) == before


async def test_bad_step_requests_are_invalid_and_write_nothing(hist):
    _, _, leased = await _run(hist)
    await _step(hist, leased, "BEGIN", 0, "a")
    before = (await hist.snapshot(leased.task_id), await _workflow_rows(hist, leased.task_id))
    bad = [
        (dict(op="BEGIN", position=2, name="b"), "past the end"),
        (dict(op="BEGIN", position=-1, name="b"), "position must be 0 or more"),
        (dict(op="BEGIN", position=1, name="has space"), "[A-Za-z0-9_.:-]"),
        (dict(op="BEGIN", position=1, name=""), "[A-Za-z0-9_.:-]"),
        (dict(op="BEGIN", position=1, name="x" * 201), "1..200"),
        (dict(op="COMMIT", position=0, name="a", result_json=b"{nope"), "must be JSON"),
        (dict(op="COMMIT", position=0, name="a", result_json=b'"' + b"x" * 300_000 + b'"'), "at most 262144"),
        (dict(op="BEGIN", position=1, name="w", kind="WAIT", match_json=b"[1]"), "JSON object"),
        (dict(op="BEGIN", position=1, name="w", kind="WAIT", match_json=b"{bad"), "JSON"),
        (dict(op="BEGIN", position=1, name="s", kind="SLEEP"), "duration is required"),
        (dict(op="COMMIT", position=1, name="s", kind="SLEEP"), "only a STEP or COMPENSATE is committed"),
    ]
    for kw, words in bad:
        code, details = await _code_of(_step(hist, leased, **kw))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and words in details, (kw, details)
    raw = wpb.StepRequest(lease=wpb.LeaseRef(shard_id=1, task_id=leased.task_id, lease_epoch=leased.lease_epoch),
                          position=1, name="x", kind=wpb.STEP_KIND_STEP)  # no op
    code, details = await _code_of(hist.stub.WorkflowStep(h.WorkflowStepRequest(step=raw), timeout=RPC_TIMEOUT))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "step.op" in details
    raw.op, raw.kind = wpb.STEP_OP_BEGIN, 0
    code, details = await _code_of(hist.stub.WorkflowStep(h.WorkflowStepRequest(step=raw), timeout=RPC_TIMEOUT))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "step.kind" in details
    assert (await hist.snapshot(leased.task_id), await _workflow_rows(hist, leased.task_id)) == before


# -- SLEEP, suspension, wake -------------------------------------------------------------

async def test_a_sleep_suspends_the_run_until_its_wake_timer_then_answers_done(hist):
    tenant, app, leased = await _run(hist, max_attempts=3)
    r = await _step(hist, leased, "BEGIN", 0, "nap", "SLEEP", duration=duration(0.6))
    assert r.status == wpb.STEP_STATUS_SUSPEND and 0.4 < r.wake_after.ToNanoseconds() / 1e9 <= 0.6
    resent = await _step(hist, leased, "BEGIN", 0, "nap", "SLEEP", duration=duration(0.6))
    assert resent.status == wpb.STEP_STATUS_SUSPEND
    assert resent.wake_after.ToNanoseconds() <= r.wake_after.ToNanoseconds()
    done = await _suspend(hist, leased, 0, r.wake_after.ToNanoseconds() / 1e9)
    assert done.accepted and done.state == tasks_pb2.TASK_STATE_WAITING
    task = await hist.get(leased.task_id, tenant)
    assert task.state == tasks_pb2.TASK_STATE_WAITING and task.max_attempts == 4 and task.attempt == 1
    assert task.attempts[0].outcome == tasks_pb2.ATTEMPT_OUTCOME_SUSPENDED
    assert set(await hist.timers(leased.task_id)) == {"wake"}
    again = await _suspend(hist, leased, 0, 1.0)  # a resent suspension: the lease is gone
    assert not again.accepted and again.state == tasks_pb2.TASK_STATE_WAITING
    await eventually(lambda: _is(hist, leased.task_id, tenant, "ENQUEUED"), 5)
    assert await hist.timers(leased.task_id) == {}
    log = await hist.log(leased.task_id)
    assert [x[1:3] for x in log[-3:]] == [("ENQUEUED", "LEASED"), ("LEASED", "WAITING"), ("WAITING", "ENQUEUED")]
    second = await hist.lease_one(app, lease_s=LEASE_S)
    assert second.attempt == 2 and second.max_attempts == 4
    woke = await _step(hist, second, "BEGIN", 0, "nap", "SLEEP", duration=duration(0.6))
    assert woke.status == wpb.STEP_STATUS_DONE
    assert (await _steps(hist, leased.task_id))[0][3] == "COMPLETED"


async def test_a_sleep_of_no_time_is_done_at_once(hist):
    _, _, leased = await _run(hist)
    r = await _step(hist, leased, "BEGIN", 0, "nap", "SLEEP", duration=duration(0))
    assert r.status == wpb.STEP_STATUS_DONE
    assert (await _steps(hist, leased.task_id))[0][3] == "COMPLETED"


async def test_a_wake_timer_that_finds_the_run_not_waiting_does_nothing(make_hist):
    hist = await make_hist(timer_loop=False)
    tenant, _, leased = await _run(hist)
    await _step(hist, leased, "BEGIN", 0, "w", "WAIT")
    assert (await _suspend(hist, leased, 0, 0.05)).state == tasks_pb2.TASK_STATE_WAITING
    assert await _deliver(hist, tenant, "w", {}, leased.task_id) == 1  # the event wakes it first
    assert await hist.state(leased.task_id, tenant) == "ENQUEUED" and await hist.timers(leased.task_id) == {}
    await hist.sql(1, "INSERT INTO timer_queue (task_id, kind, fire_at, lease_epoch) "
                      "VALUES ($1::uuid, 'wake', now(), $2)", leased.task_id, leased.lease_epoch)  # a late one
    before = await hist.log(leased.task_id)
    out = await hist.fire()
    assert out.fired == 1 and await hist.log(leased.task_id) == before
    assert await hist.state(leased.task_id, tenant) == "ENQUEUED"


# -- WAIT and events ---------------------------------------------------------------------

async def test_an_inbox_event_sent_before_the_wait_is_consumed_at_its_begin(hist):
    tenant, _, leased = await _run(hist)
    assert await _deliver(hist, tenant, "paid", {"order": 1, "amount": 5}, leased.task_id) == 0  # kept
    assert await _deliver(hist, tenant, "paid", {"order": 2}, leased.task_id) == 0
    r = await _step(hist, leased, "BEGIN", 0, "paid", "WAIT", match_json=b'{"order": 2}')
    assert r.status == wpb.STEP_STATUS_DONE and json.loads(r.result_json) == {"order": 2}
    r = await _step(hist, leased, "BEGIN", 1, "paid", "WAIT")  # the oldest left
    assert r.status == wpb.STEP_STATUS_DONE and json.loads(r.result_json) == {"order": 1, "amount": 5}
    inbox = await hist.sql(1, "SELECT consumed_by FROM workflow_inbox WHERE workflow_id = $1::uuid ORDER BY seq",
                           leased.task_id)
    assert [x["consumed_by"] for x in inbox] == [1, 0]
    assert await hist.sql(1, "SELECT 1 FROM workflow_waits WHERE workflow_id = $1::uuid", leased.task_id) == []


async def test_an_inbox_event_after_the_suspension_wakes_the_run(hist):
    tenant, app, leased = await _run(hist)
    r = await _step(hist, leased, "BEGIN", 0, "approved", "WAIT", match_json=b'{"ok": true}')
    assert r.status == wpb.STEP_STATUS_SUSPEND and not r.HasField("wake_after")  # no timeout
    assert (await _suspend(hist, leased, 0)).state == tasks_pb2.TASK_STATE_WAITING
    assert await hist.timers(leased.task_id) == {}  # nothing but the event wakes it
    assert await _deliver(hist, tenant, "approved", {"ok": False}, leased.task_id) == 0  # no match: kept
    assert await hist.state(leased.task_id, tenant) == "WAITING"
    assert await _deliver(hist, tenant, "approved", {"ok": True, "by": "ann"}, leased.task_id) == 1
    assert await hist.state(leased.task_id, tenant) == "ENQUEUED"
    second = await hist.lease_one(app, lease_s=LEASE_S)
    r = await _step(hist, second, "BEGIN", 0, "approved", "WAIT", match_json=b'{"ok": true}')
    assert r.status == wpb.STEP_STATUS_DONE and json.loads(r.result_json) == {"ok": True, "by": "ann"}


async def test_a_broadcast_wakes_the_waits_whose_fields_match_and_no_other_tenants(hist):
    tenant, other = unique("t"), unique("t")
    runs = {}
    for who, order in (("a", 1), ("b", 2), ("c", 1)):
        t = other if who == "c" else tenant
        _, _, leased = await _run(hist, t)
        await _step(hist, leased, "BEGIN", 0, "shipped", "WAIT", match_json=json.dumps({"order": order}).encode())
        assert (await _suspend(hist, leased, 0)).state == tasks_pb2.TASK_STATE_WAITING
        runs[who] = (t, leased)
    assert await _deliver(hist, tenant, "shipped", {"order": 3}) == 0  # matches nobody
    assert await _deliver(hist, tenant, "delivered", {"order": 1}) == 0  # another name
    for t, leased in runs.values():
        assert await hist.state(leased.task_id, t) == "WAITING"
    assert await _deliver(hist, tenant, "shipped", {"order": 1, "carrier": "x"}) == 1
    assert await hist.state(runs["a"][1].task_id, tenant) == "ENQUEUED"
    assert await hist.state(runs["b"][1].task_id, tenant) == "WAITING"
    assert await hist.state(runs["c"][1].task_id, other) == "WAITING"  # another tenant's wait
    step = (await _steps(hist, runs["a"][1].task_id))[0]
    assert step[3] == "COMPLETED" and json.loads(step[6]) == {"order": 1, "carrier": "x"}
    assert await _deliver(hist, tenant, "shipped", {"order": 1}) == 0  # a completed wait takes no second event


async def test_a_broadcast_after_the_timeout_does_not_match_and_the_begin_answers_timeout(hist):
    tenant, app, leased = await _run(hist)
    r = await _step(hist, leased, "BEGIN", 0, "reply", "WAIT", duration=duration(0.3))
    assert r.status == wpb.STEP_STATUS_SUSPEND
    await _suspend(hist, leased, 0, r.wake_after.ToNanoseconds() / 1e9)
    await eventually(lambda: _is(hist, leased.task_id, tenant, "ENQUEUED"), 5)  # the timeout's wake timer
    assert await _deliver(hist, tenant, "reply", {"x": 1}) == 0  # too late
    assert await _deliver(hist, tenant, "reply", {"x": 1}, leased.task_id) == 0  # kept, and too late
    second = await hist.lease_one(app, lease_s=LEASE_S)
    r = await _step(hist, second, "BEGIN", 0, "reply", "WAIT", duration=duration(0.3))
    assert r.status == wpb.STEP_STATUS_DONE and r.error.error_class == "TimeoutError" and not r.result_json
    again = await _step(hist, second, "BEGIN", 0, "reply", "WAIT", duration=duration(0.3))
    assert again.status == wpb.STEP_STATUS_DONE and again.error.error_class == "TimeoutError"
    assert (await _steps(hist, leased.task_id))[0][3:] == ("FAILED", leased.lease_epoch, 1, None, "TimeoutError",
                                                           True)
    assert await hist.sql(1, "SELECT 1 FROM workflow_waits WHERE workflow_id = $1::uuid", leased.task_id) == []


async def test_an_event_between_the_begin_and_the_suspension_wakes_the_run_at_once(hist):
    tenant, app, leased = await _run(hist)
    await _step(hist, leased, "BEGIN", 0, "go", "WAIT", duration=duration(3600))
    assert await _deliver(hist, tenant, "go", {"n": 1}) == 1  # the run is still LEASED: the wait completes
    assert await hist.state(leased.task_id, tenant) == "LEASED"
    r = await _suspend(hist, leased, 0, 3600)
    assert r.accepted and r.state == tasks_pb2.TASK_STATE_ENQUEUED  # no wake-up is lost
    assert await hist.timers(leased.task_id) == {}
    log = await hist.log(leased.task_id)
    assert [x[1:3] for x in log[-2:]] == [("LEASED", "WAITING"), ("WAITING", "ENQUEUED")]
    second = await hist.lease_one(app, lease_s=LEASE_S)
    r = await _step(hist, second, "BEGIN", 0, "go", "WAIT", duration=duration(3600))
    assert r.status == wpb.STEP_STATUS_DONE and json.loads(r.result_json) == {"n": 1}


async def test_a_broadcast_works_in_batches_in_workflow_id_order(hist):
    tenant, name = unique("t"), unique("ev").replace("-", "_")
    ids = []
    for _ in range(5):
        _, _, leased = await _run(hist, tenant)
        await _step(hist, leased, "BEGIN", 0, name, "WAIT")
        await _suspend(hist, leased, 0)
        ids.append(leased.task_id)
    shard = hist.server.shards.get(1)
    async with shard.conn() as conn:
        out = await events.broadcast(conn, hist.server.store, Event(1, tenant, name, "{}", None), batch=2)
    assert (out.delivered, out.woken) == (5, 5)
    for tid in ids:
        assert await hist.state(tid, tenant) == "ENQUEUED"


async def test_events_for_unknown_foreign_or_ended_runs_and_bad_events_are_refused(hist):
    tenant, _, leased = await _run(hist)
    for tid, t in ((new_task_id(), tenant), (leased.task_id, unique("t"))):
        code, _ = await _code_of(_deliver(hist, t, "e", {}, tid))
        assert code == grpc.StatusCode.NOT_FOUND
    for name, data, words in (("bad name", b"{}", "[A-Za-z0-9_.:-]"), ("e", b"[1]", "JSON object"),
                              ("e", b"", "required"), ("e", b"{x", "JSON")):
        req = h.DeliverEventRequest(shard_id=1, tenant_id=tenant, name=name, data_json=data, workflow_id=leased.task_id)
        code, details = await _code_of(hist.stub.DeliverEvent(req, timeout=RPC_TIMEOUT))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and words in details
    await hist.complete_one(leased, "SUCCEEDED", result_json=b"1")
    code, details = await _code_of(_deliver(hist, tenant, "e", {}, leased.task_id))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "the run has ended" in details
    assert await hist.sql(1, "SELECT 1 FROM workflow_inbox WHERE workflow_id = $1::uuid", leased.task_id) == []


# -- cancel, expiry ----------------------------------------------------------------------

async def test_cancel_of_a_waiting_run_ends_it_with_its_waits_and_timers(hist):
    tenant, _, leased = await _run(hist)
    await _step(hist, leased, "BEGIN", 0, "approved", "WAIT", duration=duration(3600))
    await _suspend(hist, leased, 0, 3600)
    assert set(await hist.timers(leased.task_id)) == {"wake"}
    r = await hist.cancel(leased.task_id, tenant)
    assert r.state == tasks_pb2.TASK_STATE_CANCELED and not r.cancel_requested
    assert await hist.timers(leased.task_id) == {}
    assert await hist.sql(1, "SELECT 1 FROM workflow_waits WHERE workflow_id = $1::uuid", leased.task_id) == []
    assert await _deliver(hist, tenant, "approved", {}) == 0
    assert (await hist.log(leased.task_id))[-1][1:3] == ("WAITING", "CANCELED")


async def test_a_cancel_asked_while_the_activation_ran_wins_over_its_suspension(hist):
    tenant, _, leased = await _run(hist)
    await _step(hist, leased, "BEGIN", 0, "w", "WAIT")
    await hist.cancel(leased.task_id, tenant)  # LEASED: a request
    r = await _suspend(hist, leased, 0)
    assert r.accepted and r.state == tasks_pb2.TASK_STATE_CANCELED
    assert await hist.sql(1, "SELECT 1 FROM workflow_waits WHERE workflow_id = $1::uuid", leased.task_id) == []


async def test_schedule_to_close_expires_a_waiting_run(hist):
    tenant, _, leased = await _run(hist, timeouts=tasks_pb2.Timeouts(schedule_to_close=duration(1.0)))
    await _step(hist, leased, "BEGIN", 0, "w", "WAIT")
    assert (await _suspend(hist, leased, 0)).state == tasks_pb2.TASK_STATE_WAITING
    await eventually(lambda: _is(hist, leased.task_id, tenant, "EXPIRED"), 5)
    assert await hist.timers(leased.task_id) == {}
    assert await hist.sql(1, "SELECT 1 FROM workflow_waits WHERE workflow_id = $1::uuid", leased.task_id) == []


# -- GetWorkflowSteps --------------------------------------------------------------------

async def _page(hist, wid: str, tenant: str, start: int = 0, size: int = 0) -> h.GetWorkflowStepsResponse:
    req = h.GetWorkflowStepsRequest(shard_id=1, workflow_id=wid, tenant_id=tenant, from_position=start,
                                    page_size=size)
    return await hist.stub.GetWorkflowSteps(req, timeout=RPC_TIMEOUT)


async def test_the_step_log_pages_over_2500_steps_and_shows_the_pending_wait(hist):
    tenant, _, leased = await _run(hist)
    n = 2500
    await _step(hist, leased, "BEGIN", 0, "s0")
    await _step(hist, leased, "COMMIT", 0, "s0", result_json=b'{"i": 0}')
    await hist.sql(1, "INSERT INTO workflow_steps (workflow_id, position, name, kind, state, lease_epoch, attempt, "
                      "result, started_at, finished_at) SELECT $1::uuid, p, 's' || p, 'STEP', 'COMPLETED', $2, 1, "
                      "convert_to('{\"i\": ' || p || '}', 'UTF8'), now(), now() FROM generate_series(1, $3) p",
                   leased.task_id, leased.lease_epoch, n - 2)
    await _step(hist, leased, "BEGIN", n - 1, "approved", "WAIT", match_json=b'{"by": "ann"}',
                duration=duration(3600))
    await _suspend(hist, leased, n - 1, 3600)
    got, start, pages = [], 0, 0
    while start != -1:
        page = await _page(hist, leased.task_id, tenant, start, 1000)
        assert page.step_count == n
        got += list(page.steps)
        start, pages = page.next_position, pages + 1
    assert pages == 3 and [s.position for s in got] == list(range(n))
    first = got[0]
    assert (first.name, first.kind, first.state, first.attempt) == ("s0", workflows_pb2.STEP_KIND_STEP,
                                                                    workflows_pb2.STEP_STATE_COMPLETED, 1)
    assert first.result.struct_value["i"] == 0 and first.HasField("started_at") and first.HasField("finished_at")
    last = got[-1]
    assert last.state == workflows_pb2.STEP_STATE_RUNNING and last.HasField("wake_at") and not last.HasField("result")
    p = page.pending
    assert (p.position, p.kind, p.name, dict(p.match)) == (n - 1, workflows_pb2.STEP_KIND_WAIT, "approved",
                                                           {"by": "ann"})
    assert p.wake_at.ToDatetime() == last.wake_at.ToDatetime()
    default = await _page(hist, leased.task_id, tenant)
    assert len(default.steps) == 100 and default.next_position == 100
    tail = await _page(hist, leased.task_id, tenant, n - 1, 1000)
    assert [s.position for s in tail.steps] == [n - 1] and tail.next_position == -1


async def test_the_step_log_of_an_unknown_or_foreign_run_is_not_found(hist):
    tenant, _, leased = await _run(hist)
    await _step(hist, leased, "BEGIN", 0, "a")
    page = await _page(hist, leased.task_id, tenant)
    assert len(page.steps) == 1 and not page.HasField("pending") and page.next_position == -1
    assert page.steps[0].state == workflows_pb2.STEP_STATE_RUNNING
    for tid, t in ((new_task_id(), tenant), (leased.task_id, unique("t"))):
        code, _ = await _code_of(_page(hist, tid, t))
        assert code == grpc.StatusCode.NOT_FOUND
    for size in (-1, 1001):
        code, details = await _code_of(_page(hist, leased.task_id, tenant, 0, size))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "page_size" in details
    code, _ = await _code_of(_page(hist, leased.task_id, tenant, -1))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# -- ready work ----------------------------------------------------------------------------

async def _announced(w) -> bool:
    """Whether shard 1 was announced since the last look (a short wait for the event)."""
    try:
        return 1 in await asyncio.wait_for(w.next(), 0.3)
    except TimeoutError:
        return False


async def test_every_way_a_run_wakes_announces_ready_work(make_hist):
    hist = await make_hist(timer_loop=False)
    w = hist.server.hub.watch([1], wanted=True)
    try:
        tenant, app, leased = await _run(hist)
        await _announced(w)  # (the create's)
        await _step(hist, leased, "BEGIN", 0, "e", "WAIT")
        await _suspend(hist, leased, 0)
        assert not await _announced(w)  # WAITING: nothing ready
        assert await _deliver(hist, tenant, "e", {}, leased.task_id) == 1
        assert await _announced(w)  # the inbox event woke it
        second = await hist.lease_one(app, lease_s=LEASE_S)
        await _step(hist, second, "BEGIN", 1, "b", "WAIT")
        await _suspend(hist, second, 1)
        assert await _deliver(hist, tenant, "b", {}) == 1 and await _announced(w)  # the broadcast woke it
        third = await hist.lease_one(app, lease_s=LEASE_S)
        await _step(hist, third, "BEGIN", 2, "c", "WAIT")
        await _deliver(hist, tenant, "c", {})
        assert not await _announced(w)  # LEASED: completed, not woken
        assert (await _suspend(hist, third, 2)).state == tasks_pb2.TASK_STATE_ENQUEUED and await _announced(w)
        fourth = await hist.lease_one(app, lease_s=LEASE_S)
        await _step(hist, fourth, "BEGIN", 3, "nap", "SLEEP", duration=duration(0.05))
        await _suspend(hist, fourth, 3, 0.05)
        await asyncio.sleep(0.1)
        assert (await hist.fire()).ready and await _announced(w)  # the wake timer woke it
        assert await hist.state(leased.task_id, tenant) == "ENQUEUED"
    finally:
        hist.server.hub.unwatch(w)


async def test_concurrent_begins_of_one_position_claim_it_once(hist):
    _, _, leased = await _run(hist)
    answers = await asyncio.gather(*(_step(hist, leased, "BEGIN", 0, "once") for _ in range(6)))
    assert {(a.status, a.attempt) for a in answers} == {(wpb.STEP_STATUS_RUN, 1)}
    assert len(await _steps(hist, leased.task_id)) == 1


async def test_an_event_racing_the_suspension_never_leaves_the_run_waiting(hist):
    tenant = unique("t")
    runs = []
    for i in range(8):
        _, _, leased = await _run(hist, tenant)
        await _step(hist, leased, "BEGIN", 0, f"race{i}", "WAIT")
        runs.append(leased)
    for i, leased in enumerate(runs):  # the event (inbox or broadcast) and the suspension at once
        event = _deliver(hist, tenant, f"race{i}", {}, leased.task_id if i % 2 else "")
        delivered, _ = await asyncio.gather(event, _suspend(hist, leased, 0))
        assert delivered == 1
        assert await hist.state(leased.task_id, tenant) == "ENQUEUED", i
