"""What attempt ends and timers do to a task (pure decisions, no I/O)."""

from __future__ import annotations

import dataclasses

import pytest

from ratchet.libs.taskstate import AttemptOutcome as O
from ratchet.libs.taskstate import CancelReason as R
from ratchet.libs.taskstate import ErrorClass
from ratchet.libs.taskstate import TaskState as S
from ratchet.services.history.decide import on_completion, plan_timers
from ratchet.services.history.model import CompletionIn, ErrorInfo, TaskView, TimerDue
from ratchet.services.history.policy import Retry

HALF = lambda: 0.5  # noqa: E731 - a fixed jitter draw keeps delays exact


def view(**kw) -> TaskView:
    base = dict(task_id="t1", state=S.LEASED, lease_epoch=3, attempt=1, max_attempts=3,
                retry=Retry(base_s=2.0, factor=2.0, cap_s=100.0), non_retryable=frozenset({"ValueError"}),
                cancel_requested=False, cancel_reason=None)
    base.update(kw)
    return TaskView(**base)


def done(outcome, **kw) -> CompletionIn:
    return CompletionIn(task_id="t1", lease_epoch=3, outcome=outcome, **kw)


def due(kind, epoch=3, **facts) -> TimerDue:
    f = dict(due_now=True, lease_expired=False, deadline_passed=False, kill_passed=False)
    f.update(facts)
    return TimerDue(task_id="t1", kind=kind, timer_epoch=epoch, **f)


def test_success_stores_result_even_when_a_cancel_raced_it():
    for v in (view(), view(cancel_requested=True, cancel_reason=R.USER)):
        t = on_completion(v, done("SUCCEEDED", result=b'{"ok":1}'))
        assert (t.to_state, t.result, t.attempt_outcome) == (S.SUCCEEDED, b'{"ok":1}', O.SUCCEEDED)
        assert t.lease_epoch == 3


def test_checkpoint_and_cancel_seen_ride_on_every_kind_of_end():
    """The optimistic path's cancel_seen and a completion's checkpoint reach the transition
    whatever the outcome (a success is built whole, the others are copied with them)."""
    v = view(cancel_requested=True, cancel_reason=R.USER)
    ok = on_completion(v, done("SUCCEEDED", checkpoint=b'{"c":1}'), cancel_seen=v.cancel_seen)
    assert (ok.to_state, ok.result, ok.checkpoint, ok.cancel_seen) == (
        S.SUCCEEDED, b"null", b'{"c":1}', "requested:user")
    bad = on_completion(view(), done("FAILED", error=ErrorInfo("IOError"), checkpoint=b"2"), rand=HALF,
                        cancel_seen="")
    assert (bad.to_state, bad.checkpoint, bad.cancel_seen) == (S.RETRY_WAIT, b"2", "")
    gone = on_completion(v, done("CANCELED"), cancel_seen=v.cancel_seen)
    assert (gone.to_state, gone.checkpoint, gone.cancel_seen) == (S.CANCELED, None, "requested:user")
    bare = on_completion(view(), done("SUCCEEDED"))
    assert (bare.checkpoint, bare.cancel_seen) == (None, None)


def test_failure_with_attempts_left_waits_a_jittered_backoff():
    t = on_completion(view(attempt=2), done("FAILED", error=ErrorInfo("IOError", "boom", "tb")), rand=HALF)
    assert t.to_state == S.RETRY_WAIT and t.delay_s == pytest.approx(2.0)  # 0.5 * min(100, 2*2^1)
    assert t.attempt_outcome == O.FAILED and t.attempt_error == ErrorInfo("IOError", "boom", "tb")
    assert t.error == t.attempt_error


def test_retry_after_overrides_the_backoff():
    t = on_completion(view(), done("FAILED", error=ErrorInfo("E"), retry_after_s=7.0), rand=HALF)
    assert t.delay_s == 7.0


