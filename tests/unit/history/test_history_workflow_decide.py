"""Workflow runs in history's pure parts: what a suspension, a wake timer, a timeout and a cancel
decide for a WAITING run, and how workflow requests are checked (no I/O)."""

from __future__ import annotations

import pytest
from google.protobuf.duration_pb2 import Duration

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.shardmap import new_task_id
from ratchet.libs.taskstate import AttemptOutcome as O
from ratchet.libs.taskstate import CancelReason as R
from ratchet.libs.taskstate import TaskState as S
from ratchet.services.history.decide import cancel_now, on_suspend, plan_bulk_cancel, plan_timers
from ratchet.services.history.errors import InvalidArgument
from ratchet.services.history.model import SuspendIn, TaskView, TimerDue
from ratchet.services.history.policy import Retry, duration
from ratchet.services.history.store.rows import CancelCandidate
from ratchet.services.history.workflows import convert


def view(**kw) -> TaskView:
    base = dict(task_id="t1", state=S.LEASED, lease_epoch=3, attempt=1, max_attempts=3, retry=Retry(),
                non_retryable=frozenset(), cancel_requested=False, cancel_reason=None)
    base.update(kw)
    return TaskView(**base)


def due(kind: str, epoch: int = 3) -> TimerDue:
    return TimerDue(task_id="t1", kind=kind, timer_epoch=epoch, due_now=True, lease_expired=False,
                    deadline_passed=False, kill_passed=False)


SUSPEND = SuspendIn(task_id="t1", lease_epoch=3, outcome="SUSPENDED", suspend_position=4, wake_after_s=2.0)


def test_a_suspension_goes_waiting_with_its_attempt_suspended():
    t = on_suspend(view(), SUSPEND)
    assert (t.from_state, t.to_state, t.attempt_outcome, t.lease_epoch) == (S.LEASED, S.WAITING, O.SUSPENDED, 3)
    assert "step 4" in t.reason
    # A start_to_close cancel is moot once the activation stopped.
    assert on_suspend(view(cancel_requested=True, cancel_reason=R.START_TO_CLOSE), SUSPEND).to_state == S.WAITING


def test_a_cancel_asked_for_while_the_activation_ran_decides_its_suspension():
    user = on_suspend(view(cancel_requested=True, cancel_reason=R.USER), SUSPEND)
    assert (user.to_state, user.attempt_outcome) == (S.CANCELED, O.CANCELED)
    late = on_suspend(view(cancel_requested=True, cancel_reason=R.SCHEDULE_TO_CLOSE), SUSPEND)
    assert late.to_state == S.FAILED and late.error.error_class == "ScheduleToCloseTimeout"


def test_the_wake_timer_wakes_a_waiting_run_of_its_own_epoch_only():
    plan = plan_timers(view(state=S.WAITING), [due("wake")])
    (t,) = plan.transitions
    assert (t.from_state, t.to_state) == (S.WAITING, S.ENQUEUED) and plan.ready
    for stale in (view(state=S.WAITING, lease_epoch=4), view(state=S.ENQUEUED), view(state=S.LEASED),
                  view(state=S.CANCELED)):
        plan = plan_timers(stale, [due("wake")])
        assert plan.transitions == [] and plan.cancel_reason is None


def test_schedule_to_close_expires_a_waiting_run_also_right_after_its_wake():
    (t,) = plan_timers(view(state=S.WAITING), [due("schedule_to_close")]).transitions
    assert (t.from_state, t.to_state) == (S.WAITING, S.EXPIRED)
    woke, expired = plan_timers(view(state=S.WAITING), [due("wake"), due("schedule_to_close")]).transitions
    assert (woke.to_state, expired.from_state, expired.to_state) == (S.ENQUEUED, S.ENQUEUED, S.EXPIRED)


