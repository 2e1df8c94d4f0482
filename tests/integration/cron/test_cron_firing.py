"""Firing on a real ratchet_cron database against a fake gateway and history:
one task per slot with its scheduled time, two fire loops at once, crashes
between the steps (a pending slot is re-sent and deduplicated), gateway
outages, catch-up after downtime, and each overlap policy with tasks that
outlast their interval."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from itertools import pairwise

import pytest

from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.api.tasks.v1 import tasks_pb2

from .conftest import create, fired, holds, slots, wait_for

pytestmark = pytest.mark.timeout(60)
UTC = dt.UTC


def no_silent_gap(times: list[float], schedule_id: str, log_text: str) -> bool:
    """Per-second slots are consecutive, except where the service logged that it passed slots over
    (a loop so late, on a loaded machine, that a newer slot was already due)."""
    for a, b in pairwise(times):
        first_missing = dt.datetime.fromtimestamp(a + 1, UTC).isoformat()
        if b - a != 1 and f"schedule {schedule_id}: missed slots from {first_missing}" not in log_text:
            return False
    return True


async def test_each_slot_fires_once_with_its_scheduled_time(cron, mesh, db, caplog):
    caplog.set_level(logging.INFO, logger="ratchet.services.cron")
    c = await cron()
    s = await create(c.stub, "* * * * * *")
    recorded = await wait_for(lambda: _at_least(fired(db, s.schedule_id), 3), what="three recorded firings")
    tasks = {t.scheduled_time: t for t in mesh.tasks_of(s.schedule_id)}
    times = sorted(recorded)
    assert all(t == int(t) for t in times) and no_silent_gap(times, s.schedule_id, caplog.text), times
    for slot, task_id in recorded.items():
        assert tasks[slot].task_id == task_id and tasks[slot].request.task_type == "tick"
    assert all(n == 1 for n in mesh.sends_of(s.schedule_id).values())


async def _at_least(rows_coro, n: int):
    rows = await rows_coro
    return rows if len(rows) >= n else None


async def test_two_fire_loops_never_fire_a_slot_twice(cron, mesh, db, caplog):
    caplog.set_level(logging.INFO, logger="ratchet.services.cron")
    a, b = await cron(), await cron()
    schedules = [await create((a if i % 2 else b).stub, "* * * * * *") for i in range(6)]
    await wait_for(lambda: all(len(mesh.tasks_of(s.schedule_id)) >= 3 for s in schedules), timeout=15,
                   what="three firings of every schedule")
    for s in schedules:
        times = [t.scheduled_time for t in mesh.tasks_of(s.schedule_id)]
        assert len(times) == len(set(times)) and no_silent_gap(times, s.schedule_id, caplog.text), times
        # Each slot was sent once: the decision holds a send lease, so the other loop never re-sent it.
        assert set(mesh.sends_of(s.schedule_id).values()) == {1}
    claimed = await db.fetch("SELECT schedule_id, slot, count(*) AS n FROM schedule_slots GROUP BY 1, 2 "
                             "HAVING count(*) > 1")
    assert claimed == []


async def test_crash_after_enqueue_before_recording_resends_the_same_task(cron, mesh, db):
    crashed = asyncio.Event()

    async def crash_once(name):
        if not crashed.is_set():
            crashed.set()
            raise RuntimeError("simulated crash between EnqueueScheduled and recording it")

    a = await cron(hooks={"slot_mark_fired": crash_once})
    s = await create(a.stub, "* * * * * *")
    await wait_for(crashed.is_set, what="the crash")
    await a.stop()
    [open_slot] = [r for r in await slots(db, s.schedule_id) if r["state"] != "FIRED"]
    assert open_slot["state"] == "SENDING"
    key = f"sched:{s.schedule_id}@{open_slot['slot'].strftime('%Y-%m-%dT%H:%M:%SZ')}"
    first_task = mesh.by_key[key]
    assert mesh.enqueue_calls[key] == 1
    await cron()  # another process takes over once the send lease (send_lease_s, 2 s here) ends
    await wait_for(lambda: mesh.enqueue_calls[key] == 2, timeout=10, what="the re-send")
    row = await wait_for(lambda: _fired(db, s.schedule_id, open_slot["slot"]), what="slot recorded as fired")
    assert row["task_id"] == first_task
    assert [t.task_id for t in mesh.tasks_of(s.schedule_id) if t.scheduled_time == open_slot["slot"].timestamp()] \
        == [first_task]
    # Firing carries on after the recovered slot.
    await wait_for(lambda: max(t.scheduled_time for t in mesh.tasks_of(s.schedule_id)) > open_slot["slot"].timestamp(),
                   what="later slots")


async def _fired(db, schedule_id, slot):
    row = await db.fetchrow("SELECT * FROM schedule_slots WHERE schedule_id = $1 AND slot = $2", schedule_id, slot)
    return row if row and row["state"] == "FIRED" else None


async def test_crash_before_the_decision_leaves_a_pending_slot_another_process_delivers(cron, mesh, db):
    crashed = asyncio.Event()

    async def crash(name):
        # Every time, in this process: its delivery loop retries on its next tick, and a
        # crash that happened once could be decided by that retry before a.stop() (a race
        # seen under load); this process is the one that crashes, the next one delivers.
        crashed.set()
        raise RuntimeError("simulated crash after recording the slot, before deciding it")

    a = await cron(hooks={"slot_decide": crash})
    s = await create(a.stub, "0 0 1 1 *")
    await db.execute("UPDATE schedules SET next_fire_time = clock_timestamp() + interval '0.1 second' "
                     "WHERE schedule_id = $1", s.schedule_id)
    await wait_for(crashed.is_set, what="the crash")
    await a.stop()
    [pending] = await slots(db, s.schedule_id)
    assert pending["state"] == "PENDING" and mesh.sends_of(s.schedule_id) == {}
    await cron()
    row = await wait_for(lambda: _fired(db, s.schedule_id, pending["slot"]), what="delivery by the new process")
    assert set(mesh.sends_of(s.schedule_id).values()) == {1} and row["task_id"] in mesh.tasks


async def test_gateway_outage_is_retried_and_fires_once(cron, mesh, db):
    mesh.fail_enqueues = 3
    c = await cron()
    s = await create(c.stub, "0 0 1 1 *")
    await db.execute("UPDATE schedules SET next_fire_time = clock_timestamp() + interval '0.1 second' "
                     "WHERE schedule_id = $1", s.schedule_id)
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) == 1, what="the firing after the outage")
    [row] = await slots(db, s.schedule_id)
    await wait_for(lambda: _fired(db, s.schedule_id, row["slot"]), what="recorded")
    assert list(mesh.sends_of(s.schedule_id).values()) == [4]


async def _stopped_with_next_fire_moved_back(cron, db, hours: int, **kw):
    c = await cron()
    s = await create(c.stub, "0 * * * *", **kw)
    await c.stop()
    await db.execute("UPDATE schedules SET next_fire_time = next_fire_time - make_interval(hours => $2) "
                     "WHERE schedule_id = $1", s.schedule_id, hours)
    return s


async def test_catch_up_fires_only_the_most_recent_missed_slot(cron, mesh, db):
    s = await _stopped_with_next_fire_moved_back(cron, db, 5, catchup_window=_duration(2 * 3600))
    await cron()
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) == 1, what="one catch-up")
    now = dt.datetime.now(UTC)
    hour_start = now.replace(minute=0, second=0, microsecond=0)
    [row] = await slots(db, s.schedule_id)
    assert row["kind"] == "CATCHUP" and row["slot"] == hour_start
    assert mesh.tasks_of(s.schedule_id)[0].scheduled_time == hour_start.timestamp()
    nxt = await db.fetchval("SELECT next_fire_time FROM schedules WHERE schedule_id = $1", s.schedule_id)
    assert nxt == hour_start + dt.timedelta(hours=1)
    await holds(lambda: len(mesh.tasks_of(s.schedule_id)) == 1, 0.5, what="no replay of the other missed slots")


async def test_downtime_beyond_the_catch_up_window_fires_nothing(cron, mesh, db):
    now = dt.datetime.now(UTC)
    into_hour = now.minute * 60 + now.second
    # Within the 60 s window (plus the time a loaded machine takes to get there) of the hour,
    # the hour's own slot is a catch-up this test must not see.
    if into_hour > 3590 or into_hour < 60 + 60:
        pytest.skip("too close to the hour for this hourly schedule")
    s = await _stopped_with_next_fire_moved_back(cron, db, 5, catchup_window=_duration(60))
    await cron()
    nxt = await wait_for(lambda: _next_fire_after_now(db, s.schedule_id), what="schedule moved past the gap")
    assert nxt == now.replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=1)
    assert await slots(db, s.schedule_id) == [] and mesh.tasks_of(s.schedule_id) == []


async def _next_fire_after_now(db, schedule_id):
    return await db.fetchval("SELECT next_fire_time FROM schedules WHERE schedule_id = $1 "
                             "AND next_fire_time > clock_timestamp()", schedule_id)


def _duration(seconds: int):
    from google.protobuf import duration_pb2
    return duration_pb2.Duration(seconds=seconds)


# -- overlap policies: the fake's tasks stay ENQUEUED (running) until finished ---
async def test_allow_fires_every_slot_while_earlier_tasks_run(cron, mesh):
    c = await cron()
    s = await create(c.stub, "* * * * * *", overlap_policy=spb.OVERLAP_POLICY_ALLOW)
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) >= 3, what="three firings")
    assert all(t.state == tasks_pb2.TASK_STATE_ENQUEUED for t in mesh.tasks_of(s.schedule_id))
    assert mesh.get_calls == 0  # allow never reads the previous task


async def test_skip_does_not_fire_while_the_previous_task_runs(cron, mesh, db):
    c = await cron()
    s = await create(c.stub, "* * * * * *", overlap_policy=spb.OVERLAP_POLICY_SKIP)
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) == 1, what="first firing")
    await wait_for(lambda: _count(db, s.schedule_id, "SKIPPED", 2), what="two skipped slots")
    assert len(mesh.tasks_of(s.schedule_id)) == 1
    skipped = [r for r in await slots(db, s.schedule_id) if r["state"] == "SKIPPED"]
    assert "still running" in skipped[0]["reason"]
    mesh.finish(mesh.tasks_of(s.schedule_id)[0].task_id)
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) == 2, what="firing after the task finished")


async def test_cancel_previous_cancels_the_running_task_then_fires(cron, mesh):
    c = await cron()
    s = await create(c.stub, "* * * * * *", overlap_policy=spb.OVERLAP_POLICY_CANCEL_PREVIOUS)
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) >= 3, what="three firings")
    tasks = mesh.tasks_of(s.schedule_id)
    assert [t.task_id for t in tasks[:2]] == mesh.cancels[:2]
    assert all(t.state == tasks_pb2.TASK_STATE_CANCELED for t in tasks[:-1])


async def test_buffer_one_keeps_one_slot_and_fires_it_when_the_previous_task_ends(cron, mesh, db):
    c = await cron()
    s = await create(c.stub, "* * * * * *", overlap_policy=spb.OVERLAP_POLICY_BUFFER_ONE)
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) == 1, what="first firing")
    await wait_for(lambda: _count(db, s.schedule_id, "SKIPPED", 1), what="a slot skipped behind the buffer")
    buffered = [r for r in await slots(db, s.schedule_id) if r["state"] == "BUFFERED"]
    assert len(buffered) == 1 and len(mesh.tasks_of(s.schedule_id)) == 1
    mesh.finish(mesh.tasks_of(s.schedule_id)[0].task_id)
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) == 2, what="the buffered slot fired")
    second = mesh.tasks_of(s.schedule_id)[1]
    assert second.scheduled_time == buffered[0]["slot"].timestamp()  # its own slot, not the time it ran
    # The new task outlasts the next slots too: one is buffered again, the rest skipped.
    await wait_for(lambda: _count(db, s.schedule_id, "BUFFERED", 1), what="buffered again")
    assert len(mesh.tasks_of(s.schedule_id)) == 2


async def _count(db, schedule_id, state, at_least):
    return await db.fetchval("SELECT count(*) FROM schedule_slots WHERE schedule_id = $1 AND state = $2",
                             schedule_id, state) >= at_least


async def test_two_processes_deciding_buffer_one_keep_at_most_one_buffered_slot(cron, mesh, db):
    a = await cron()
    await cron()  # a second process deciding the same slots
    s = await create(a.stub, "* * * * * *", overlap_policy=spb.OVERLAP_POLICY_BUFFER_ONE)
    await wait_for(lambda: len(mesh.tasks_of(s.schedule_id)) == 1, what="first firing")
    states = "SELECT count(*) FILTER (WHERE state = 'BUFFERED') AS b, count(*) FILTER (WHERE state = 'SKIPPED') AS s " \
             "FROM schedule_slots WHERE schedule_id = $1"
    for _ in range(2):
        skipped = (await db.fetchrow(states, s.schedule_id))["s"]

        async def buffered_and_one_more_skipped(skipped=skipped):
            row = await db.fetchrow(states, s.schedule_id)
            assert row["b"] <= 1, "two slots buffered at once"
            return row["b"] == 1 and row["s"] > skipped
        await wait_for(buffered_and_one_more_skipped, what="a buffered slot and one skipped behind it")
        n = len(mesh.tasks_of(s.schedule_id))
        mesh.finish(mesh.tasks_of(s.schedule_id)[-1].task_id)
        await wait_for(lambda n=n: len(mesh.tasks_of(s.schedule_id)) == n + 1, what="the buffered slot fired")
    assert set(mesh.sends_of(s.schedule_id).values()) == {1}
    times = [t.scheduled_time for t in mesh.tasks_of(s.schedule_id)]
    assert times == sorted(set(times))


async def test_prune_deletes_finished_slots_past_retention(cron, mesh, db):
    c = await cron()
    s = await create(c.stub, "* * * * * *")
    await wait_for(lambda: _at_least(fired(db, s.schedule_id), 2), what="two recorded firings")
    await c.server.api.store.pool.execute(
        "UPDATE schedule_slots SET finished_at = finished_at - interval '2 days' WHERE schedule_id = $1 "
        "AND finished_at IS NOT NULL", s.schedule_id)
    async with c.server.store.tx() as tx:
        deleted = await tx.slot_prune(86400, 1000)
    assert deleted >= 2
    assert all(r["finished_at"] is None or r["finished_at"] > dt.datetime.now(UTC) - dt.timedelta(days=1)
               for r in await slots(db, s.schedule_id))


async def test_an_idle_fire_loop_only_reads_and_claims_once_a_schedule_is_due(cron, mesh, db):
    # Every look asks when something is due, outside any transaction; the claim (a
    # transaction with FOR UPDATE SKIP LOCKED) runs only when the answer is now.
    seen: list[str] = []

    async def record(name: str) -> None:
        seen.append(name)
    c = await cron(hooks={"schedule_next_due": record, "schedule_claim_due": record})
    await wait_for(lambda: seen.count("schedule_next_due") >= 3, what="three idle looks")
    assert "schedule_claim_due" not in seen, seen
    s = await create(c.stub, "* * * * * *")
    await wait_for(lambda: _at_least(fired(db, s.schedule_id), 1), what="a recorded firing")
    assert "schedule_claim_due" in seen


async def test_an_idle_cron_looks_every_idle_interval_and_a_new_schedule_fires_on_time(cron, mesh, db):
    # Nothing is due or open: both loops wait idle_interval_s (here 30 s; the fire loop at most
    # half the misfire grace) between looks. A schedule created here wakes the fire loop, which
    # then sleeps exactly until it is due.
    c = await cron(idle_interval_s=30.0, misfire_grace_s=60.0)
    await wait_for(lambda: c.server.fire.looks >= 1 and c.server.deliver.looks >= 1, what="start-up's first looks")
    fire0, deliver0 = c.server.fire.looks, c.server.deliver.looks
    await asyncio.sleep(1.0)  # a window: at the 0.05 s tick it would hold ~20 looks of each loop
    assert c.server.fire.looks == fire0 and c.server.deliver.looks == deliver0, \
        (c.server.fire.looks - fire0, c.server.deliver.looks - deliver0)
    s = await create(c.stub, "* * * * * *")
    t0 = time.monotonic()
    await wait_for(lambda: _at_least(fired(db, s.schedule_id), 2), what="two firings", timeout=6)
    assert time.monotonic() - t0 < 3.5  # on time each second, not after the 30 s idle wait