def test_exhausted_fatal_and_non_retryable_fail_at_once():
    err = ErrorInfo("IOError", "m", "stack")
    exhausted = on_completion(view(attempt=3), done("FAILED", error=err))
    assert exhausted.to_state == S.FAILED and exhausted.error == err and "exhausted" in exhausted.reason
    fatal = on_completion(view(), done("FAILED", error=ErrorInfo("BadInput"), fatal=True))
    assert fatal.to_state == S.FAILED
    listed = on_completion(view(), done("FAILED", error=ErrorInfo("ValueError")))
    assert listed.to_state == S.FAILED and "non-retryable" in listed.reason


def test_crash_retries_like_a_failure_with_a_platform_error_class():
    t = on_completion(view(), done("CRASHED"), rand=HALF)
    assert t.to_state == S.RETRY_WAIT and t.attempt_outcome == O.CRASHED
    assert t.attempt_error.error_class == ErrorClass.SANDBOX_CRASHED


def test_user_cancel_turns_any_non_success_into_canceled():
    v = view(cancel_requested=True, cancel_reason=R.USER)
    assert on_completion(v, done("CANCELED")).to_state == S.CANCELED
    t = on_completion(v, done("FAILED", error=ErrorInfo("IOError")))
    assert t.to_state == S.CANCELED and t.attempt_outcome == O.FAILED


def test_timeout_cancels_count_as_timed_out_attempts():
    s2c = on_completion(view(cancel_requested=True, cancel_reason=R.START_TO_CLOSE), done("CANCELED"), rand=HALF)
    assert s2c.to_state == S.RETRY_WAIT and s2c.attempt_outcome == O.TIMED_OUT
    assert s2c.attempt_error.error_class == ErrorClass.START_TO_CLOSE
    total = on_completion(view(cancel_requested=True, cancel_reason=R.SCHEDULE_TO_CLOSE), done("CANCELED"))
    assert total.to_state == S.FAILED and total.error.error_class == ErrorClass.SCHEDULE_TO_CLOSE


def test_unrequested_cancel_outcome_is_a_failed_attempt():
    t = on_completion(view(), done("CANCELED"), rand=HALF)
    assert t.to_state == S.RETRY_WAIT and t.attempt_outcome == O.FAILED


def test_retry_timer_requeues_only_its_own_wait():
    p = plan_timers(view(state=S.RETRY_WAIT), [due("retry")])
    assert [(t.from_state, t.to_state) for t in p.transitions] == [(S.RETRY_WAIT, S.ENQUEUED)] and p.ready
    stale = plan_timers(view(state=S.RETRY_WAIT), [due("retry", epoch=2)])
    assert stale.transitions == [] and not stale.ready


def test_delay_timer_only_wakes():
    p = plan_timers(view(state=S.ENQUEUED, attempt=0), [due("delay")])
    assert p.transitions == [] and p.ready
    assert not plan_timers(view(state=S.LEASED), [due("delay")]).ready


def test_lease_timer_reschedules_an_extended_lease_and_drops_stale_ones():
    p = plan_timers(view(), [due("lease")])
    assert p.transitions == [] and p.reschedule_lease and p.cancel_reason is None
    assert not plan_timers(view(), [due("lease", epoch=2)]).reschedule_lease
    assert not plan_timers(view(state=S.SUCCEEDED), [due("lease")]).reschedule_lease


def test_lease_expiry_retries_then_fails_when_attempts_are_spent():
    p = plan_timers(view(attempt=1), [due("lease", lease_expired=True)], rand=HALF)
    (t,) = p.transitions
    assert t.to_state == S.RETRY_WAIT and t.attempt_outcome == O.LEASE_EXPIRED
    assert t.attempt_error.error_class == ErrorClass.LEASE_EXPIRED
    (last,) = plan_timers(view(attempt=3), [due("lease", lease_expired=True)]).transitions
    assert last.to_state == S.FAILED and last.error.error_class == ErrorClass.LEASE_EXPIRED


