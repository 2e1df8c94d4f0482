"""CancelTask in every state, and the three server-side timeouts."""

from __future__ import annotations

import grpc
import pytest

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.shardmap import new_task_id
from ratchet.services.history.policy import duration
from ratchet.services.history.store import Tx

from .helpers import eventually, unique


def _timeouts(**seconds) -> tasks_pb2.Timeouts:
    return tasks_pb2.Timeouts(**{k: duration(v) for k, v in seconds.items()})


async def test_cancel_enqueued_is_immediate_and_removes_its_timers(hist):
    tenant = unique("t")
    task_id = await hist.create_one(tenant, delay=duration(60), timeouts=_timeouts(schedule_to_close=600))
    assert set(await hist.timers(task_id)) == {"delay", "schedule_to_close"}
    r = await hist.cancel(task_id, tenant)
    assert r.state == tasks_pb2.TASK_STATE_CANCELED and not r.cancel_requested
    assert await hist.timers(task_id) == {}
    got = await hist.get(task_id, tenant)
    assert got.HasField("finished_at") and not got.cancel_requested
    assert await hist.log(task_id) == [(1, None, "ENQUEUED", 0), (2, "ENQUEUED", "CANCELED", 0)]


async def test_cancel_retry_wait_is_immediate_and_removes_the_retry_timer(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, base_s=3600)
    leased = await hist.lease_one(app)
    await hist.complete_one(leased, "FAILED")
    assert set(await hist.timers(task_id)) == {"retry"}
    r = await hist.cancel(task_id, tenant)
    assert r.state == tasks_pb2.TASK_STATE_CANCELED
    assert await hist.timers(task_id) == {}


async def test_cancel_leased_asks_the_worker_and_its_canceled_return_ends_canceled(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app)
    leased = await hist.lease_one(app, lease_s=30)
    r = await hist.cancel(task_id, tenant)
    assert r.state == tasks_pb2.TASK_STATE_LEASED and r.cancel_requested
    again = await hist.cancel(task_id, tenant)  # idempotent
    assert again.state == tasks_pb2.TASK_STATE_LEASED and again.cancel_requested
    (hb,) = await hist.heartbeat((task_id, leased.lease_epoch))
    assert hb.action == wpb.LEASE_ACTION_CANCEL and "cancelled" in hb.reason
    assert 0 < hb.kill_after.ToNanoseconds() / 1e9 <= 0.5  # the configured grace
    done = await hist.complete_one(leased, "CANCELED")
    assert done.accepted and done.state == tasks_pb2.TASK_STATE_CANCELED
    got = await hist.get(task_id, tenant)
    assert got.cancel_requested and got.attempts[0].outcome == tasks_pb2.ATTEMPT_OUTCOME_CANCELED
    assert await hist.timers(task_id) == {}


async def test_a_failure_after_a_cancel_ends_canceled_and_a_racing_success_wins(hist):
    tenant, app = unique("t"), unique("app")
    failing, winning = await hist.create_one(tenant, app), await hist.create_one(tenant, app)
    leases = {t.task_id: t for t in (await hist.lease(app, max_tasks=2, lease_s=30)).tasks}
    for tid in (failing, winning):
        await hist.cancel(tid, tenant)
    f = await hist.complete_one(leases[failing], "FAILED", error=tasks_pb2.TaskError(error_class="Boom"))
    w = await hist.complete_one(leases[winning], "SUCCEEDED", result_json=b'"done"')
    assert f.state == tasks_pb2.TASK_STATE_CANCELED and w.state == tasks_pb2.TASK_STATE_SUCCEEDED


async def test_a_cancelled_handler_that_never_returns_is_revoked_after_the_grace(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app)
    leased = await hist.lease_one(app, lease_s=30)
    await hist.cancel(task_id, tenant)
    (timer,) = await hist.sql(1, "SELECT fire_at, (SELECT kill_at FROM tasks WHERE task_id = $1::uuid) AS kill_at "
                                 "FROM timers WHERE task_id = $1::uuid AND kind = 'lease'", task_id)
    assert timer["fire_at"] == timer["kill_at"]  # the lease timer now fires at the kill time
    got = await hist.fire_until_state(task_id, tenant, "CANCELED", timeout=5)
    assert got.attempts[0].outcome == tasks_pb2.ATTEMPT_OUTCOME_CANCELED
    (hb,) = await hist.heartbeat((task_id, leased.lease_epoch))
    assert hb.action == wpb.LEASE_ACTION_LEASE_LOST
    late = await hist.complete_one(leased, "CANCELED")
    assert not late.accepted and late.state == tasks_pb2.TASK_STATE_CANCELED


async def test_cancel_of_a_finished_task_is_a_no_op_returning_its_state(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app)
    await hist.complete_one(await hist.lease_one(app), "SUCCEEDED")
    before = await hist.snapshot(task_id)
    r = await hist.cancel(task_id, tenant)
    assert r.state == tasks_pb2.TASK_STATE_SUCCEEDED and not r.cancel_requested
    assert await hist.snapshot(task_id) == before


