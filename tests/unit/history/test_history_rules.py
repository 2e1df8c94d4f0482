"""Retry rules per error class, bulk plans, filters and cursors (pure, no I/O)."""

from __future__ import annotations

import datetime as dt

import pytest

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.shardmap import new_task_id, slot_of
from ratchet.libs.taskstate import TaskState as S
from ratchet.services.history import convert
from ratchet.services.history.decide import on_completion, plan_bulk_cancel, plan_bulk_retry
from ratchet.services.history.enqueue import convert as enqueue_convert
from ratchet.services.history.errors import InvalidArgument
from ratchet.services.history.model import CompletionIn, ErrorInfo, TaskFilter, TaskView
from ratchet.services.history.policy import Retry, Rule, duration, rule_from_proto, rule_to_proto
from ratchet.services.history.store import CancelCandidate, RetryCandidate

HALF = lambda: 0.5  # noqa: E731 - a fixed jitter draw, passed where a random() is
NOW = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def view(**kw) -> TaskView:
    base = dict(task_id="t1", state=S.LEASED, lease_epoch=3, attempt=1, max_attempts=2,
                retry=Retry(max_attempts=2, base_s=2.0, factor=2.0, cap_s=100.0), non_retryable=frozenset(),
                cancel_requested=False, cancel_reason=None,
                rules={"TimeoutError": Rule(max_attempts=4, base_s=10.0, jitter=False),
                       "ValueError": Rule(non_retryable=True),
                       "SandboxCrashed": Rule(max_attempts=1)})
    base.update(kw)
    return TaskView(**base)


def failed(cls: str, **kw) -> CompletionIn:
    return CompletionIn(task_id="t1", lease_epoch=3, outcome="FAILED", error=ErrorInfo(cls, "m"), **kw)


def test_a_non_retryable_rule_fails_at_once():
    t = on_completion(view(), failed("ValueError"))
    assert t.to_state == S.FAILED and "rule" in t.reason


def test_a_rule_budget_replaces_the_policy_budget_for_its_class():
    # The policy allows 2 attempts; TimeoutError's rule allows 4.
    assert on_completion(view(attempt=2), failed("IOError")).to_state == S.FAILED
    t = on_completion(view(attempt=2), failed("TimeoutError"), rand=HALF)
    assert t.to_state == S.RETRY_WAIT
    assert on_completion(view(attempt=4), failed("TimeoutError")).to_state == S.FAILED
    # A rule can also be stricter than the policy, for platform classes too.
    assert on_completion(view(attempt=1), CompletionIn("t1", 3, "CRASHED")).to_state == S.FAILED


def test_a_rule_backoff_replaces_the_policy_backoff_and_retry_after_still_wins():
    t = on_completion(view(attempt=3), failed("TimeoutError"), rand=HALF)
    assert t.delay_s == pytest.approx(40.0)  # no jitter: min(100, 10 * 2^2)
    other = on_completion(view(attempt=1), failed("IOError"), rand=HALF)
    assert other.delay_s == pytest.approx(1.0)  # the policy: 0.5 * min(100, 2)
    asked = on_completion(view(attempt=3), failed("TimeoutError", retry_after_s=3.0), rand=HALF)
    assert asked.delay_s == 3.0


def test_task_non_retryable_and_fatal_still_decide_first():
    v = view(non_retryable=frozenset({"TimeoutError"}))
    assert on_completion(v, failed("TimeoutError")).to_state == S.FAILED
    assert on_completion(view(), failed("TimeoutError", fatal=True)).to_state == S.FAILED


def test_a_completion_checkpoint_rides_on_its_transition():
    t = on_completion(view(), CompletionIn("t1", 3, "SUCCEEDED", result=b"1", checkpoint=b'{"i":7}'))
    assert t.checkpoint == b'{"i":7}'
    assert on_completion(view(), failed("IOError"), rand=HALF).checkpoint is None


def test_rules_round_trip_through_proto_and_json():
    p = tasks_pb2.ErrorRule(max_attempts=10, base=duration(5), jitter=False)
    r = rule_from_proto(p, "r")
    assert r == Rule(max_attempts=10, base_s=5.0, jitter=False)
    assert Rule.from_json(r.to_json()) == r and rule_to_proto(r) == p
    with pytest.raises(InvalidArgument, match="factor"):
        rule_from_proto(tasks_pb2.ErrorRule(factor=20), "rules['X']")
    with pytest.raises(InvalidArgument, match="max_attempts"):
        rule_from_proto(tasks_pb2.ErrorRule(max_attempts=0), "rules['X']")


def test_new_task_merges_non_retryable_lists_and_keeps_schedule_fields():
    p = enqueue_convert.history_pb2.NewTask(task_id=new_task_id(), tenant_id="t", app_id="a", task_type="x",
                                    payload_json=b"1", non_retryable=["A"], schedule_id="sch-1")
    p.retry.non_retryable.extend(["B", "A"])
    p.retry.rules["C"].non_retryable = True
    p.scheduled_time.FromDatetime(dt.datetime(2024, 3, 10, 2, 30))
    b = enqueue_convert.tasks([p])
    assert b.policy[0].non_retryable == ["A", "B"] and b.policy[0].rules_json == {"C": {"non_retryable": True}}
    assert b.schedule_id == ["sch-1"] and b.scheduled_time == [dt.datetime(2024, 3, 10, 2, 30, tzinfo=dt.UTC)]


