"""Invariants over the acknowledged enqueues and each task's durable record:
P1 (acked means terminal) and P2 (state only moves forward)."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from .. import statemachine as sm
from ..core import Result, invariant
from ..model import Run


@invariant("acked_terminal", "P1")
def acked_terminal(run: Run, res: Result) -> None:
    """Every acknowledged enqueue has a task in some shard, and it is terminal (lost = 0, stuck = 0)."""
    res.counts.update({"acked": 0, "lost": 0, "stuck": 0})
    for item in run.items:
        if not item.op.ok:
            continue
        res.checked += 1
        res.count("acked")
        task = run.dump.tasks.get(item.task_id) if item.task_id else None
        if task is None:
            res.count("lost")
            res.violation("lost: the enqueue was acknowledged but no shard holds the task",
                          item.task_id, op=item.op.brief())
        elif not sm.is_terminal(task.state):
            res.count("stuck")
            res.violation(f"stuck: acknowledged task is still {task.state} after heal and quiescence",
                          item.task_id)
        else:
            res.count(f"final_{task.state}")
            if task.op_id is not None and task.op_id != item.op_id:
                res.violation(f"the ack for request {item.op_id} names the task of request {task.op_id}",
                              item.task_id, op=item.op.brief())


@invariant("enqueue_outcomes", "P1")
def enqueue_outcomes(run: Run, res: Result) -> None:
    """Ambiguous enqueues are absent or terminal; failed enqueues wrote nothing; no task nobody asked for
    (a task a schedule of this run fired was asked for by that schedule)."""
    by_op = run.dump.task_by_op()
    items_by_op = defaultdict(list)
    for item in run.items:
        items_by_op[item.op_id].append(item)
    res.counts.update({"ambiguous": 0, "ambiguous_absent": 0, "ambiguous_terminal": 0, "failed": 0,
                       "unexpected": 0, "duplicate_unkeyed_enqueues": 0})
    for op_id, items in items_by_op.items():
        tasks = by_op.get(op_id, [])
        kinds = {i.op.type for i in items}
        res.checked += 1
        minted = {i.request.get("minted_id") for i in items} - {None}
        if len(tasks) > 1:
            if any(i.key for i in items) or minted:
                res.violation(f"request {op_id} ({'keyed' if not minted else 'task id minted by the client'}) "
                              f"created {len(tasks)} tasks", tasks[0].task_id, tasks=[t.task_id for t in tasks])
            else:  # unkeyed enqueues are at-least-once across a lost ack (design Q1)
                res.count("duplicate_unkeyed_enqueues", len(tasks) - 1)
        for task in tasks:
            if minted and task.task_id not in minted:
                res.violation(f"request {op_id} was sent as task {sorted(minted)[0]} but its task is "
                              f"{task.task_id}", task.task_id)
        if "ok" in kinds:
            continue  # acked_terminal owns these
        if "info" in kinds:
            res.count("ambiguous")
            if not tasks:
                res.count("ambiguous_absent")
            for task in tasks:
                if sm.is_terminal(task.state):
                    res.count("ambiguous_terminal")
                else:
                    res.violation(f"ambiguous enqueue {op_id} is present but {task.state}", task.task_id)
        else:
            res.count("failed")
            for task in tasks:
                res.violation(f"enqueue {op_id} failed definitely yet wrote a task", task.task_id,
                              op=items[0].op.brief())
    if run.meta.get("closed_world", True):
        schedules = run.created_schedules()
        res.counts["scheduled"] = 0
        for task in run.dump.tasks.values():
            if task.schedule_id is not None and task.schedule_id in schedules:
                # Cron enqueued it for a schedule the harness created: the cron invariants match it
                # to its slot; the log, lease and timer invariants still cover it like any task.
                res.count("scheduled")
                continue
            if task.op_id is None or task.op_id not in items_by_op:
                res.count("unexpected")
                res.violation("unexpected task: no client operation asked for it"
                              + (f" (it names schedule {task.schedule_id}, which this run never created)"
                                 if task.schedule_id else ""), task.task_id)


def _log_problems(run: Run, task_id: str) -> list[str]:
    """Every way this task's log breaks the state machine (empty when it is sound)."""
    log = run.dump.transitions.get(task_id, [])
    task = run.dump.tasks.get(task_id)
    if task is None:
        return ["transition log of a task that has no row"]
    if not log:
        return ["task has no transition log"]
    problems = []
    versions = [t.version for t in log]
    seen = set()
    for v in versions:
        if v in seen:
            problems.append(f"fork: two transitions with version {v}")
        seen.add(v)
    if sorted(seen) != list(range(1, len(seen) + 1)):
        problems.append(f"versions are not consecutive from 1: {versions}")
    prev = None
    for t in log:
        expected_from = prev.to_state if prev else None
        if prev is not None and sm.is_terminal(prev.to_state):
            problems.append(f"v{t.version} {t.from_state}->{t.to_state} after terminal {prev.to_state}")
        if prev is not None and prev.version == t.version:
            pass  # already reported as a fork
        elif t.from_state != expected_from:
            problems.append(f"v{t.version} starts from {t.from_state} but the task was {expected_from}")
        if not sm.allowed(t.from_state, t.to_state):
            problems.append(f"v{t.version} {t.from_state or '(create)'}->{t.to_state} is not allowed")
        prev = t
    if log[-1].to_state != task.state:
        problems.append(f"the log ends in {log[-1].to_state} but the task row says {task.state}")
    if task.version is not None and task.version != len(log):
        problems.append(f"the task row has version {task.version} but the log has {len(log)} transitions")
    return problems


