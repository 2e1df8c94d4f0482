"""The mutant histories (tests/fault/mutants) differ from the shipped history by their guard alone.

For each mutation: every statement it changes is the shipped statement with the guard's text
deleted and nothing else; every function it changes is recompiled from the shipped source
minus the guard (the same recompilation of the unchanged source gives the shipped code
object), and seen only by one caller, which is the shipped caller's own code. A cut that no
longer matches the shipped text fails loudly. Nothing of this leaks into the shipped service.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import types

import pytest

from ratchet.libs.shardmap import new_task_id
from ratchet.libs.taskstate import AttemptOutcome as O
from ratchet.libs.taskstate import CancelReason as R
from ratchet.libs.taskstate import TaskState as S
from ratchet.services.history import decide, server
from ratchet.services.history.bulk import operations
from ratchet.services.history.model import CompletionIn, TaskView, TimerDue
from ratchet.services.history.policy import Retry
from ratchet.services.history.store import QUERIES, RetryCandidate, Store
from ratchet.services.history.timers import firing
from tests.fault.mutants import mutations as mut
from tests.fault.mutants.mutations import MUTATIONS, MutationError, PyCut, SqlCut, installed

HALF = lambda: 0.5  # noqa: E731 - a fixed jitter draw keeps decisions exact


def _pure_deletion(shipped: str, mutated: str, removed: int) -> None:
    """mutated is shipped with `removed` characters deleted and nothing inserted or replaced."""
    ops = difflib.SequenceMatcher(None, shipped, mutated, autojunk=False).get_opcodes()
    assert {op for op, *_ in ops} <= {"equal", "delete"}, [o for o in ops if o[0] != "equal"]
    assert len(shipped) - len(mutated) == removed


def test_every_mutation_names_a_guard_and_cuts_something():
    assert set(MUTATIONS) == {"epoch_check_on_complete", "charge_attempt_at_lease", "timer_skip_locked",
                              "retry_link_once", "step_begin_memoized", "step_lease_fence"}
    for name, m in MUTATIONS.items():
        assert m.name == name and m.doc and (m.sql or m.py), name
        assert all(c.text.strip() and c.times >= 1 for c in (*m.sql, *m.py)), name


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_mutated_statement_is_the_shipped_one_minus_its_guard(name):
    m = MUTATIONS[name]
    statements = mut.mutated_statements(m)
    assert {q for q, _ in statements} == {c.query for c in m.sql}
    for (query, within), sql in statements.items():
        cuts = [c for c in m.sql if (c.query, c.within) == (query, within)]
        for c in cuts:
            assert QUERIES[query].count(c.text) == c.times, (query, c.text)
            assert c.text not in sql, (query, c.text)
        shipped = QUERIES[query]
        for c in cuts:  # a kept tautology stands where its guard was, and only there
            shipped = shipped.replace(c.text, c.text + c.keep) if c.keep else shipped
        _pure_deletion(shipped, sql, sum(len(c.text) * c.times for c in cuts))


def test_the_cuts_remove_the_guards_they_name():
    """What each statement loses is its guard, not some other text."""
    s = {(q, w): sql for m in MUTATIONS.values() for (q, w), sql in mut.mutated_statements(m).items()}
    read, lock = s["task_complete_read", None], s["task_complete_lock", None]
    assert "lease_epoch = i.lease_epoch" not in read and "lease_epoch = i.lease_epoch" not in lock
    assert "t.state = 'LEASED'" in read and "t.state = 'LEASED'" in lock  # the state fence stays
    claim = s["timer_claim_due", None]
    assert "FOR UPDATE" not in claim and "FOR NO KEY UPDATE" not in claim and "SKIP LOCKED" not in claim
    assert "JOIN gone" not in claim and "DELETE FROM timer_queue" in claim  # deletes, fires what it read
    apply = s["task_transition_apply", mut._FIRE_TIMERS]
    for fence in ("t.state = i.from_state", "t.lease_epoch = i.lease_epoch", "t.version = COALESCE"):
        assert fence in QUERIES["task_transition_apply"] and fence not in apply, fence
    retry = s["task_retry_batch", None]
    assert "retried_as IS NULL" not in retry and "o.state IN ('SUCCEEDED'" in retry


@pytest.mark.parametrize("c", [c for m in MUTATIONS.values() for c in m.py], ids=lambda c: c.function)
def test_each_mutated_function_is_the_shipped_one_minus_its_guard(c):
    shipped_fn = mut.resolve(c.function)[2]
    shipped, cut = mut.cut_source(c)
    assert shipped == inspect.getsource(shipped_fn)  # (top-level functions: nothing dedented)
    _pure_deletion(shipped, cut, len(c.text) * c.times)
    # The recompilation the mutant uses, given the shipped source, gives the shipped code.
    assert mut.compile_function(c.function, shipped).__code__ == shipped_fn.__code__
    assert mut.cut_function(c).__code__ != shipped_fn.__code__


@pytest.mark.parametrize("c", [c for m in MUTATIONS.values() for c in m.py], ids=lambda c: c.caller)
def test_the_caller_is_the_shipped_code_seeing_only_the_cut_function(c):
    module, _, caller = mut.resolve(c.caller)
    fn_name = mut.resolve(c.function)[1]
    replacement = mut.cut_function(c)
    rebound = mut.rebound_caller(c, replacement)
    assert rebound.__code__ is caller.__code__
    assert (rebound.__defaults__, rebound.__kwdefaults__, rebound.__name__) == (
        caller.__defaults__, caller.__kwdefaults__, caller.__name__)
    changed = {k for k in module.__dict__ if rebound.__globals__[k] is not module.__dict__[k]}
    shipped = mut.resolve(c.function)[2]
    tables = set(mut.dispatch_tables(module, shipped))
    assert changed == {fn_name} | tables and rebound.__globals__[fn_name] is replacement
    for table in tables:  # a dispatch table differs by that one entry
        ours, theirs = rebound.__globals__[table], module.__dict__[table]
        assert ours.keys() == theirs.keys()
        assert {k for k in ours if ours[k] is not theirs[k]} == {k for k in theirs if theirs[k] is shipped}
        assert all(ours[k] is replacement for k in theirs if theirs[k] is shipped)
    assert set(rebound.__globals__) == set(module.__dict__)


def test_a_cut_that_no_longer_matches_fails_loudly():
    with pytest.raises(MutationError, match="occurs 0 times in statement task_complete_read, not 1"):
        mut.mutated_statements(mut.Mutation("x", "x", sql=(SqlCut("task_complete_read", "no such guard"),)))
    with pytest.raises(MutationError, match="occurs 2 times in statement timer_claim_due, not 1"):
        mut.mutated_statements(mut.Mutation("x", "x", sql=(SqlCut("timer_claim_due", "FOR NO KEY UPDATE OF t"),)))
    with pytest.raises(MutationError, match="no shipped statement"):
        mut.mutated_statements(mut.Mutation("x", "x", sql=(SqlCut("task_complete_lock_unfenced", "x"),)))
    with pytest.raises(MutationError, match="occurs 0 times in function"):
        mut.cut_function(PyCut("ratchet.services.history.decide:end_attempt", "if charged and",
                               caller="ratchet.services.history.decide:_fire_lease"))
    with pytest.raises(MutationError, match="unknown mutation"), installed("epoch_check"):
        pass


def test_installing_touches_nothing_shipped_and_is_undone():
    before = (server.Store, decide._fire_lease, operations._retry_batch, firing.fire_timers, dict(QUERIES))
    for name in MUTATIONS:
        with installed(name) as m:
            assert issubclass(server.Store, Store) and server.Store is not Store
            assert server.Store.mutation == m.name
            assert Store.queries is QUERIES and dict(QUERIES) == before[4]
            assert (dict(server.Store().queries) != dict(QUERIES)) == bool(m.sql)  # the mutant's registry
        assert (server.Store, decide._fire_lease, operations._retry_batch, firing.fire_timers, dict(QUERIES)) == before


def test_a_statement_cut_within_fire_timers_is_the_shipped_one_elsewhere():
    """timer_skip_locked drops the compare-and-set from a timer firing's transitions only: a completion
    or a bulk cancel applying transitions in the same mutant still runs the guarded statement."""
    queries = mut.store_class(MUTATIONS["timer_skip_locked"]).queries
    assert queries["task_transition_apply"] == QUERIES["task_transition_apply"]
    assert queries["task_complete_read"] == QUERIES["task_complete_read"]

    async def seen() -> str:
        return queries["task_transition_apply"]

    inside = asyncio.run(mut._inside(seen, mut._FIRE_TIMERS)())
    assert inside == mut.mutated_statements(MUTATIONS["timer_skip_locked"])["task_transition_apply", mut._FIRE_TIMERS]
    assert asyncio.run(seen()) == QUERIES["task_transition_apply"]
    with installed("timer_skip_locked"):
        assert firing.fire_timers.__wrapped__ is fire_timers_shipped


fire_timers_shipped = firing.fire_timers


# -- what the Python mutations do --------------------------------------------------
def _view(**kw) -> TaskView:
    base = dict(task_id="t1", state=S.LEASED, lease_epoch=3, attempt=3, max_attempts=3,
                retry=Retry(base_s=2.0, factor=2.0, cap_s=100.0), non_retryable=frozenset(),
                cancel_requested=False, cancel_reason=None)
    base.update(kw)
    return TaskView(**base)


def _due(**facts) -> TimerDue:
    f = dict(due_now=True, lease_expired=False, deadline_passed=False, kill_passed=False)
    f.update(facts)
    return TimerDue(task_id="t1", kind="lease", timer_epoch=3, **f)


def _lease_ends() -> list[S]:
    expired = decide.plan_timers(_view(), [_due(lease_expired=True)], rand=HALF).transitions
    revoked = decide.plan_timers(_view(cancel_requested=True, cancel_reason=R.START_TO_CLOSE),
                                 [_due(kill_passed=True)], rand=HALF).transitions
    return [t.to_state for t in (*expired, *revoked)]


def test_uncharged_attempts_never_exhaust_but_reported_ones_still_do():
    failed = decide.on_completion(_view(), CompletionIn(task_id="t1", lease_epoch=3, outcome="FAILED"), rand=HALF)
    assert _lease_ends() == [S.FAILED, S.FAILED] and failed.to_state == S.FAILED
    with installed("charge_attempt_at_lease"):
        assert _lease_ends() == [S.RETRY_WAIT, S.RETRY_WAIT]
        again = decide.on_completion(_view(), CompletionIn(task_id="t1", lease_epoch=3, outcome="FAILED"), rand=HALF)
        assert again.to_state == S.FAILED and again.attempt_outcome == O.FAILED
    assert _lease_ends() == [S.FAILED, S.FAILED]


class _BulkTx:
    """The two statements a bulk retry batch runs, answered from memory."""

    def __init__(self, rows):
        self.rows = rows

    async def task_bulk_retry_scan(self, *args):
        return self.rows

    async def task_retry_batch(self, pairs):
        return {o: t.task_id for o, t in pairs}


def test_a_rerun_retries_originals_again_without_the_link_guard():
    rows = [RetryCandidate(task_id=new_task_id(7), state="FAILED", finished_at=None, task_type="work",
                           retried_as=retried) for retried in ("x", None)]
    op = types.SimpleNamespace(cursor_state=None, tenant_id="t", app_id="a", filter=None, bound_at=None,
                               registered_task_types=(), operation_id="op")

    def batch():
        return asyncio.run(operations._retry_batch(_BulkTx(rows), op, 10))[0]
    plan = batch()
    assert (plan.skipped, [o for o, _ in plan.retries]) == (1, [rows[1].task_id])
    with installed("retry_link_once"):
        plan = batch()
        assert (plan.skipped, [o for o, _ in plan.retries]) == (0, [r.task_id for r in rows])
    assert batch().skipped == 1


def test_the_harness_runs_known_mutations():
    from tests.fault.test_chaos import MUTATIONS as RUNS

    assert {sc.mutation for sc, _ in RUNS.values()} <= set(MUTATIONS)
    assert all(sc.mutation for sc, _ in RUNS.values())


class _StepTx:
    """The statements a step BEGIN runs, answered from one row held in memory (the reclaim as the
    statement decides it: the shipped one takes RUNNING rows of an older lease and retryable failures)."""

    def __init__(self, row, statement: str):
        self.row, self.statement, self.reclaims = row, statement, 0

    async def workflow_lease_share(self, task_id, epoch):
        return "tenant", False  # (the run's tenant, whether it holds a cancel)

    async def workflow_steps_ahead(self, task_id, position, rows, size):
        return []

    async def workflow_step_lock(self, task_id, position):
        return self.row

    async def workflow_step_exists(self, task_id, position):
        return True

    async def workflow_step_reclaim(self, task_id, position, epoch):
        running_cond = "s.state = 'RUNNING' AND s.lease_epoch < $3::bigint" in self.statement
        older = self.row.lease_epoch < epoch
        if (older and (self.row.state == "RUNNING" or not running_cond)) or (
                self.row.state == "FAILED" and not self.row.fatal):
            self.reclaims += 1
            return self.row.attempt + 1
        return None


class _StepStore:
    def __init__(self, tx):
        self._tx = tx

    def tx(self, conn):
        import contextlib

        @contextlib.asynccontextmanager
        async def opened():
            yield self._tx
        return opened()


def _begin_completed(statement: str):
    import datetime as dt

    from ratchet.services.history.store.rows import StepRow
    from ratchet.services.history.workflows import steps
    from ratchet.services.history.workflows.convert import StepOp

    row = StepRow(position=1, name="charge", kind="STEP", state="COMPLETED", lease_epoch=1, attempt=1,
                  result=b'{"v": 1}', error_class=None, error_message=None, error_stack=None, fatal=False,
                  wake_at=None, started_at=dt.datetime.now(dt.UTC), finished_at=dt.datetime.now(dt.UTC))
    tx = _StepTx(row, statement)
    op = StepOp(shard_id=0, task_id="t1", lease_epoch=2, op="BEGIN", position=1, name="charge", kind="STEP")
    return asyncio.run(steps.run_step(None, _StepStore(tx), op)), tx


def test_a_completed_step_is_claimed_again_without_the_memo_guard():
    m = MUTATIONS["step_begin_memoized"]
    shipped, tx = _begin_completed(QUERIES["workflow_step_reclaim"])
    assert (shipped.status, shipped.result, tx.reclaims) == ("DONE", b'{"v": 1}', 0)
    statement = mut.mutated_statements(m)["workflow_step_reclaim", None]
    with installed("step_begin_memoized"):
        mutant, tx = _begin_completed(statement)
    assert (mutant.status, mutant.attempt, tx.reclaims) == ("RUN", 2, 1)
    assert _begin_completed(QUERIES["workflow_step_reclaim"])[0].status == "DONE"  # undone


def test_a_kept_tautology_is_only_on_the_guards_parameters():
    with pytest.raises(MutationError, match="a cut keeps only a tautology"):
        mut.cut("a = $1 AND b = $2", "b = $2", 1, "x", keep="true")
    with pytest.raises(MutationError, match="a cut keeps only a tautology"):
        mut.cut("a = $1 AND b = $2::int", "b = $2::int", 1, "x", keep="$1::int IS NOT NULL")
    assert mut.cut("a = $1 AND b = $2::int", "b = $2::int", 1, "x", keep="$2::int IS NOT NULL") == (
        "a = $1 AND $2::int IS NOT NULL")


def test_the_step_fence_mutant_drops_both_fences():
    s = mut.mutated_statements(MUTATIONS["step_lease_fence"])
    share, commit = s["workflow_lease_share", None], s["workflow_step_commit", None]
    assert "lease_epoch" not in share and "'LEASED'" not in share and "FOR SHARE" in share
    assert "t.task_id = $1::uuid AND $2::bigint IS NOT NULL" in share
    assert "lease_epoch" not in commit.split("WHERE", 1)[1] and "s.state = 'RUNNING'" in commit
    assert "$3::bigint IS NOT NULL" in commit