def test_an_attempt_revoked_after_its_grace_counts_like_any_other():
    """Attempts are charged at lease: one that never reported (revoked at the kill time after a
    start_to_close cancel) exhausts the task too. (tests/fault/mutants removes this guard.)"""
    v = view(attempt=3, cancel_requested=True, cancel_reason=R.START_TO_CLOSE)
    (t,) = plan_timers(v, [due("lease", kill_passed=True)], rand=HALF).transitions
    assert t.to_state == S.FAILED and t.attempt_outcome == O.TIMED_OUT and "exhausted" in t.reason


def test_attempt_deadline_requests_a_cancel_then_the_kill_revokes():
    p = plan_timers(view(), [due("lease", deadline_passed=True)])
    assert p.cancel_reason == R.START_TO_CLOSE and p.reschedule_lease and p.transitions == []
    v = view(cancel_requested=True, cancel_reason=R.START_TO_CLOSE)
    (t,) = plan_timers(v, [due("lease", deadline_passed=True, kill_passed=True)], rand=HALF).transitions
    assert t.to_state == S.RETRY_WAIT and t.attempt_outcome == O.TIMED_OUT


def test_user_cancel_revoked_after_grace_is_canceled():
    v = view(cancel_requested=True, cancel_reason=R.USER)
    (t,) = plan_timers(v, [due("lease", kill_passed=True)]).transitions
    assert t.to_state == S.CANCELED and t.attempt_outcome == O.CANCELED


def test_schedule_to_start_expires_only_never_started_tasks():
    (t,) = plan_timers(view(state=S.ENQUEUED, attempt=0), [due("schedule_to_start")]).transitions
    assert t.to_state == S.EXPIRED and t.error.error_class == ErrorClass.SCHEDULE_TO_START
    assert plan_timers(view(state=S.ENQUEUED, attempt=1), [due("schedule_to_start")]).transitions == []


def test_schedule_to_close_expires_waiting_tasks_and_cancels_running_ones():
    for state in (S.ENQUEUED, S.RETRY_WAIT):
        (t,) = plan_timers(view(state=state), [due("schedule_to_close")]).transitions
        assert t.to_state == S.EXPIRED and t.error.error_class == ErrorClass.SCHEDULE_TO_CLOSE
    p = plan_timers(view(), [due("schedule_to_close")])
    assert p.cancel_reason == R.SCHEDULE_TO_CLOSE and p.reschedule_lease
    user = plan_timers(view(cancel_requested=True, cancel_reason=R.USER), [due("schedule_to_close")])
    assert user.cancel_reason is None  # the user's cancel keeps deciding the outcome


def test_timers_of_one_task_fold_in_order():
    # The lease expired and schedule_to_close passed at once: retrying is pointless.
    p = plan_timers(view(), [due("schedule_to_close"), due("lease", lease_expired=True)])
    assert [t.to_state for t in p.transitions] == [S.FAILED] and p.cancel_reason is None
    # The other order: the expiry retries, then the total timeout expires the wait.
    p = plan_timers(view(), [due("lease", lease_expired=True), due("schedule_to_close")], rand=HALF)
    assert [(t.from_state, t.to_state) for t in p.transitions] == [(S.LEASED, S.RETRY_WAIT),
                                                                   (S.RETRY_WAIT, S.EXPIRED)]
    # A retry that fires with a schedule_to_close: requeued, then expired; not ready.
    p = plan_timers(view(state=S.RETRY_WAIT), [due("retry"), due("schedule_to_close")])
    assert [t.to_state for t in p.transitions] == [S.ENQUEUED, S.EXPIRED] and not p.ready


def test_every_decided_transition_keeps_the_locked_epoch():
    for v in (view(), dataclasses.replace(view(), cancel_requested=True, cancel_reason=R.USER)):
        for outcome in ("SUCCEEDED", "FAILED", "CANCELED", "CRASHED"):
            assert on_completion(v, done(outcome), rand=HALF).lease_epoch == v.lease_epoch