async def test_cancel_of_unknown_or_foreign_tasks_is_not_found(hist):
    tenant = unique("t")
    task_id = await hist.create_one(tenant)
    for tid, who in ((task_id, unique("intruder")), (new_task_id(), tenant)):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await hist.cancel(tid, who)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert await hist.state(task_id, tenant) == "ENQUEUED"


async def test_start_to_close_cancels_on_heartbeat_and_counts_as_a_timed_out_attempt(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, max_attempts=2, base_s=0.01,
                                    timeouts=_timeouts(start_to_close=0.2))
    first = await hist.lease_one(app, lease_s=30)
    assert first.start_to_close.ToMilliseconds() == 200

    async def told_to_stop() -> bool:
        (hb,) = await hist.heartbeat((task_id, first.lease_epoch))
        return hb.action == wpb.LEASE_ACTION_CANCEL and "start_to_close" in hb.reason
    await eventually(told_to_stop, 5)
    r = await hist.complete_one(first, "CANCELED")  # the handler noticed ctx.cancelled()
    assert r.state == tasks_pb2.TASK_STATE_RETRY_WAIT
    await hist.fire_until_state(task_id, tenant, "ENQUEUED")
    await hist.lease_one(app, lease_s=30)  # the second attempt ignores the cancel: revoked after the grace
    got = await hist.fire_until_state(task_id, tenant, "FAILED", timeout=6)
    assert [a.outcome for a in got.attempts] == [tasks_pb2.ATTEMPT_OUTCOME_TIMED_OUT] * 2
    assert got.error.error_class == "StartToCloseTimeout"


async def test_schedule_to_start_expires_a_task_never_started(hist):
    tenant = unique("t")
    task_id = await hist.create_one(tenant, timeouts=_timeouts(schedule_to_start=0.2))
    got = await hist.fire_until_state(task_id, tenant, "EXPIRED")
    assert got.error.error_class == "ScheduleToStartTimeout" and got.attempts == []


async def test_schedule_to_start_is_moot_once_leased(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, timeouts=_timeouts(schedule_to_start=30))
    assert "schedule_to_start" in await hist.timers(task_id)
    await hist.lease_one(app)
    assert set(await hist.timers(task_id)) == {"lease"}


async def test_schedule_to_close_expires_waiting_tasks(hist):
    tenant = unique("t")
    task_id = await hist.create_one(tenant, delay=duration(60), timeouts=_timeouts(schedule_to_close=0.2))
    got = await hist.fire_until_state(task_id, tenant, "EXPIRED")
    assert got.error.error_class == "ScheduleToCloseTimeout"
    assert await hist.timers(task_id) == {}


async def test_schedule_to_close_cancels_a_running_task_then_fails_it(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, timeouts=_timeouts(schedule_to_close=0.3))
    leased = await hist.lease_one(app, lease_s=30)
    got = await hist.fire_until_state(task_id, tenant, "FAILED", timeout=6)
    assert got.error.error_class == "ScheduleToCloseTimeout"
    assert got.attempts[0].outcome == tasks_pb2.ATTEMPT_OUTCOME_TIMED_OUT
    (hb,) = await hist.heartbeat((task_id, leased.lease_epoch))
    assert hb.action == wpb.LEASE_ACTION_LEASE_LOST


@pytest.mark.parametrize("outcome, final", [("FAILED", tasks_pb2.TASK_STATE_CANCELED),
                                            ("SUCCEEDED", tasks_pb2.TASK_STATE_SUCCEEDED)])
async def test_a_cancel_landing_between_a_completions_read_and_its_update_is_not_lost(hist, monkeypatch, outcome,
                                                                                     final):
    """Completions decide from an unlocked read; a cancel committed after that read must make the
    update miss and the decision be made again (a failure then ends CANCELED instead of retrying
    with the cancel request wiped)."""
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, max_attempts=5)
    leased = await hist.lease_one(app, lease_s=30)
    real, raced = Tx.task_complete_read, []

    async def read_then_cancel(self, ids, epochs):
        rows = await real(self, ids, epochs)
        if not raced:
            raced.append(await hist.cancel(task_id, tenant))  # another transaction commits in between
        return rows
    monkeypatch.setattr(Tx, "task_complete_read", read_then_cancel)
    r = await hist.complete_one(leased, outcome, error=tasks_pb2.TaskError(error_class="Boom"),
                                result_json=b'"done"' if outcome == "SUCCEEDED" else b"")
    assert raced, "the completion path no longer reads before it updates"
    assert r.accepted and r.state == final
    got = await hist.get(task_id, tenant)
    assert got.state == final
    if outcome == "FAILED":
        # As test_a_failure_after_a_cancel_ends_canceled...: the attempt failed, the task ends CANCELED.
        assert got.cancel_requested and got.attempts[0].outcome == tasks_pb2.ATTEMPT_OUTCOME_FAILED
        assert len(got.attempts) == 1 and await hist.timers(task_id) == {}
