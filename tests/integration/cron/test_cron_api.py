"""CronService on a real ratchet_cron database: create (validation, request
id idempotency), get, list (paged), pause, resume, delete, trigger, and the
app boundary (another app's schedule is NOT_FOUND)."""

from __future__ import annotations

import datetime as dt

import grpc
import pytest
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.internal.cron.v1 import cron_pb2 as cpb
from ratchet.libs.shardmap import new_task_id

from .conftest import CALLER, create, holds, slots, wait_for

pytestmark = pytest.mark.timeout(60)
OTHER_APP = cpb.Caller(tenant_id="tenant-1", app_id="app-2")


async def call(stub, name: str, schedule_id: str, caller=CALLER):
    req_cls = getattr(cpb, f"{name}Request")
    inner = getattr(spb, f"{name}Request")(schedule_id=schedule_id)
    return (await getattr(stub, name)(req_cls(caller=caller, request=inner), timeout=10)).response


async def test_create_get_and_defaults(cron, db):
    c = await cron()
    s = await create(c.stub, "*/5 * * * *", timezone="Europe/Berlin")
    assert s.schedule_id and s.cron == "*/5 * * * *" and s.timezone == "Europe/Berlin"
    assert s.overlap_policy == spb.OVERLAP_POLICY_ALLOW and s.state == spb.SCHEDULE_STATE_ACTIVE
    assert s.catchup_window.ToSeconds() == 0 and s.task_template.task_type == "tick"
    nxt = s.next_fire_time.ToDatetime(dt.UTC)
    assert nxt.minute % 5 == 0 and nxt.second == 0 and nxt > dt.datetime.now(dt.UTC)
    assert not s.HasField("last_fire_time") and s.last_task_id == ""
    got = (await call(c.stub, "GetSchedule", s.schedule_id)).schedule
    assert got == s
    default_tz = await create(c.stub, "0 0 * * *")
    assert default_tz.timezone == "UTC"


@pytest.mark.parametrize("kw,message", [
    (dict(cron="0 0 30 2 *"), "never fires"),
    (dict(cron="*/61 * * * *"), "step 61 in the minute field"),
    (dict(cron="* * * * * *", timezone="Moon/Base"), "unknown time zone 'Moon/Base'"),
    (dict(cron="* * * * *", catchup_window=duration_pb2.Duration(seconds=-3)), "catchup_window must be >= 0"),
    (dict(cron="* * * * *", task_type=""), "task_template.task_type is required"),
])
async def test_bad_schedules_are_refused_and_write_nothing(cron, db, kw, message):
    c = await cron()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await create(c.stub, **kw)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in err.value.details()
    assert await db.fetchval("SELECT count(*) FROM schedules") == 0


async def test_frequency_floor(cron):
    c = await cron(min_interval_s=5.0)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await create(c.stub, "*/2 * * * * *")
    assert "fires 2s apart at its closest; the smallest interval allowed is 5s" in err.value.details()
    await create(c.stub, "*/5 * * * * *")


