"""Pure decisions: what an attempt's end or a timer does to a task.

No I/O here. Inputs are a locked task row (TaskView) and facts the shard
clock already decided (lease expired, deadline passed...); outputs are
Transitions (checked against the state machine) and flag changes that the
callers apply as compare-and-set statements.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ratchet.libs.taskstate import AttemptOutcome, CancelReason, ErrorClass, TaskState
from ratchet.services.history.model import CompletionIn, ErrorInfo, SuspendIn, TaskView, TimerDue, Transition
from ratchet.services.history.policy import backoff_delay

if TYPE_CHECKING:  # (names only: the decisions import nothing of the store's I/O)
    from ratchet.services.history.store.rows import CancelCandidate, RetryCandidate

Rand = Callable[[], float]

CRASH_ERROR = ErrorInfo(ErrorClass.SANDBOX_CRASHED, "the sandbox process died while running the handler")
LEASE_EXPIRED_ERROR = ErrorInfo(ErrorClass.LEASE_EXPIRED,
                                "the worker stopped heartbeating and the lease expired")
START_TO_CLOSE_ERROR = ErrorInfo(ErrorClass.START_TO_CLOSE,
                                 "the attempt ran past its start_to_close timeout and was stopped")
SCHEDULE_TO_CLOSE_ERROR = ErrorInfo(ErrorClass.SCHEDULE_TO_CLOSE,
                                    "the task ran past its schedule_to_close timeout")
SCHEDULE_TO_START_ERROR = ErrorInfo(ErrorClass.SCHEDULE_TO_START,
                                    "the task was not started within its schedule_to_start timeout")
CANCEL_GRACE_ERROR = ErrorInfo(ErrorClass.CANCELED,
                               "the task was cancelled and the handler did not return within the grace period")

CANCELED_ERROR = ErrorInfo(ErrorClass.CANCELED, "the handler stopped after the task was cancelled")
_DEFAULT_ERRORS = {AttemptOutcome.CRASHED: CRASH_ERROR, AttemptOutcome.CANCELED: CANCELED_ERROR,
                   AttemptOutcome.LEASE_EXPIRED: LEASE_EXPIRED_ERROR}


def end_attempt(task: TaskView, outcome: AttemptOutcome, error: ErrorInfo | None, *, fatal: bool = False,
                retry_after_s: float | None = None, rand: Rand = random.random, reason: str = "") -> Transition:
    """The transition out of LEASED for an attempt that did not succeed.

    A user cancel wins (CANCELED); a schedule_to_close cancel fails the task
    (no time is left to retry); otherwise the retry policy decides between
    RETRY_WAIT and FAILED. Every attempt counts against max_attempts: it was
    charged when leased, whether or not it reported.
    """
    err = error or _DEFAULT_ERRORS.get(outcome) or ErrorInfo("Error", "the attempt failed without an error")
    base = dict(task_id=task.task_id, from_state=TaskState.LEASED, lease_epoch=task.lease_epoch,
                attempt_outcome=outcome, attempt_error=err)
    if task.cancel_reason == CancelReason.USER and not task.compensating:
        return Transition(to_state=TaskState.CANCELED, reason="canceled by user", **base)
    if task.cancel_reason == CancelReason.SCHEDULE_TO_CLOSE:
        return Transition(to_state=TaskState.FAILED, error=SCHEDULE_TO_CLOSE_ERROR,
                          reason="schedule_to_close passed", **base)
    if fatal:
        return Transition(to_state=TaskState.FAILED, error=err, reason=f"fatal error {err.error_class}", **base)
    if err.error_class in task.non_retryable:
        return Transition(to_state=TaskState.FAILED, error=err,
                          reason=f"non-retryable error {err.error_class}", **base)
    rule = task.rules.get(err.error_class)
    if rule is not None and rule.non_retryable:
        return Transition(to_state=TaskState.FAILED, error=err,
                          reason=f"non-retryable error {err.error_class} (rule)", **base)
    # A matching rule's budget and backoff replace the policy's for this failure.
    policy = rule.apply(task.retry) if rule is not None else task.retry
    max_attempts = policy.max_attempts if rule is not None and rule.max_attempts is not None else task.max_attempts
    if task.attempt >= max_attempts:
        return Transition(to_state=TaskState.FAILED, error=err,
                          reason=f"attempts exhausted ({task.attempt}/{max_attempts})", **base)
    delay = retry_after_s if retry_after_s is not None else backoff_delay(policy, task.attempt, rand)
    return Transition(to_state=TaskState.RETRY_WAIT, delay_s=max(0.0, delay), error=err,
                      reason=reason or f"attempt {task.attempt} {outcome.value.lower()}, retrying", **base)


def on_completion(task: TaskView, c: CompletionIn, *, rand: Rand = random.random,
                  cancel_seen: str | None = None) -> Transition:
    """The transition for a completion that matched the current lease; a
    checkpoint sent with it is stored by the same compare-and-set. cancel_seen: the
    cancel request an unlocked read saw (Transition.cancel_seen), for the optimistic path."""
    if c.outcome == "SUCCEEDED":
        # The common end, built whole: dataclasses.replace per completion (for the checkpoint
        # or cancel_seen) was a measurable share of history's CPU in a drain.
        return _succeeded(task, c, c.checkpoint, cancel_seen)
    t = _ended_otherwise(task, c, rand)
    if c.checkpoint is None and cancel_seen is None:
        return t
    return dataclasses.replace(t, checkpoint=c.checkpoint, cancel_seen=cancel_seen)  # (end_attempt sets neither)


def _succeeded(task: TaskView, c: CompletionIn, checkpoint: bytes | None, cancel_seen: str | None) -> Transition:
    # A success that races a cancel is still a success: the work is done.
    return Transition(task_id=task.task_id, from_state=TaskState.LEASED, to_state=TaskState.SUCCEEDED,
                      lease_epoch=task.lease_epoch, reason="succeeded", result=c.result or b"null",
                      attempt_outcome=AttemptOutcome.SUCCEEDED, checkpoint=checkpoint, cancel_seen=cancel_seen)


def _ended_otherwise(task: TaskView, c: CompletionIn, rand: Rand) -> Transition:
    """A completion other than a success: a cancel asked for, a crash or a failure. A cancelled
    run with compensations ends CANCELED by the activation that ran them, whichever lease it
    holds; its other ends are an ordinary attempt's (a retryable compensation failure retries)."""
    if c.outcome == "CANCELED" and task.compensating:
        return Transition(task_id=task.task_id, from_state=TaskState.LEASED, to_state=TaskState.CANCELED,
                          lease_epoch=task.lease_epoch, reason="canceled by user; its compensations ran",
                          attempt_outcome=AttemptOutcome.CANCELED, attempt_error=c.error or CANCELED_ERROR)
    if c.outcome == "CANCELED" and task.cancel_requested:
        if task.cancel_reason == CancelReason.USER:
            return end_attempt(task, AttemptOutcome.CANCELED, c.error, rand=rand)
        timeout = (SCHEDULE_TO_CLOSE_ERROR if task.cancel_reason == CancelReason.SCHEDULE_TO_CLOSE
                   else START_TO_CLOSE_ERROR)
        return end_attempt(task, AttemptOutcome.TIMED_OUT, timeout, rand=rand)
    if c.outcome == "CRASHED":
        return end_attempt(task, AttemptOutcome.CRASHED, c.error or CRASH_ERROR,
                           retry_after_s=c.retry_after_s, rand=rand)
    # FAILED, or CANCELED that nobody asked for (treated as a failed attempt).
    return end_attempt(task, AttemptOutcome.FAILED, c.error, fatal=c.fatal,
                       retry_after_s=c.retry_after_s, rand=rand)


