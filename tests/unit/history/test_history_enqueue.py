"""enqueue.py without a database: the planner over every kind of batch, the answers decided
from the statement's rows, a request's rounds, and which requests share a round."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from ratchet.libs.shardmap import new_task_id
from ratchet.services.history import enqueue
from ratchet.services.history.enqueue import (
    COPY_MIN_ROWS,
    Batch,
    CreateOut,
    Plan,
    Policy,
    Request,
    Row,
    Wait,
    Writer,
)
from ratchet.services.history.errors import Contention, InvalidArgument

BASE = Policy(max_attempts=5, retry_json={}, timeouts_json={}, non_retryable=[], rules_json=None,
              schedule_to_start_s=None, schedule_to_close_s=None)
TIMED = Policy(max_attempts=5, retry_json={}, timeouts_json={"schedule_to_close_s": 60}, non_retryable=[],
               rules_json=None, schedule_to_start_s=None, schedule_to_close_s=60.0)
OTHER = Policy(max_attempts=3, retry_json={"max_attempts": 3}, timeouts_json={}, non_retryable=[], rules_json=None,
               schedule_to_start_s=None, schedule_to_close_s=None)


def batch(n: int = 1, **cols) -> Batch:
    """n tasks of tenant t, app a, type x, default queue and policy; a column given as a list of
    n is per task, any other value shared."""
    base = dict(tenant_id="t", app_id="a", task_type="x", queue="default", policy=BASE, delay_s=None, run_at=None,
                key=None, fingerprint=None, schedule_id=None, scheduled_time=None)
    base.update(cols)
    ids = base.pop("task_ids", None) or [new_task_id() for _ in range(n)]
    return Batch(task_ids=ids, payloads=[b"1"] * n,
                 **{k: (v if isinstance(v, list) and len(v) == n and n > 1 else [v]) for k, v in base.items()})


# -- the planner ---------------------------------------------------------------------------
KINDS = {
    "uniform": {},
    "keyed": {"key": "k", "fingerprint": "f"},
    "delay": {"delay_s": 5.0},
    "run_at": {"run_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)},
    "schedule": {"schedule_id": "s", "scheduled_time": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)},
    "timed_policy": {"policy": TIMED},
}


@pytest.mark.parametrize("kind, per_task, n, probe", list(itertools.product(
    KINDS, [None, "queue", "tenant_id", "policy"], [1, COPY_MIN_ROWS - 1, COPY_MIN_ROWS], [False, True])))
def test_the_plan_of_every_kind_of_batch(kind, per_task, n, probe):
    cols = dict(KINDS[kind])
    if per_task is not None and n > 1:  # a column the tasks differ in (the last task's value)
        values = {"queue": "q2", "tenant_id": "t2", "policy": OTHER}
        cols[per_task] = [cols.get(per_task, {"queue": "default", "tenant_id": "t", "policy": BASE}[per_task])] * (
            n - 1) + [values[per_task]]
    p = enqueue.plan(batch(n, **cols), probe=probe)
    differs = per_task is not None and n > 1
    keyed, timers = kind == "keyed", kind in ("delay", "run_at", "timed_policy")
    if probe or differs or kind in ("keyed", "delay", "run_at", "schedule"):
        want = Writer.GENERAL
    elif timers or n < COPY_MIN_ROWS:
        want = Writer.UNIFORM
    else:
        want = Writer.COPY
    assert p == Plan(want, keyed, timers)


def test_lanes_keep_uniform_requests_of_one_kind_together_and_every_other_request_in_one():
    a, b = batch(2), batch(3)
    assert enqueue.lane(a) == enqueue.lane(b) and enqueue.lane(a)[0] == "uniform"
    assert enqueue.lane(batch(2, task_type="y")) != enqueue.lane(a)
    assert enqueue.lane(batch(2, policy=OTHER)) != enqueue.lane(a)
    assert enqueue.lane(batch(1, key="k", fingerprint="f")) == enqueue.lane(batch(1, delay_s=1.0)) == ("general",)


def test_merge_keeps_what_every_batch_shares_and_take_cuts_in_order():
    a, b = batch(2), batch(1, queue="q2", key="k", fingerprint="f")
    m = enqueue.merge([a, b])
    assert m.task_ids == a.task_ids + b.task_ids and m.tenant_id == ["t"] and m.policy == [BASE]
    assert m.queue == ["default", "default", "q2"] and m.key == [None, None, "k"]
    assert enqueue.merge([a]) is a
    t = m.take([2, 0])
    assert t.task_ids == [b.task_ids[0], a.task_ids[0]] and t.queue == ["q2", "default"] and t.tenant_id == ["t"]
    assert (t.at("key", 0), t.at("tenant_id", 1)) == ("k", "t")


def test_the_first_timer_hint():
    assert enqueue.first_timer_s(batch(3)) is None
    assert enqueue.first_timer_s(batch(2, delay_s=[9.0, 4.0])) == 4.0
    assert enqueue.first_timer_s(batch(1, policy=TIMED)) == 60.0
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
    assert 25 < enqueue.first_timer_s(batch(1, run_at=soon)) <= 30


# -- answers from rows ---------------------------------------------------------------------
def test_each_row_is_answered_from_what_the_statement_found():
    b = batch(1, key="k", fingerprint="f")
    tid = b.task_ids[0]
    assert enqueue.outcome(b, 0, Row(created=True)) == CreateOut(tid)
    assert enqueue.outcome(b, 0, Row(False, key_task="o", key_fingerprint="f")) == CreateOut("o", deduplicated=True)
    assert enqueue.outcome(b, 0, Row(False, key_task="o", key_fingerprint="g")) == CreateOut("o", conflict=True)
    assert enqueue.outcome(b, 0, Row(False, key_task="o", key_fingerprint="f", key_expired=True)) is Wait.EXPIRED
    assert isinstance(enqueue.outcome(b, 0, Row(False, key_task="o", key_other=True)), Contention)
    u = batch(1)
    assert enqueue.outcome(u, 0, Row(False, id_owner=("t", "a", "x"))) == CreateOut(u.task_ids[0], deduplicated=True)
    taken = enqueue.outcome(u, 0, Row(False, id_owner=("t2", "a", "x")), "tasks[3].task_id")
    assert isinstance(taken, InvalidArgument) and str(taken).startswith(f"tasks[3].task_id {u.task_ids[0]} is already")
    assert enqueue.outcome(u, 0, Row(False)) is Wait.HELD


def test_a_key_twice_in_one_request_is_one_task_and_an_id_twice_is_refused():
    b = batch(3, key=["k", "j", "k"], fingerprint="f")
    r = Request(b)
    assert r.lead == [0, 1, 0] and r.todo == [0, 1]
    with pytest.raises(InvalidArgument, match=r"tasks\[0\] and tasks\[2\] use idempotency_key 'k'"):
        Request(batch(3, key=["k", "j", "k"], fingerprint=["f", "f", "g"]))
    tid = new_task_id()
    with pytest.raises(InvalidArgument, match=r"tasks\[0\] and tasks\[1\] have the same task_id"):
        Request(batch(2, task_ids=[tid, tid]))
    r.settle_rows([Row(True), Row(True)])
    assert [(a.task_id, a.deduplicated) for a in r.results()] == [(b.task_ids[0], False), (b.task_ids[1], False),
                                                                  (b.task_ids[0], True)]


def test_a_request_held_back_keeps_its_answers_and_writes_the_rest_next():
    b = batch(3, key=[None, "k", None], fingerprint=[None, "f", None])
    r = Request(b)
    r.settle_rows([Row(False), Row(False, key_task="o", key_fingerprint="f"), Row(False)])
    assert r.todo == [0, 2] and not r.done and r.created is None
    assert r.pending().task_ids == [b.task_ids[0], b.task_ids[2]]
    r.settle_rows([Row(True), Row(True, due=True)])
    assert r.done and r.due and r.created.task_ids == [b.task_ids[0], b.task_ids[2]]
    assert [(a.task_id, a.deduplicated) for a in r.results()] == [(b.task_ids[0], False), ("o", True),
                                                                  (b.task_ids[2], False)]


def test_a_conflict_answers_the_whole_request_and_nothing_of_it_is_written():
    b = batch(2, key=["k", "j"], fingerprint="f")
    r = Request(b)
    r.settle_rows([Row(False), Row(False, key_task="o", key_fingerprint="other")])
    assert r.done and r.created is None
    assert [(a.task_id, a.conflict) for a in r.results()] == [(b.task_ids[0], False), ("o", True)]


def test_an_expired_key_waits_to_be_expired_and_an_error_fails_the_request():
    b = batch(1, key="k", fingerprint="f")
    r = Request(b)
    r.settle_rows([Row(False, key_task="o", key_fingerprint="f", key_expired=True)])
    assert not r.done and r.expired == [("t", "a", "k")]
    bad = Request(batch(2))
    bad.settle_rows([Row(False, id_owner=("x", "y", "z")), Row(False)])
    with pytest.raises(InvalidArgument, match=r"tasks\[0\]\.task_id"):
        bad.results()
    cols = Request(batch(2), columns=True)
    cols.settle_rows([Row(False), Row(False, id_owner=("x", "y", "z"))])
    with pytest.raises(InvalidArgument, match=r"columns\.task_ids\[1\]"):
        cols.results()


def test_a_request_of_columns_is_answered_all_created_only_when_all_were():
    r = Request(batch(2), columns=True)
    r.written()
    assert r.results() is None and r.due
    again = Request(batch(2), columns=True)
    again.settle_rows([Row(False, id_owner=("t", "a", "x")), Row(False)])
    again.settle_rows([Row(True)])
    assert [a.deduplicated for a in again.results()] == [True, False]


# -- rounds --------------------------------------------------------------------------------
def test_a_round_takes_one_id_and_one_key_once_and_single_repeats_follow():
    tid = new_task_id()
    a = Request(batch(1, key="k", fingerprint="f"))
    same_key = Request(batch(1, key="k", fingerprint="g"))
    b = Request(batch(1, task_ids=[tid]))
    same_id = Request(batch(1, task_ids=[tid]))
    multi = Request(batch(2, key=["k", "z"], fingerprint="f"))
    fresh = Request(batch(1))
    rnd = enqueue.compose([a, same_key, b, same_id, multi, fresh])
    assert rnd.members == [a, b, fresh]
    assert [(f, lead, j) for f, lead, j in rnd.followers] == [(same_key, a, 0), (same_id, b, 0)]
    assert rnd.later == [multi]


def test_followers_are_answered_from_their_leaders_row():
    lead = batch(1, key="k", fingerprint="f", tenant_id="t")
    f = Request(batch(1, key="k", fingerprint="g"))
    enqueue.follow(f, lead, 0, Row(True))
    assert f.results() == [CreateOut(lead.task_ids[0], conflict=True)]
    f = Request(batch(1, key="k", fingerprint="f"))
    enqueue.follow(f, lead, 0, Row(False, key_task="o", key_fingerprint="f"))
    assert f.results() == [CreateOut("o", deduplicated=True)]
    f = Request(batch(1, key="k", fingerprint="f"))
    enqueue.follow(f, lead, 0, Row(False))  # the leader waits: so does the follower
    assert not f.done
    tid = new_task_id()
    by_id = batch(1, task_ids=[tid])
    f = Request(batch(1, task_ids=[tid]))
    enqueue.follow(f, by_id, 0, Row(True))
    assert f.results() == [CreateOut(tid, deduplicated=True)]
    thief = Request(batch(1, task_ids=[tid], tenant_id="t2"))
    enqueue.follow(thief, by_id, 0, Row(True))
    with pytest.raises(InvalidArgument, match="already taken"):
        thief.results()