@invariant("transition_log", "P2")
def transition_log(run: Run, res: Result) -> None:
    """Each log follows the state machine: versions 1..n, no fork, nothing after a terminal state."""
    for task_id, shards in run.dump.duplicate_rows:
        res.violation(f"the task is on several shards: {shards}", task_id)
    for task_id in sorted(set(run.dump.tasks) | set(run.dump.transitions)):
        res.checked += 1
        for problem in _log_problems(run, task_id):
            res.violation(problem, task_id)


@invariant("lease_epochs", "P3")
def lease_epochs(run: Run, res: Result) -> None:
    """Lease epochs never decrease, and each new lease gets a higher one than any before."""
    for task_id, log in run.dump.transitions.items():
        res.checked += 1
        high = None
        for t in log:
            if t.lease_epoch is None:
                continue
            if high is not None and t.lease_epoch < high:
                res.violation(f"v{t.version} carries lease epoch {t.lease_epoch} after {high}", task_id)
            if t.to_state == "LEASED" and high is not None and t.lease_epoch <= high:
                res.violation(f"v{t.version} leased with epoch {t.lease_epoch}, not above {high}", task_id)
            high = t.lease_epoch if high is None else max(high, t.lease_epoch)
        task = run.dump.tasks.get(task_id)
        if task is not None and task.lease_epoch is not None and high is not None and task.lease_epoch != high:
            res.violation(f"the task row's lease epoch {task.lease_epoch} is not the log's last {high}", task_id)
        epochs = [a.lease_epoch for a in run.dump.attempts.get(task_id, []) if a.lease_epoch is not None]
        if any(b <= a for a, b in pairwise(epochs)):
            res.violation(f"attempt epochs do not increase with the attempt number: {epochs}", task_id)


@invariant("attempt_accounting", "P3")
def attempt_accounting(run: Run, res: Result) -> None:
    """Attempts are charged at lease time: one attempt per lease, numbered 1..n, never above max_attempts."""
    for task_id, task in run.dump.tasks.items():
        res.checked += 1
        leases = [t for t in run.dump.transitions.get(task_id, []) if t.to_state == "LEASED"]
        attempts = run.dump.attempts.get(task_id, [])
        if task.attempt is not None and task.attempt != len(leases):
            res.violation(f"{len(leases)} leases but the task row has charged {task.attempt} attempts", task_id)
        if [a.attempt for a in attempts] != list(range(1, len(attempts) + 1)) or len(attempts) != len(leases):
            res.violation(f"attempt rows {[a.attempt for a in attempts]} do not match {len(leases)} leases",
                          task_id)
        for lease, att in zip(leases, attempts, strict=True):
            if None not in (lease.lease_epoch, att.lease_epoch) and lease.lease_epoch != att.lease_epoch:
                res.violation(f"attempt {att.attempt} has epoch {att.lease_epoch}, its lease had {lease.lease_epoch}",
                              task_id)
        if task.max_attempts is not None and task.attempt is not None and task.attempt > task.max_attempts:
            res.violation(f"{task.attempt} attempts charged, over max_attempts {task.max_attempts}", task_id)
        open_ = [a.attempt for a in attempts if a.outcome in (None, "RUNNING", "UNSPECIFIED")]
        allowed_open = 1 if task.state == "LEASED" else 0
        if len(open_) > allowed_open or (open_ and attempts and open_[-1] != attempts[-1].attempt):
            res.violation(f"attempts {open_} never got an outcome (task is {task.state})", task_id)
