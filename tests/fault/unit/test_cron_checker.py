"""The cron invariants prove they can fail: a clean crafted run with a
schedule passes every invariant (its tasks are not taken for phantoms), and
each crafted violation makes the named cron invariant fail."""

from __future__ import annotations

import uuid

from ratchet.libs.shardmap import new_task_id
from tests.fault.checker.__main__ import summary

from .histories import (
    BASE,
    Builder,
    add_schedule,
    add_scheduled_task,
    add_slot,
    clean,
    drop_slots,
    drop_task,
    iso,
    nemesis_step,
)
from .test_checker import assert_fails, task_row, verdict_of


def cron_run(**kw) -> tuple[Builder, dict, dict]:
    """The clean run of test_checker plus one schedule that fired slots BASE+1001..1010."""
    b, ids = clean()
    return b, ids, add_schedule(b, **kw)


def slot_row(b: Builder, sid: str, second: float) -> dict:
    return next(r for r in b.cron["schedule_slots"] if r["schedule_id"] == sid and r["slot"] == iso(BASE + second))


def test_clean_cron_run_passes_every_invariant():
    b, _, _sc = cron_run()
    verdict = verdict_of(b)
    assert verdict["valid"], summary(verdict)
    inv = verdict["invariants"]
    assert inv["cron_slot_tasks"]["counts"]["fired"] == 10 and inv["cron_slot_tasks"]["checked"] >= 20
    assert inv["cron_slot_times"]["checked"] == 10 and inv["cron_catchup"]["checked"] == 10
    assert inv["cron_catchup"]["counts"]["passed_over"] == 0
    outcomes = inv["enqueue_outcomes"]["counts"]
    assert outcomes["scheduled"] == 10 and outcomes["unexpected"] == 0
    # the scheduled tasks are still covered by the task invariants
    assert inv["transition_log"]["checked"] == len(b.tables["tasks"])


def test_run_without_schedules_checks_nothing_and_passes():
    b, _ = clean()
    inv = verdict_of(b)["invariants"]
    assert all(inv[n]["valid"] and inv[n]["checked"] == 0 for n in ("cron_slot_tasks", "cron_slot_times",
                                                                    "cron_catchup"))


def test_two_tasks_for_one_slot():  # (a)
    b, _, sc = cron_run()
    add_scheduled_task(b, new_task_id(), sc["schedule_id"], BASE + 1004, key=False)
    assert_fails(verdict_of(b), "cron_slot_tasks", "2 tasks for slot")


def test_fired_slot_without_its_task():  # (b)
    b, _, sc = cron_run()
    drop_task(b, sc["slots"][1005])
    assert_fails(verdict_of(b), "cron_slot_tasks", "is FIRED")


def test_fired_slot_naming_another_task():  # (b)
    b, _, sc = cron_run()
    slot_row(b, sc["schedule_id"], 1005)["task_id"] = sc["slots"][1006]
    assert_fails(verdict_of(b), "cron_slot_tasks", "names task")


def test_task_of_a_fired_slot_not_terminal():
    b, _, sc = cron_run()
    tid = sc["slots"][1003]
    b.tables["task_transitions"] = [r for r in b.tables["task_transitions"]
                                    if not (r["task_id"] == tid and r["to_state"] == "SUCCEEDED")]
    task_row(b, tid).update(state="LEASED", version=2)
    assert_fails(verdict_of(b), "cron_slot_tasks", "still LEASED")


def test_task_for_a_slot_never_recorded():
    b, _, sc = cron_run()
    add_scheduled_task(b, new_task_id(), sc["schedule_id"], BASE + 1020)
    assert_fails(verdict_of(b), "cron_slot_tasks", "never recorded")


def test_task_of_a_schedule_nobody_created_is_unexpected():
    b, _, _ = cron_run()
    add_scheduled_task(b, new_task_id(), str(uuid.uuid4()), BASE + 1004)
    assert_fails(verdict_of(b), "enqueue_outcomes", "which this run never created")


def test_slot_left_open_or_refused():
    b, _, sc = cron_run()
    add_slot(b, sc["schedule_id"], 1011, None, state="SENDING")
    add_slot(b, sc["schedule_id"], 1000.3, None, state="FAILED", kind="TRIGGER")
    res = assert_fails(verdict_of(b), "cron_slot_tasks", "still SENDING after quiescence")
    assert any("FAILED" in c["problem"] for c in res["counterexamples"])


def test_slot_that_is_not_an_occurrence():  # (c)
    b, _, sc = cron_run()
    add_slot(b, sc["schedule_id"], 1003.5, new_task_id())
    assert_fails(verdict_of(b), "cron_slot_times", "is not an occurrence")


def test_slot_before_the_schedule_was_created():  # (c)
    b, _, sc = cron_run()
    add_slot(b, sc["schedule_id"], 999, new_task_id(), claimed=0.02)
    assert_fails(verdict_of(b), "cron_slot_times", "not after the schedule's creation")


