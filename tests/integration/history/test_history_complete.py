"""CompleteTasks and RecordHeartbeats: fenced by the lease epoch, retries
with backoff, FAILED with the final error once attempts are spent."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.worker.v1 import worker_pb2 as wpb

from .helpers import eventually, unique

ERR = tasks_pb2.TaskError(error_class="IOError", message="disk on fire", stack="Traceback ...\nIOError")


async def test_success_stores_the_result_and_closes_everything(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app)
    leased = await hist.lease_one(app)
    r = await hist.complete_one(leased, "SUCCEEDED", result_json=b'{"thumb":"s3://x"}')
    assert r.accepted and r.state == tasks_pb2.TASK_STATE_SUCCEEDED
    got = await hist.get(task_id, tenant)
    assert json_format.MessageToDict(got.result) == {"thumb": "s3://x"}
    assert got.HasField("finished_at") and not got.HasField("error") and got.version == 3
    (att,) = got.attempts
    assert att.outcome == tasks_pb2.ATTEMPT_OUTCOME_SUCCEEDED and att.HasField("finished_at")
    assert await hist.timers(task_id) == {}
    assert await hist.log(task_id) == [(1, None, "ENQUEUED", 0), (2, "ENQUEUED", "LEASED", 1),
                                       (3, "LEASED", "SUCCEEDED", 1)]



async def test_only_what_the_task_row_cannot_say_is_logged(hist):
    """Migrations 0008 and 0010: a first lease's success logs no row (the task row implies its
    create, lease and success); a second attempt's success logs its failed first attempt and its
    own end, each with its lease. The views read the same log and attempts either way."""
    tenant, app = unique("t"), unique("app")
    first = await hist.create_one(tenant, app)
    leased = await hist.lease_one(app, worker="agent-1")
    assert (await hist.complete_one(leased, "SUCCEEDED", result_json=b"1")).accepted
    second = await hist.create_one(tenant, app, base_s=0.01)
    leased = await hist.lease_one(app, worker="agent-2")
    assert (await hist.complete_one(leased, "FAILED", error=ERR)).accepted
    await hist.fire_until_state(second, tenant, "ENQUEUED")
    leased = await hist.lease_one(app, worker="agent-3")
    assert (await hist.complete_one(leased, "SUCCEEDED", result_json=b"2")).accepted
    stored = await hist.sql(1, "SELECT task_id, version, to_state, worker_id FROM task_log "
                               "WHERE task_id = ANY($1::uuid[]) ORDER BY version", [first, second])
    assert [(str(r["task_id"]), r["version"], r["to_state"], r["worker_id"]) for r in stored] == [
        (second, 3, "RETRY_WAIT", "agent-2"), (second, 4, "ENQUEUED", None), (second, 6, "SUCCEEDED", "agent-3")]
    assert await hist.log(first) == [(1, None, "ENQUEUED", 0), (2, "ENQUEUED", "LEASED", 1),
                                     (3, "LEASED", "SUCCEEDED", 1)]
    assert [s for _, _, s, _ in await hist.log(second)] == ["ENQUEUED", "LEASED", "RETRY_WAIT", "ENQUEUED",
                                                           "LEASED", "SUCCEEDED"]
    got = await hist.get(first, tenant)
    (att,) = got.attempts
    assert (att.attempt, att.lease_epoch, att.worker_id, att.outcome) == (
        1, 1, "agent-1", tasks_pb2.ATTEMPT_OUTCOME_SUCCEEDED)
    assert att.started_at == got.started_at and att.finished_at == got.finished_at
    got = await hist.get(second, tenant)
    assert [(a.attempt, a.worker_id, a.outcome) for a in got.attempts] == [
        (1, "agent-2", tasks_pb2.ATTEMPT_OUTCOME_FAILED), (2, "agent-3", tasks_pb2.ATTEMPT_OUTCOME_SUCCEEDED)]


async def test_a_stale_epoch_completion_is_rejected_and_changes_nothing(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app)
    leased = await hist.lease_one(app)
    before = await hist.snapshot(task_id)
    for epoch in (leased.lease_epoch - 1, leased.lease_epoch + 1):
        for outcome in ("SUCCEEDED", "FAILED", "CANCELED", "CRASHED"):
            r = await hist.complete_one(leased, outcome, epoch=epoch, result_json=b"1")
            assert not r.accepted and r.state == tasks_pb2.TASK_STATE_LEASED and "stale" in r.reason
    assert await hist.snapshot(task_id) == before


async def test_a_paused_worker_completing_after_its_lease_expired_is_rejected(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, base_s=0.01)
    old = await hist.lease_one(app, lease_s=0.2)
    await hist.fire_until_state(task_id, tenant, "ENQUEUED")  # expired, waited out the backoff
    new = await hist.lease_one(app, lease_s=30)
    assert new.lease_epoch == old.lease_epoch + 1 and new.attempt == 2
    before = await hist.snapshot(task_id)
    late = await hist.complete_one(old, "SUCCEEDED", result_json=b'"late"')
    assert not late.accepted and late.state == tasks_pb2.TASK_STATE_LEASED
    assert await hist.snapshot(task_id) == before
    (hb,) = await hist.heartbeat((task_id, old.lease_epoch))
    assert hb.action == wpb.LEASE_ACTION_LEASE_LOST
    assert await hist.snapshot(task_id) == before
    assert (await hist.complete_one(new, "SUCCEEDED", result_json=b'"ok"')).accepted


async def test_a_failure_waits_the_backoff_then_is_leased_again(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, base_s=0.2)
    first = await hist.lease_one(app)
    r = await hist.complete_one(first, "FAILED", error=ERR)
    assert r.accepted and r.state == tasks_pb2.TASK_STATE_RETRY_WAIT
    timers = await hist.timers(task_id)
    assert set(timers) == {"retry"} and timers["retry"]["lease_epoch"] == 1
    got = await hist.get(task_id, tenant)
    assert got.attempts[0].outcome == tasks_pb2.ATTEMPT_OUTCOME_FAILED
    assert got.attempts[0].error == ERR and not got.HasField("error")  # the task error shows once final
    await hist.fire_until_state(task_id, tenant, "ENQUEUED")
    second = await hist.lease_one(app)
    assert (second.attempt, second.lease_epoch) == (2, 2)
    assert [s for _, _, s, _ in await hist.log(task_id)] == ["ENQUEUED", "LEASED", "RETRY_WAIT", "ENQUEUED",
                                                            "LEASED"]


async def test_retry_after_overrides_the_backoff(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, base_s=3600)
    leased = await hist.lease_one(app)
    c = wpb.Completion(task_id=task_id, lease_epoch=leased.lease_epoch, outcome=wpb.COMPLETION_OUTCOME_FAILED,
                     error=ERR)
    c.retry_after.FromMilliseconds(100)
    await hist.complete(c)
    await hist.fire_until_state(task_id, tenant, "ENQUEUED", timeout=3)


@pytest.mark.parametrize("kw", [dict(fatal=True), dict(error=tasks_pb2.TaskError(error_class="ValueError"))])
async def test_fatal_and_non_retryable_errors_fail_at_once(hist, kw):
    tenant, app = unique("t"), unique("app")
    t = hist.task(tenant, app)
    t.non_retryable.append("ValueError")
    await hist.create(t)
    leased = await hist.lease_one(app)
    r = await hist.complete_one(leased, "FAILED", **{"error": ERR, **kw})
    assert r.state == tasks_pb2.TASK_STATE_FAILED


async def test_exhausted_tasks_keep_payload_and_final_error(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, max_attempts=2, base_s=0.01, payload=b'{"order":42}')
    first = await hist.lease_one(app)
    await hist.complete_one(first, "CRASHED")
    await hist.fire_until_state(task_id, tenant, "ENQUEUED")
    second = await hist.lease_one(app)
    r = await hist.complete_one(second, "FAILED", error=ERR)
    assert r.state == tasks_pb2.TASK_STATE_FAILED
    got = await hist.get(task_id, tenant)
    assert got.error == ERR and json_format.MessageToDict(got.payload) == {"order": 42}
    assert [a.outcome for a in got.attempts] == [tasks_pb2.ATTEMPT_OUTCOME_CRASHED, tasks_pb2.ATTEMPT_OUTCOME_FAILED]
    assert got.attempts[0].error.error_class == "SandboxCrashed"
    assert got.attempt == got.max_attempts == 2 and got.HasField("finished_at")
    assert await hist.timers(task_id) == {}


async def test_one_completion_per_task_counts_in_a_batch(hist):
    tenant, app = unique("t"), unique("app")
    await hist.create(hist.task(tenant, app), hist.task(tenant, app))
    a, b = (await hist.lease(app, max_tasks=2)).tasks
    ok = wpb.Completion(task_id=a.task_id, lease_epoch=a.lease_epoch, outcome=wpb.COMPLETION_OUTCOME_SUCCEEDED)
    dup = wpb.Completion(task_id=a.task_id, lease_epoch=a.lease_epoch, outcome=wpb.COMPLETION_OUTCOME_FAILED)
    other = wpb.Completion(task_id=b.task_id, lease_epoch=b.lease_epoch, outcome=wpb.COMPLETION_OUTCOME_FAILED,
                           error=ERR)
    r = await hist.complete(ok, dup, other)
    assert [x.accepted for x in r] == [True, False, True]
    assert [x.state for x in r] == [tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_SUCCEEDED,
                                    tasks_pb2.TASK_STATE_RETRY_WAIT]


async def test_heartbeats_extend_the_lease_and_the_lazy_timer_keeps_up(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app)
    leased = await hist.lease_one(app, lease_s=0.4)
    (timer_before,) = await hist.sql(1, "SELECT fire_at FROM timers WHERE task_id = $1::uuid", task_id)
    rounds = 0

    async def survived_three_leases() -> bool:
        nonlocal rounds
        (hb,) = await hist.heartbeat((task_id, leased.lease_epoch), lease_s=0.4)
        assert hb.action == wpb.LEASE_ACTION_CONTINUE
        await hist.fire()
        rounds += 1
        return rounds >= 12
    await eventually(survived_three_leases, 10, every=0.1)  # ~1.2 s: three lease lengths
    assert await hist.state(task_id, tenant) == "LEASED"
    (timer_after,) = await hist.sql(1, "SELECT fire_at FROM timers WHERE task_id = $1::uuid", task_id)
    assert timer_after["fire_at"] > timer_before["fire_at"]  # rescheduled by the timer, not by heartbeats
    assert await hist.log(task_id) == [(1, None, "ENQUEUED", 0), (2, "ENQUEUED", "LEASED", 1)]


async def test_stale_heartbeats_are_lease_lost_and_change_nothing(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app)
    leased = await hist.lease_one(app)
    before = await hist.snapshot(task_id)
    results = await hist.heartbeat((task_id, leased.lease_epoch + 1), (task_id, 0))
    assert [r.action for r in results] == [wpb.LEASE_ACTION_LEASE_LOST] * 2
    assert await hist.snapshot(task_id) == before


async def test_lease_expiry_retries_until_attempts_are_spent_then_fails(hist):
    tenant, app = unique("t"), unique("app")
    task_id = await hist.create_one(tenant, app, max_attempts=3, base_s=0.01)
    for attempt in (1, 2, 3):
        leased = await hist.lease_one(app, lease_s=0.15)
        assert leased.attempt == attempt
        want = "ENQUEUED" if attempt < 3 else "FAILED"
        await hist.fire_until_state(task_id, tenant, want)
    got = await hist.get(task_id, tenant)
    assert got.error.error_class == "LeaseExpired" and got.attempt == 3
    assert [a.outcome for a in got.attempts] == [tasks_pb2.ATTEMPT_OUTCOME_LEASE_EXPIRED] * 3
    assert [a.lease_epoch for a in got.attempts] == [1, 2, 3]


async def test_a_mixed_batch_of_successes_and_failures_closes_every_attempt(hist):
    """Every outcome of one batch is applied with its attempt end, timers and checkpoint."""
    tenant, app = unique("t"), unique("app")
    # No retry due meanwhile: history fires its own timers, and a full-jitter backoff of 60 s
    # can be due at once.
    await hist.create(*[hist.task(tenant, app, base_s=60, jitter=False) for _ in range(40)])
    leased = list((await hist.lease(app, max_tasks=40, lease_s=30)).tasks)
    comps = [wpb.Completion(task_id=t.task_id, lease_epoch=t.lease_epoch, result_json=b'{"i":1}',
                          checkpoint_json=b'{"at":9}' if i % 3 == 0 else None,
                          outcome=wpb.COMPLETION_OUTCOME_SUCCEEDED if i % 2 else wpb.COMPLETION_OUTCOME_FAILED,
                          error=None if i % 2 else ERR)
             for i, t in enumerate(leased)]
    r = await hist.complete(*comps)
    assert all(x.accepted for x in r)
    for i, (t, x) in enumerate(zip(leased, r, strict=True)):
        assert x.state == (tasks_pb2.TASK_STATE_SUCCEEDED if i % 2 else tasks_pb2.TASK_STATE_RETRY_WAIT)
        got = await hist.get(t.task_id, tenant)
        assert got.attempts[0].HasField("finished_at") and got.version == 3
        if i % 3 == 0:
            assert json_format.MessageToDict(got.checkpoint) == {"at": 9}
        assert set(await hist.timers(t.task_id)) == (set() if i % 2 else {"retry"})


async def test_one_batch_applies_each_completion_its_own_values(hist):
    """task_transition_apply takes a column as one element when the batch shares it: a batch of
    successes alike stores its result on every task, and a mixed batch keeps each task's own
    outcome, result and error (a shared column must never leak into a row that differs)."""
    tenant, app = unique("t"), unique("app")
    ids = [await hist.create_one(tenant, app, base_s=60, jitter=False) for _ in range(5)]  # (no retry meanwhile)
    leased = sorted((await hist.lease(app, max_tasks=5)).tasks, key=lambda t: t.task_id)
    assert sorted(ids) == [t.task_id for t in leased]

    def c(t, outcome, **kw):
        return wpb.Completion(shard_id=t.shard_id, task_id=t.task_id, lease_epoch=t.lease_epoch,
                            outcome=wpb.CompletionOutcome.Value(f"COMPLETION_OUTCOME_{outcome}"), **kw)

    alike = await hist.complete(*(c(t, "SUCCEEDED", result_json=b'{"same":1}') for t in leased[:2]))
    assert [r.accepted for r in alike] == [True, True]
    mixed = await hist.complete(c(leased[2], "SUCCEEDED", result_json=b'"a"'),
                                c(leased[3], "FAILED", error=ERR),
                                c(leased[4], "SUCCEEDED", result_json=b'"b"'))
    assert [r.accepted for r in mixed] == [True, True, True]
    got = {t.task_id: await hist.get(t.task_id, tenant) for t in leased}
    for t in leased[:2]:
        assert json_format.MessageToDict(got[t.task_id].result) == {"same": 1}
        assert got[t.task_id].state == tasks_pb2.TASK_STATE_SUCCEEDED
    assert json_format.MessageToDict(got[leased[2].task_id].result) == "a"
    assert json_format.MessageToDict(got[leased[4].task_id].result) == "b"
    for t in (leased[2], leased[4]):
        assert got[t.task_id].state == tasks_pb2.TASK_STATE_SUCCEEDED and not got[t.task_id].HasField("error")
    failed = got[leased[3].task_id]
    assert failed.state == tasks_pb2.TASK_STATE_RETRY_WAIT and not failed.HasField("result")
    (att,) = failed.attempts
    assert att.outcome == tasks_pb2.ATTEMPT_OUTCOME_FAILED and att.error.message == "disk on fire"
    assert [s for _, _, s, _ in await hist.log(leased[3].task_id)] == ["ENQUEUED", "LEASED", "RETRY_WAIT"]