WAKE_TIMER_REASON = "woken: the sleep ended or the wait timed out"


def on_suspend(task: TaskView, c: SuspendIn) -> Transition:
    """The transition for a SUSPENDED completion that matched the current lease. A cancel asked
    for while the activation ran decides first, as for any other end of an attempt: a user cancel
    ends the run CANCELED, a schedule_to_close one FAILED (its timer has fired: nothing would
    expire a WAITING run later). Otherwise the run goes WAITING (a start_to_close cancel is moot:
    the activation stopped)."""
    if task.cancel_reason == CancelReason.USER and not task.compensating:  # (compensating: woken at once)
        return end_attempt(task, AttemptOutcome.CANCELED, CANCELED_ERROR)
    if task.cancel_reason == CancelReason.SCHEDULE_TO_CLOSE:
        return end_attempt(task, AttemptOutcome.TIMED_OUT, SCHEDULE_TO_CLOSE_ERROR)
    return Transition(task_id=task.task_id, from_state=TaskState.LEASED, to_state=TaskState.WAITING,
                      lease_epoch=task.lease_epoch, reason=f"suspended at step {c.suspend_position}",
                      attempt_outcome=AttemptOutcome.SUSPENDED, checkpoint=c.checkpoint)


@dataclasses.dataclass
class TimerPlan:
    """What firing a task's due timers does, in order."""

    transitions: list[Transition] = dataclasses.field(default_factory=list)
    cancel_reason: CancelReason | None = None  # ask the running attempt to stop
    reschedule_lease: bool = False
    ready: bool = False