def test_a_waiting_run_is_cancelled_now_by_a_cancel_and_a_bulk_cancel():
    t = cancel_now("t1", S.WAITING, 3)
    assert t is not None and (t.from_state, t.to_state) == (S.WAITING, S.CANCELED)
    plan = plan_bulk_cancel([CancelCandidate("t1", "WAITING", 3)], "op")
    assert [c.to_state for c in plan.cancels] == [S.CANCELED] and not plan.cancel_requests


def _completion(**kw) -> wpb.Completion:
    kw.setdefault("shard_id", 1)
    return wpb.Completion(task_id=new_task_id(), lease_epoch=2, outcome=wpb.COMPLETION_OUTCOME_SUSPENDED, **kw)


def test_a_suspended_completion_is_checked_and_the_others_pass_through():
    c = convert.completion(_completion(suspend_position=3, wake_after=duration(1.5)), 0, 1)
    assert isinstance(c, SuspendIn) and (c.suspend_position, c.wake_after_s, c.outcome) == (3, 1.5, "SUSPENDED")
    assert convert.completion(_completion(), 0, 1).wake_after_s is None
    plain = wpb.Completion(shard_id=1, task_id=new_task_id(), lease_epoch=2, outcome=wpb.COMPLETION_OUTCOME_FAILED)
    assert not isinstance(convert.completion(plain, 0, 1), SuspendIn)
    for bad, words in ((_completion(suspend_position=-1), "suspend_position"),
                       (_completion(wake_after=Duration(seconds=-1)), "wake_after"),
                       (_completion(shard_id=2), "shard_id"),
                       (wpb.Completion(task_id=new_task_id(), outcome=9), "SUSPENDED")):
        with pytest.raises(InvalidArgument, match=words):
            convert.completion(bad, 0, 1)


def _step(**kw) -> wpb.StepRequest:
    kw.setdefault("op", wpb.STEP_OP_BEGIN)
    kw.setdefault("kind", wpb.STEP_KIND_STEP)
    kw.setdefault("name", "a")
    kw.setdefault("lease", wpb.LeaseRef(shard_id=1, task_id=new_task_id(), lease_epoch=1))
    return wpb.StepRequest(**kw)


def test_step_requests_are_checked():
    op = convert.step_request(_step(kind=wpb.STEP_KIND_WAIT, match_json=b'{"a": 1}', duration=duration(5)))
    assert (op.op, op.kind, op.match_json, op.duration_s) == ("BEGIN", "WAIT", '{"a": 1}', 5.0)
    assert convert.step_request(_step(kind=wpb.STEP_KIND_WAIT)).match_json == "{}"
    commit = convert.step_request(_step(op=wpb.STEP_OP_COMMIT, error=tasks_pb2.TaskError(error_class="E"), fatal=True))
    assert commit.error.error_class == "E" and commit.fatal and commit.result is None
    assert convert.step_request(_step(op=wpb.STEP_OP_COMMIT, result_json=b"[1]")).result == b"[1]"
    for bad, words in ((_step(op=0), "step.op"), (_step(kind=9), "step.kind"), (_step(position=-2), "position"),
                       (_step(name="a b"), "name"), (_step(name="é"), "name"),
                       (_step(op=wpb.STEP_OP_COMMIT), "JSON"),
                       (_step(op=wpb.STEP_OP_COMMIT, error=tasks_pb2.TaskError(message="m")), "error_class"),
                       (_step(kind=wpb.STEP_KIND_WAIT, match_json=b'"x"'), "JSON object"),
                       (_step(kind=wpb.STEP_KIND_WAIT, duration=Duration(seconds=-1)), "negative"),
                       (_step(kind=wpb.STEP_KIND_VERSION, version=-1), "version"),
                       (_step(kind=wpb.STEP_KIND_SLEEP), "duration is required"),
                       (_step(lease=wpb.LeaseRef(task_id="nope")), "task_id")):
        with pytest.raises(InvalidArgument, match=words):
            convert.step_request(bad)
