"""Invariants over cron schedules (P6): each slot fires at most once and every
slot recorded FIRED has exactly one task; slots are occurrences of their
schedule inside its life; and occurrences are passed over only as the
catch-up policy allows (docs/architecture.md, cron: "only the most recent slot
<= now may fire, and only if it is at most max(catchup_window,
misfire_grace_s) old; older missed slots are never replayed").

A task a schedule fired is not a client's enqueue: `enqueue_outcomes` leaves
it to these checks (it is matched to its slot here), while the log, lease,
attempt, execution and timer invariants cover it like any other task."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from .. import statemachine as sm
from ..core import Result, invariant
from ..cronmodel import OPEN_STATES, CronView, Every, Schedule, Slot, disturbances, overlapping, when
from ..model import Run

# The fire loop claims every tick_interval_s (0.2 s); a claim this much later than the
# moment the schedule became claimable, with no fault to explain it, passed slots over.
# The rest of the allowance is a loaded 2-core machine (healthy runs measure < 0.2 s:
# `max_claim_lag_s` in the counts). A per-second schedule may so lose one tick to a
# stall, never two.
MAX_CLAIM_LAG_S = 1.5
# A claim reads the clock, then inserts the slot (created_at): the gap between the two.
CLAIM_SLACK_S = 1.0
ALLOW = "ALLOW"


def _unsupported(res: Result, sc: Schedule) -> None:
    res.violation(f"schedule {sc.schedule_id}: the checker cannot evaluate {sc.cron!r} in {sc.timezone} "
                  "(it knows '*/N * * * * *' in UTC, N dividing 60)")


@invariant("cron_slot_tasks", "P6")
def cron_slot_tasks(run: Run, res: Result) -> None:
    """At most one task per (schedule_id, scheduled_time) over all shards; each FIRED slot has exactly its
    task, terminal at quiescence; each scheduled task has its FIRED slot; no slot left open or refused."""
    view = CronView(run)
    res.counts.update({"slots": 0, "fired": 0, "skipped": 0, "failed": 0, "open": 0, "scheduled_tasks": 0,
                       "stuck": 0})
    by_key: dict[tuple, list] = defaultdict(list)
    for task in run.dump.tasks.values():
        if task.schedule_id is not None:
            by_key[(task.schedule_id, when(task.scheduled_time))].append(task)
    for (sid, at), tasks in sorted(by_key.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        res.count("scheduled_tasks", len(tasks))
        if len(tasks) > 1:  # (a)
            ids = sorted(t.task_id for t in tasks)
            res.violation(f"{len(tasks)} tasks for slot {at} of schedule {sid}: a slot fired twice", ids[0],
                          task_ids=ids)
    for sid in view.created:
        if sid not in view.schedules:
            res.violation(f"schedule {sid} was created (acknowledged) but the cron database does not hold it")
    for sc in view.schedules.values():
        for slot in sc.slots:
            res.checked += 1
            res.count("slots")
            _check_slot(run, res, sc, slot, by_key.get((sc.schedule_id, slot.slot), []))
    for (sid, at), tasks in by_key.items():
        slot = view.slot(sid, at)
        for task in tasks:
            res.checked += 1
            if sid not in view.created:
                res.violation(f"task carries schedule_id {sid}, a schedule this run never created", task.task_id)
            elif slot is None:
                res.violation(f"task for slot {at} of schedule {sid}, which the cron database never recorded",
                              task.task_id)


def _check_slot(run: Run, res: Result, sc: Schedule, slot: Slot, tasks: list) -> None:
    ids = sorted(t.task_id for t in tasks)
    if slot.state == "FIRED":  # (b)
        res.count("fired")
        if not tasks:
            res.violation(f"slot {slot.slot} of schedule {sc.schedule_id} is FIRED (task {slot.task_id}) but no "
                          "shard holds a task for it", slot.task_id, slot=slot.brief())
            return
        if slot.task_id not in ids:
            res.violation(f"FIRED slot {slot.slot} names task {slot.task_id} but the shards hold {ids} for it",
                          ids[0], slot=slot.brief())
        task = run.dump.tasks.get(slot.task_id)
        if task is not None:
            res.count(f"final_{task.state}")
        if task is not None and not sm.is_terminal(task.state):
            res.count("stuck")
            res.violation(f"the task of FIRED slot {slot.slot} is still {task.state} after quiescence",
                          task.task_id, slot=slot.brief())
        return
    if tasks:
        res.violation(f"slot {slot.slot} is {slot.state} but the shards hold task(s) {ids} for it", ids[0],
                      slot=slot.brief())
    if slot.state in OPEN_STATES:
        res.count("open")
        res.violation(f"slot {slot.slot} of schedule {sc.schedule_id} is still {slot.state} after quiescence "
                      f"({slot.reason or 'no reason recorded'})", slot=slot.brief())
    elif slot.state == "FAILED":
        res.count("failed")
        res.violation(f"slot {slot.slot} was refused for good (FAILED: {slot.reason}); the template is valid, so "
                      "a fault was taken for a refusal and the slot is lost", slot=slot.brief())
    elif slot.state == "SKIPPED":
        res.count("skipped")
        if sc.overlap_policy == ALLOW and slot.reason != "schedule paused":
            res.violation(f"slot {slot.slot} SKIPPED ({slot.reason}) under overlap policy allow", slot=slot.brief())


@invariant("cron_slot_times", "P6")
def cron_slot_times(run: Run, res: Result) -> None:
    """Every slot is an occurrence of its schedule's expression (triggers aside), after the schedule's
    creation, recorded no earlier than its time and before the pause; its task carries that schedule_id
    and exactly that scheduled_time."""
    view = CronView(run)
    for slot in view.orphan_slots:
        res.violation(f"slot {slot.slot} of schedule {slot.schedule_id}, which the cron database does not hold",
                      slot=slot.brief())
    for sc in view.schedules.values():
        every = Every.parse(sc.cron, sc.timezone)
        if every is None:
            _unsupported(res, sc)
        created = sc.created_at or when((view.created.get(sc.schedule_id) or {}).get("created_at"))
        for slot in sc.slots:
            res.checked += 1
            for problem in _slot_time_problems(sc, slot, every, created):
                res.violation(problem, slot.task_id, slot=slot.brief())
            if slot.state == "FIRED":
                task = run.dump.tasks.get(slot.task_id or "")
                if task is not None and (task.schedule_id != sc.schedule_id or when(task.scheduled_time) != slot.slot):
                    res.violation(f"the task of slot {slot.slot} of schedule {sc.schedule_id} carries schedule "
                                  f"{task.schedule_id} at {task.scheduled_time}", task.task_id, slot=slot.brief())


def _slot_time_problems(sc: Schedule, slot: Slot, every: Every | None, created: dt.datetime | None) -> list[str]:
    out = []
    trigger = slot.kind == "TRIGGER"
    if every is not None and not trigger and not every.is_occurrence(slot.slot):
        out.append(f"slot {slot.slot} is not an occurrence of {sc.cron!r}")
    if created is not None and (slot.slot < created if trigger else slot.slot <= created):
        out.append(f"slot {slot.slot} is not after the schedule's creation at {created}")
    if slot.created_at is not None and slot.created_at < slot.slot - dt.timedelta(milliseconds=1):
        out.append(f"slot {slot.slot} was recorded at {slot.created_at}, before its time")
    if sc.paused_at is not None and slot.created_at is not None and slot.created_at > sc.paused_at:
        out.append(f"slot {slot.slot} was recorded at {slot.created_at}, after the pause at {sc.paused_at}")
    return out


@invariant("cron_catchup", "P6")
def cron_catchup(run: Run, res: Result) -> None:
    """Occurrences are passed over only as the catch-up policy allows: a claim records the latest
    occurrence due (at most max(catchup_window, misfire_grace) old, never an older one), and an
    occurrence goes unrecorded only while the schedule could not be claimed."""
    view = CronView(run)
    windows = disturbances(run, view.processes)
    res.counts.update({"claims": 0, "catchup_kind": 0, "passed_over": 0, "passed_over_tolerated": 0,
                       "passed_over_explained": 0, "max_claim_lag_s": 0.0, "explained_by": {}})
    # max_claim_lag_s: the longest wait from claimable to claimed with no fault around it
    for sc in view.schedules.values():
        every = Every.parse(sc.cron, sc.timezone)
        if every is None:
            _unsupported(res, sc)
            continue
        if sc.created_at is not None:
            _check_schedule(res, view, sc, every, windows)


def _check_schedule(res: Result, view: CronView, sc: Schedule, every: Every, windows) -> None:
    """Walk the slots in order. `ready` is when the schedule could next be claimed: its next
    occurrence was due and no slot of it was open (a PENDING or SENDING slot blocks claims)."""
    previous, ready = sc.created_at, every.next_after(sc.created_at)
    for slot in (s for s in sc.slots if s.kind != "TRIGGER"):
        res.checked += 1
        res.count("claims")
        res.count("catchup_kind", int(slot.kind == "CATCHUP"))
        if slot.created_at is not None:
            if not overlapping(windows, ready, slot.created_at):
                lag = (slot.created_at - ready).total_seconds()
                res.counts["max_claim_lag_s"] = round(max(res.counts["max_claim_lag_s"], lag), 3)
            _check_claim_took_latest(res, view, sc, every, slot, windows)
            missed = [o for o in every.between(previous, slot.slot) if o >= ready]
            _check_passed_over(res, sc, missed, ready, slot.created_at, windows, f"slot {slot.slot}")
        previous = slot.slot
        if slot.finished_at is None:
            return  # still open: it blocks the schedule (cron_slot_tasks reports it)
        ready = max(every.next_after(slot.slot), slot.finished_at)
    if sc.paused_at is not None and sc.paused_at > ready:
        cutoff = sc.paused_at - dt.timedelta(seconds=MAX_CLAIM_LAG_S)
        missed = [o for o in every.between(previous, cutoff) if o >= ready]
        _check_passed_over(res, sc, missed, ready, sc.paused_at, windows, f"the pause at {sc.paused_at}")


def _check_claim_took_latest(res: Result, view: CronView, sc: Schedule, every: Every, slot: Slot,
                             windows) -> None:
    claim = slot.created_at
    newer = every.next_after(slot.slot)
    late = (claim - slot.slot).total_seconds()
    window = view.window_s(sc)
    stale = newer + dt.timedelta(seconds=CLAIM_SLACK_S) < claim
    # Only a paused cron process stretches one claim between its clock read and its insert; a kill
    # or a database fault aborts the claim instead, so downtime never excuses an old slot.
    stalls = windows if windows is None else [w for w in windows if w[2].startswith("pause-cron")]
    if (stale or late > window + CLAIM_SLACK_S) and not overlapping(stalls, slot.slot, claim):
        res.violation(f"slot {slot.slot} of schedule {sc.schedule_id} was recorded {late:.2f}s late, at {claim}: "
                      f"a claim records only the latest occurrence due ({newer} was due by then), and only if it "
                      f"is at most {window:g}s old: a missed slot was replayed", slot.task_id, slot=slot.brief())


def _check_passed_over(res: Result, sc: Schedule, missed: list, ready: dt.datetime, claim: dt.datetime, windows,
                       what: str) -> None:
    if not missed:
        return
    res.count("passed_over", len(missed))
    lag = (claim - ready).total_seconds()
    why = overlapping(windows, ready, claim)
    if why:
        res.count("passed_over_explained", len(missed))
        for name in sorted(set(why)):
            res.counts["explained_by"][name] = res.counts["explained_by"].get(name, 0) + len(missed)
        return
    if lag <= MAX_CLAIM_LAG_S:
        res.count("passed_over_tolerated", len(missed))
        return
    res.violation(f"schedule {sc.schedule_id} could be claimed from {ready} but the next claim came only with "
                  f"{what}, {lag:.1f}s later, with no fault to explain it: {len(missed)} occurrence(s) "
                  f"{missed[0]}..{missed[-1]} passed over outside the catch-up policy",
                  missed=[m.isoformat() for m in missed[:10]])