def test_checkpoints_are_size_and_json_checked():
    assert convert.checkpoint(b'{"cursor": 1}', "x") == b'{"cursor": 1}'
    with pytest.raises(InvalidArgument, match="at most 65536 bytes"):
        convert.checkpoint(b'"' + b"a" * (64 * 1024) + b'"', "x")
    with pytest.raises(InvalidArgument, match="JSON"):
        convert.checkpoint(b"{not json", "x")


def test_bulk_retry_plan_skips_retried_fails_unregistered_and_keeps_the_slot():
    orig = [new_task_id(7) for _ in range(3)]
    rows = [RetryCandidate(task_id=orig[0], state="FAILED", finished_at=NOW, task_type="work", retried_as=None),
            RetryCandidate(task_id=orig[1], state="FAILED", finished_at=NOW, task_type="gone", retried_as=None),
            RetryCandidate(task_id=orig[2], state="FAILED", finished_at=NOW, task_type="work", retried_as="x")]
    plan = plan_bulk_retry(rows, frozenset({"work"}), lambda o: new_task_id(slot_of(o)), "op-1")
    (o, create), = plan.retries
    assert o == orig[0] and slot_of(create.task_id) == 7 and create.from_state is None
    assert create.to_state == S.ENQUEUED and "op-1" in create.reason
    assert plan.failures == [(orig[1], "task type gone is no longer registered by the active deployment")]
    assert plan.skipped == 1
    # No registered list: every type is retried.
    assert len(plan_bulk_retry(rows[:2], frozenset(), lambda o: new_task_id(7), "op").retries) == 2


def test_bulk_cancel_plan_is_the_normal_cancel():
    rows = [CancelCandidate(task_id="a", state="ENQUEUED", lease_epoch=0),
            CancelCandidate(task_id="b", state="RETRY_WAIT", lease_epoch=2),
            CancelCandidate(task_id="c", state="LEASED", lease_epoch=3)]
    plan = plan_bulk_cancel(rows, "op")
    assert [(t.task_id, t.from_state, t.to_state) for t in plan.cancels] == [
        ("a", S.ENQUEUED, S.CANCELED), ("b", S.RETRY_WAIT, S.CANCELED)]
    assert plan.cancel_requests == [("c", 3)] and plan.skipped == 0


def test_filters_and_cursors():
    f = TaskFilter(states=(S.FAILED, S.ENQUEUED), task_type="x",
                   since=dt.datetime(2024, 1, 1, tzinfo=dt.UTC))
    assert TaskFilter.from_json(f.to_json()) == f
    assert f.terminal_states() == ["FAILED"] and f.live_states() == ["ENQUEUED"]
    assert len(TaskFilter().terminal_states()) == 4 and len(TaskFilter().live_states()) == 4
    at = dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
    tid = new_task_id()
    cursor = convert.format_cursor(at, tid)
    assert cursor == f"2024-05-01T12:00:00.123456Z|{tid}"
    assert convert.list_cursor(cursor) == (at, tid)
    for bad in ("nope", f"2024-05-01|{tid}", "2024-05-01T12:00:00Z|x"):
        with pytest.raises(InvalidArgument):
            convert.list_cursor(bad)
    with pytest.raises(InvalidArgument, match="terminal"):
        convert.bulk_filter(tasks_pb2.TaskFilter(states=[tasks_pb2.TASK_STATE_ENQUEUED]), "RETRY")
    assert convert.bulk_filter(tasks_pb2.TaskFilter(), "RETRY").states == (S.FAILED,)
    assert len(convert.bulk_filter(tasks_pb2.TaskFilter(), "CANCEL").states) == 3


def test_type_limits_split_into_paused_and_capped():
    from ratchet.services.history.leases.leasing import split_limits
    a, b, c = ("t", "app", "a"), ("t", "app", "b"), ("t", "app", "c")
    paused, caps = split_limits([(a, 0), (b, 3), (b, 1), (c, 2), (c, 0)])
    assert sorted(paused) == [a, c] and caps == {b: 1}


def _new(**retry) -> enqueue_convert.history_pb2.NewTask:
    p = enqueue_convert.history_pb2.NewTask(task_id=new_task_id(), tenant_id="t", app_id="a", task_type="x",
                                    payload_json=b"1")
    for k, v in retry.items():
        setattr(p.retry, k, v)
    return p


def test_a_policy_is_converted_once_and_only_for_requests_that_carry_it():
    enqueue_convert._policy_of.cache_clear()
    a1, a2, b = enqueue_convert.tasks([_new(max_attempts=3), _new(max_attempts=3), _new(max_attempts=7)]).policy
    assert a1 is a2, "one conversion for tasks sharing a policy"
    assert a1.max_attempts == a2.max_attempts == 3 and b.max_attempts == 7 and b.retry_json != a1.retry_json
    assert enqueue_convert._policy_of.cache_info().currsize == 2


def test_an_invalid_policy_is_refused_with_its_own_index_after_valid_ones_were_cached():
    enqueue_convert._policy_of.cache_clear()
    enqueue_convert.new_task(_new(max_attempts=3), 0)
    with pytest.raises(InvalidArgument, match=r"tasks\[5\]\.retry"):
        enqueue_convert.new_task(_new(max_attempts=-1), 5)
    assert enqueue_convert._policy_of.cache_info().currsize == 1, "a refused policy is not remembered"