def _advance(task: TaskView, t: Transition) -> None:
    """Reflect an applied transition in the view, as the SQL does."""
    task.state = t.to_state
    if t.to_state in (TaskState.ENQUEUED, TaskState.RETRY_WAIT):
        task.cancel_requested, task.cancel_reason = False, None


def _fire_lease(task: TaskView, due: TimerDue, plan: TimerPlan, rand: Rand) -> Transition | None:
    if task.state != TaskState.LEASED or task.lease_epoch != due.timer_epoch:
        return None  # the lease it guarded is gone: a stale timer
    if due.kill_passed and task.cancel_requested:
        if task.cancel_reason == CancelReason.USER and task.compensating:
            return _compensations_due(task)
        if task.cancel_reason == CancelReason.USER:
            return end_attempt(task, AttemptOutcome.CANCELED, CANCEL_GRACE_ERROR, rand=rand)
        error = (SCHEDULE_TO_CLOSE_ERROR if task.cancel_reason == CancelReason.SCHEDULE_TO_CLOSE
                 else START_TO_CLOSE_ERROR)
        return end_attempt(task, AttemptOutcome.TIMED_OUT, error, rand=rand)
    if due.lease_expired:
        return end_attempt(task, AttemptOutcome.LEASE_EXPIRED, LEASE_EXPIRED_ERROR, rand=rand,
                           reason=f"lease of attempt {task.attempt} expired, retrying")
    if due.deadline_passed and not task.cancel_requested:
        plan.cancel_reason = CancelReason.START_TO_CLOSE
        task.cancel_requested, task.cancel_reason = True, CancelReason.START_TO_CLOSE
    plan.reschedule_lease = True
    return None


def _compensations_due(task: TaskView) -> Transition:
    """The kill after the cancel grace of a run with compensations: not CANCELED (they have not
    run) but RETRY_WAIT due now, so the next activation runs them; the attempt stays charged
    (out of attempts: FAILED, as any task)."""
    base = dict(task_id=task.task_id, from_state=TaskState.LEASED, lease_epoch=task.lease_epoch,
                attempt_outcome=AttemptOutcome.CANCELED, attempt_error=CANCEL_GRACE_ERROR)
    if task.attempt >= task.max_attempts:
        return Transition(to_state=TaskState.FAILED, error=CANCEL_GRACE_ERROR,
                          reason=f"attempts exhausted ({task.attempt}/{task.max_attempts}) before the "
                                 "compensations ran", **base)
    return Transition(to_state=TaskState.RETRY_WAIT, delay_s=0.0, error=CANCEL_GRACE_ERROR,
                      reason="cancelled: killed after the grace; the next activation runs its compensations",
                      **base)


def _fire_schedule_to_close(task: TaskView, plan: TimerPlan) -> Transition | None:
    if task.state in (TaskState.ENQUEUED, TaskState.RETRY_WAIT, TaskState.WAITING):
        return Transition(task_id=task.task_id, from_state=task.state, to_state=TaskState.EXPIRED,
                          lease_epoch=task.lease_epoch, reason="schedule_to_close passed",
                          error=SCHEDULE_TO_CLOSE_ERROR)
    if task.state == TaskState.LEASED and task.cancel_reason != CancelReason.USER:
        plan.cancel_reason = CancelReason.SCHEDULE_TO_CLOSE
        plan.reschedule_lease = True
        task.cancel_requested, task.cancel_reason = True, CancelReason.SCHEDULE_TO_CLOSE
    return None