async def test_missing_caller_is_invalid(cron):
    c = await cron()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await create(c.stub, "* * * * *", caller=cpb.Caller(tenant_id="t"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "caller" in err.value.details()


async def test_request_id_makes_create_safe_to_retry(cron, db):
    c = await cron()
    first = await create(c.stub, "0 * * * *", request_id="req-1")
    again = await create(c.stub, "0 * * * *", request_id="req-1")
    assert again.schedule_id == first.schedule_id
    other_app = await create(c.stub, "0 * * * *", request_id="req-1", caller=OTHER_APP)
    assert other_app.schedule_id != first.schedule_id  # request ids are per caller
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await create(c.stub, "30 * * * *", request_id="req-1")
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS and first.schedule_id in err.value.details()
    assert await db.fetchval("SELECT count(*) FROM schedules") == 2


async def test_other_apps_and_unknown_ids_are_not_found(cron):
    c = await cron()
    s = await create(c.stub, "0 * * * *")
    for name in ("GetSchedule", "PauseSchedule", "ResumeSchedule", "DeleteSchedule", "TriggerSchedule"):
        for sid, caller in ((s.schedule_id, OTHER_APP), ("00000000-0000-4000-8000-000000000000", CALLER),
                            ("not-a-uuid", CALLER)):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call(c.stub, name, sid, caller)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND, (name, sid)
    assert (await call(c.stub, "GetSchedule", s.schedule_id)).schedule.state == spb.SCHEDULE_STATE_ACTIVE


async def test_list_pages_through_the_apps_schedules(cron):
    c = await cron()
    ids = [(await create(c.stub, f"{i} * * * *")).schedule_id for i in range(7)]
    await create(c.stub, "0 * * * *", caller=OTHER_APP)
    seen, token = [], ""
    while True:
        req = cpb.ListSchedulesRequest(caller=CALLER, request=spb.ListSchedulesRequest(page_size=3, page_token=token))
        page = (await c.stub.ListSchedules(req, timeout=10)).response
        assert len(page.schedules) <= 3
        seen += [s.schedule_id for s in page.schedules]
        token = page.next_page_token
        if not token:
            break
    assert seen == ids
    bad = cpb.ListSchedulesRequest(caller=CALLER, request=spb.ListSchedulesRequest(page_token="garbage"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.stub.ListSchedules(bad, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in err.value.details()
    too_big = cpb.ListSchedulesRequest(caller=CALLER, request=spb.ListSchedulesRequest(page_size=501))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await c.stub.ListSchedules(too_big, timeout=10)
    assert "page_size must be 1..500" in err.value.details()


async def test_pause_stops_firing_and_resume_starts_from_the_next_occurrence(cron, mesh, db):
    c = await cron()
    s = await create(c.stub, "* * * * * *")
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) >= 1, what="first firing")
    paused = (await call(c.stub, "PauseSchedule", s.schedule_id)).schedule
    assert paused.state == spb.SCHEDULE_STATE_PAUSED and not paused.HasField("next_fire_time")
    assert (await call(c.stub, "PauseSchedule", s.schedule_id)).schedule.state == spb.SCHEDULE_STATE_PAUSED
    # A slot already being sent when the pause landed may still go out; then nothing.
    await wait_for(lambda: _none_open(db, s.schedule_id), what="open slots settled")
    count = len(mesh.tasks_of(s.schedule_id))
    await holds(lambda: len(mesh.tasks_of(s.schedule_id)) == count, 1.5, what="no firing while paused")
    resumed = (await call(c.stub, "ResumeSchedule", s.schedule_id)).schedule
    assert resumed.state == spb.SCHEDULE_STATE_ACTIVE
    resumed_at = dt.datetime.now(dt.UTC)
    assert resumed.next_fire_time.ToDatetime(dt.UTC) > resumed_at - dt.timedelta(seconds=1)
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) > count, what="firing after resume")
    # Slots missed while paused were not replayed: every task after the resume is newer than it.
    after = mesh.tasks_of(s.schedule_id)[count:]
    assert all(t.scheduled_time >= resumed.next_fire_time.ToDatetime(dt.UTC).timestamp() for t in after)
    assert (await call(c.stub, "ResumeSchedule", s.schedule_id)).schedule.next_fire_time.seconds > 0


async def _none_open(db, schedule_id: str) -> bool:
    return not any(r["state"] in ("PENDING", "BUFFERED", "SENDING") for r in await slots(db, schedule_id))


async def test_delete_removes_the_schedule_and_its_slots(cron, mesh, db):
    c = await cron()
    s = await create(c.stub, "* * * * * *")
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) >= 1, what="first firing")
    await call(c.stub, "DeleteSchedule", s.schedule_id)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call(c.stub, "GetSchedule", s.schedule_id)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert await slots(db, s.schedule_id) == []
    count = len(mesh.tasks_of(s.schedule_id))
    await holds(lambda: len(mesh.tasks_of(s.schedule_id)) == count, 1.2, what="no firing after delete")