def test_slot_recorded_after_the_pause():  # (c)
    b, _, sc = cron_run()
    add_slot(b, sc["schedule_id"], 1011, new_task_id())
    assert_fails(verdict_of(b), "cron_slot_times", "after the pause")


def test_task_scheduled_time_differs_from_its_slot():  # (c)
    b, _, sc = cron_run()
    task_row(b, sc["slots"][1004])["scheduled_time"] = iso(BASE + 1005)
    assert_fails(verdict_of(b), "cron_slot_times", "carries schedule")


def test_gap_outside_the_policy():  # (d)
    b, _, sc = cron_run()
    drop_slots(b, sc["schedule_id"], range(1004, 1009))  # the fire loop idled 5 s with nothing wrong
    res = assert_fails(verdict_of(b), "cron_catchup", "5 occurrence(s)")
    assert "passed over outside the catch-up policy" in res["counterexamples"][0]["problem"]


def test_gap_while_the_only_cron_process_was_down_is_allowed():  # (d), robust to the kill window
    b, _, sc = cron_run()
    drop_slots(b, sc["schedule_id"], range(1004, 1009))
    slot_row(b, sc["schedule_id"], 1009)["kind"] = "CATCHUP"
    nemesis_step(b, 0, "kill-cron", 1003.8, 1006.0)
    verdict = verdict_of(b)
    assert verdict["valid"], summary(verdict)
    counts = verdict["invariants"]["cron_catchup"]["counts"]
    assert counts["passed_over_explained"] == 5 and counts["explained_by"] == {"kill-cron": 5}


def test_killing_one_of_two_cron_processes_explains_no_gap():  # (d)
    b, _, sc = cron_run()
    drop_slots(b, sc["schedule_id"], range(1004, 1009))
    nemesis_step(b, 0, "kill-cron2", 1003.8, 1006.0)
    b.meta["cron"]["processes"] = 2
    assert_fails(verdict_of(b), "cron_catchup", "passed over")


def test_missed_slots_replayed_after_downtime():  # (d), never every missed tick
    b, _, sc = cron_run()
    sid = sc["schedule_id"]
    nemesis_step(b, 0, "kill-cron", 1003.8, 1005.0)  # heal + recovery ends at 1011
    for k in range(1004, 1010):  # all recorded together once cron was back, 6 s after the first
        row = slot_row(b, sid, k)
        row.update(created_at=iso(BASE + 1012 + (k - 1004) * 0.01), finished_at=iso(BASE + 1012.5))
    add_slot(b, sid, 1011, new_task_id(), claimed=1.2)  # ...then kept firing
    drop_slots(b, sid, [1010])
    b.cron["schedules"][0]["updated_at"] = iso(BASE + 1013)
    b.history = [e for e in b.history if e.get("f") != "schedule_pause"]
    b.op("cron_admin", "schedule_pause", {"schedule_id": sid}, "ok", {"schedule_id": sid, "updated_at":
                                                                      iso(BASE + 1013)})
    assert_fails(verdict_of(b), "cron_catchup", "a missed slot was replayed")


def test_cron_stopped_firing_before_the_pause():  # (d), the tail
    b, _, sc = cron_run()
    drop_slots(b, sc["schedule_id"], range(1006, 1011))
    assert_fails(verdict_of(b), "cron_catchup", "the pause at")


def test_expression_the_checker_cannot_read_fails_rather_than_passes():
    b, _, _sc = cron_run(cron="0 * * * * *")
    assert_fails(verdict_of(b), "cron_catchup", "cannot evaluate")


def test_scheduled_tasks_still_obey_the_state_machine():
    b, _, sc = cron_run()
    tid = sc["slots"][1002]
    b.tables["task_transitions"].append({"task_id": tid, "version": 4, "from_state": "SUCCEEDED",
                                         "to_state": "ENQUEUED", "lease_epoch": 1, "at": "x", "reason": "?"})
    task_row(b, tid).update(state="ENQUEUED", version=4)
    assert_fails(verdict_of(b), "transition_log", "after terminal")


def test_claim_stalled_by_a_paused_cron_process_is_allowed():
    b, _, sc = cron_run()
    row = slot_row(b, sc["schedule_id"], 1005)  # clock read at 1005.1, then SIGSTOP, insert at 1007.4
    row.update(created_at=iso(BASE + 1007.4), finished_at=iso(BASE + 1007.5))
    drop_slots(b, sc["schedule_id"], [1006, 1007])
    nemesis_step(b, 0, "pause-cron", 1005.05, 1007.3)
    verdict = verdict_of(b)
    assert verdict["valid"], summary(verdict)
    b.history = [e for e in b.history if not str(e.get("f")).startswith("pause-cron")]
    assert_fails(verdict_of(b), "cron_catchup", "a missed slot was replayed")