def fire_timer(task: TaskView, due: TimerDue, plan: TimerPlan, *, rand: Rand = random.random) -> None:
    """Apply one due timer to the view and add its effects to the plan."""
    t: Transition | None = None
    if due.kind == "retry":
        if task.state == TaskState.RETRY_WAIT and task.lease_epoch == due.timer_epoch:
            t = Transition(task_id=task.task_id, from_state=TaskState.RETRY_WAIT, to_state=TaskState.ENQUEUED,
                           lease_epoch=task.lease_epoch, reason="retry backoff elapsed")
    elif due.kind == "delay":
        pass  # a wake-up only: readiness is run_at <= now, checked below
    elif due.kind == "schedule_to_start":
        if task.state == TaskState.ENQUEUED and task.attempt == 0:
            t = Transition(task_id=task.task_id, from_state=TaskState.ENQUEUED, to_state=TaskState.EXPIRED,
                           lease_epoch=task.lease_epoch, reason="schedule_to_start passed",
                           error=SCHEDULE_TO_START_ERROR)
    elif due.kind == "schedule_to_close":
        t = _fire_schedule_to_close(task, plan)
    elif due.kind == "lease":
        t = _fire_lease(task, due, plan, rand)
    elif due.kind == "wake":
        # A suspended run's sleep ended or its wait timed out. The epoch fences the timer to the
        # suspension that set it: a run woken, leased and suspended again has a new one.
        if task.state == TaskState.WAITING and task.lease_epoch == due.timer_epoch:
            t = Transition(task_id=task.task_id, from_state=TaskState.WAITING, to_state=TaskState.ENQUEUED,
                           lease_epoch=task.lease_epoch, reason=WAKE_TIMER_REASON)
    else:
        raise ValueError(f"unknown timer kind {due.kind!r}")
    if t is not None:
        plan.transitions.append(t)
        _advance(task, t)
    if task.state != TaskState.LEASED:
        plan.cancel_reason, plan.reschedule_lease = None, False
    plan.ready = task.state == TaskState.ENQUEUED and (due.due_now or due.kind in ("retry", "wake"))


def plan_timers(task: TaskView, dues: list[TimerDue], *, rand: Rand = random.random) -> TimerPlan:
    """Fold a task's due timers (oldest first) into one plan."""
    plan = TimerPlan()
    for due in dues:
        fire_timer(task, due, plan, rand=rand)
    return plan


def cancel_now(task_id: str, state: TaskState, lease_epoch: int, reason: str = "canceled by user") -> Transition | None:
    """A user cancel of a task that is not running (ENQUEUED/RETRY_WAIT/WAITING -> CANCELED); None
    for other states (LEASED gets a cancel request, terminal stays as it is)."""
    if state not in (TaskState.ENQUEUED, TaskState.RETRY_WAIT, TaskState.WAITING):
        return None
    return Transition(task_id=task_id, from_state=state, to_state=TaskState.CANCELED,
                      lease_epoch=lease_epoch, reason=reason)


@dataclasses.dataclass
class BulkPlan:
    """What one batch of a bulk operation does to its items."""

    retries: list[tuple[str, Transition]] = dataclasses.field(default_factory=list)  # (original, create)
    cancels: list[Transition] = dataclasses.field(default_factory=list)
    cancel_requests: list[tuple[str, int]] = dataclasses.field(default_factory=list)  # (task_id, lease_epoch)
    failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (task_id, reason)
    skipped: int = 0


def unregistered_reason(task_type: str) -> str:
    """Why a bulk retry item failed: its handler is gone."""
    return f"task type {task_type} is no longer registered by the active deployment"


def plan_bulk_retry(rows: Sequence[RetryCandidate], registered: frozenset[str], new_id: Callable[[str], str],
                    operation_id: str) -> BulkPlan:
    """Retry each terminal task as a new task (its create transition), unless
    it was retried already (skipped) or its type is no longer registered
    (failed)."""
    plan = BulkPlan()
    for r in rows:
        original = r.task_id
        if r.retried_as is not None:  # a task is retried once: a re-run skips it
            plan.skipped += 1
            continue
        if registered and r.task_type not in registered:
            plan.failures.append((original, unregistered_reason(r.task_type)))
            continue
        create = Transition(task_id=new_id(original), from_state=None, to_state=TaskState.ENQUEUED,
                            lease_epoch=0, reason=f"bulk retry of {original} (operation {operation_id})")
        plan.retries.append((original, create))
    return plan


def plan_bulk_cancel(rows: Sequence[CancelCandidate], operation_id: str) -> BulkPlan:
    """The normal cancel for each live task: waiting ones now, running ones by
    a cancel request."""
    plan = BulkPlan()
    for r in rows:
        task_id, state = r.task_id, TaskState(r.state)
        t = cancel_now(task_id, state, r.lease_epoch, f"canceled by bulk operation {operation_id}")
        if t is not None:
            plan.cancels.append(t)
        elif state == TaskState.LEASED:
            plan.cancel_requests.append((task_id, r.lease_epoch))
        else:
            plan.skipped += 1
    return plan