async def test_trigger_fires_now_through_the_same_path(cron, mesh, db):
    c = await cron()
    s = await create(c.stub, "0 0 1 1 *")  # far away: only triggers fire
    before = dt.datetime.now(dt.UTC)
    resp = await call(c.stub, "TriggerSchedule", s.schedule_id)
    assert resp.task_id and not resp.skipped
    task = mesh.tasks[resp.task_id]
    assert task.schedule_id == s.schedule_id and abs(task.scheduled_time - before.timestamp()) < 2
    [row] = await slots(db, s.schedule_id)
    assert (row["kind"], row["state"], row["task_id"]) == ("TRIGGER", "FIRED", resp.task_id)
    got = (await call(c.stub, "GetSchedule", s.schedule_id)).schedule
    assert got.last_task_id == resp.task_id and got.last_fire_time.ToDatetime(dt.UTC) == row["slot"]
    again = await call(c.stub, "TriggerSchedule", s.schedule_id)
    assert again.task_id and again.task_id != resp.task_id


async def test_trigger_respects_the_overlap_policy(cron, mesh):
    c = await cron()
    skip = await create(c.stub, "0 0 1 1 *", overlap_policy=spb.OVERLAP_POLICY_SKIP)
    first = await call(c.stub, "TriggerSchedule", skip.schedule_id)
    assert first.task_id
    second = await call(c.stub, "TriggerSchedule", skip.schedule_id)
    assert second.skipped and not second.task_id
    mesh.finish(first.task_id)
    third = await call(c.stub, "TriggerSchedule", skip.schedule_id)
    assert third.task_id and not third.skipped
    buffer = await create(c.stub, "0 0 1 1 *", overlap_policy=spb.OVERLAP_POLICY_BUFFER_ONE)
    assert (await call(c.stub, "TriggerSchedule", buffer.schedule_id)).task_id
    buffered = await call(c.stub, "TriggerSchedule", buffer.schedule_id)
    assert not buffered.task_id and not buffered.skipped


async def test_trigger_refused_by_the_gateway_is_failed_precondition(cron, mesh, db):
    c = await cron()
    s = await create(c.stub, "0 0 1 1 *")
    mesh.refuse_enqueues = "task type 'tick' is not registered by the active deployment"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call(c.stub, "TriggerSchedule", s.schedule_id)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "not registered" in err.value.details()
    [row] = await slots(db, s.schedule_id)
    assert row["state"] == "FAILED" and "not registered" in row["reason"]


async def test_a_key_conflict_counts_as_the_original_task(cron, mesh, db):
    c = await cron()
    s = await create(c.stub, "0 0 1 1 *")
    mesh.conflict_with = new_task_id()
    resp = await call(c.stub, "TriggerSchedule", s.schedule_id)
    assert resp.task_id == mesh.conflict_with
    [row] = await slots(db, s.schedule_id)
    assert (row["state"], row["task_id"]) == ("FIRED", mesh.conflict_with)


async def test_health_and_reflection(cron):
    c = await cron()
    stub = health_pb2_grpc.HealthStub(c.channel)
    for name in ("", "ratchet.internal.cron.v1.CronService"):
        resp = await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_schedule_is_created_at_the_clock_reading_its_first_occurrence_came_from(cron, db, monkeypatch):
    """A slow create (a busy machine between reading the clock and inserting) must not leave
    the first occurrence at or before created_at: the fault checker's cron_slot_times found that."""
    from ratchet.services.cron import schedules as schedules_mod

    real_next_after = schedules_mod.next_after

    def slow_next_after(*args, **kwargs):
        out = real_next_after(*args, **kwargs)
        import time
        time.sleep(1.2)  # past the next second boundary before the insert
        return out

    monkeypatch.setattr(schedules_mod, "next_after", slow_next_after)
    c = await cron()
    s = await create(c.stub, "* * * * * *")
    row = await db.fetchrow("SELECT created_at FROM schedules WHERE schedule_id = $1::uuid", s.schedule_id)
    first = s.next_fire_time.ToDatetime(dt.UTC)  # the create's answer: the first occurrence
    assert row["created_at"] < first <= row["created_at"] + dt.timedelta(seconds=1)
    assert s.created_at.ToDatetime(dt.UTC) == row["created_at"]
