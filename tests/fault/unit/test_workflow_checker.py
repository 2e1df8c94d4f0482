"""The workflow invariants prove they can fail: a clean crafted run with workflow
runs (slept, waited, woken by an event or a timeout, re-run after a dead lease,
cancelled while waiting, a fatal step handled) passes every invariant, and each
crafted violation makes the named invariant (and the verdict) fail."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.fault.checker import Run, check
from tests.fault.checker import statemachine as sm
from tests.fault.checker.__main__ import summary

from .histories import BASE, Builder, clean, iso
from .test_checker import assert_fails, verdict_of
from .wfhistories import WfRun, happy, rerun_after_expiry, with_workflow_tables

WF_INVARIANTS = ("wf_step_once", "wf_step_claims", "wf_step_fenced", "wf_step_log", "wf_layout_complete", "wf_waiting",
                 "wf_events")


def wf_run() -> tuple[Builder, dict[str, WfRun]]:
    """clean() plus five runs: happy, re-run after expiry, cancelled while waiting, a fatal step the
    workflow handles, and a step failure retried by the next activation."""
    b, _ = clean()
    runs = {"happy": happy(b), "rerun": rerun_after_expiry(b)}
    c = WfRun(with_workflow_tables(b), "wf-3")
    c.lease().version().step(1).sleep().wake()
    c.lease().version().step(1).sleep().step(3).wait(timeout=None)
    runs["cancel"] = c.cancel()
    f = WfRun(b, "wf-4")
    f.lease().version().step(1).sleep().wake()
    f.lease().version().step(1).sleep().step(3, "fatal").wait()
    f.deliver()
    runs["fatal"] = f.lease().version().step(1).sleep().step(3).wait().step(5).succeed()
    r = WfRun(b, "wf-5")
    r.lease().version().step(1, "raise").expire("FAILED", "RetryableError")
    r.lease().version().step(1).sleep().wake()
    r.lease().version().step(1).sleep().step(3).wait()
    r.deliver()
    runs["retried"] = r.lease().version().step(1).sleep().step(3).wait().step(5).succeed()
    return b, runs


def finish(b: Builder, runs: dict[str, WfRun]) -> Builder:
    for r in runs.values():
        r.finish()
    return b


def row(b: Builder, r: WfRun, pos: int) -> dict:
    return next(s for s in b.tables["workflow_steps"] if s["workflow_id"] == r.id and s["position"] == pos)


def lines(b: Builder, r: WfRun, phase: str, pos: int) -> list[dict]:
    return [e for e in b.ledger if e["task_id"] == r.id and e["phase"] == phase and e["position"] == pos]


def test_clean_workflow_run_passes_every_invariant():
    b, runs = wf_run()
    verdict = verdict_of(finish(b, runs))
    assert verdict["valid"], summary(verdict)
    inv = verdict["invariants"]
    for name in WF_INVARIANTS:
        assert inv[name]["checked"] > 0, name
    assert inv["wf_step_log"]["counts"]["by_state"] == {"SUCCEEDED": 4, "CANCELED": 1}
    claims = inv["wf_step_claims"]["counts"]
    assert claims["re_executions"] == 2 and claims["why"] == {"lease_expired": 1, "activation_failed": 1}
    assert inv["wf_waiting"]["counts"]["suspensions"] == 10
    assert inv["wf_events"]["counts"]["consumed"] == 3 and inv["wf_events"]["counts"]["timed_out_waits"] == 1
    assert inv["acked_terminal"]["counts"]["final_CANCELED"] >= 1  # the workflow starts count as enqueues
    starts = [i for i in Run.from_parts(*b.run()).items if i.op.f == "start_workflow"]
    assert len(starts) == 5 and all(i.task_id for i in starts)


# -- (a) a committed step never re-executes ----------------------------------------------
def test_begin_that_ignores_a_completed_row_is_caught():
    """The mutant: BEGIN claims a COMPLETED step again, so the step runs again after its commit."""
    b, runs = wf_run()
    r = WfRun(b, "wf-7")
    r.lease().version().step(1).sleep().wake()
    r.lease().version().step(1).sleep().step(3).wait()
    r.deliver()
    r.rows[1]["state"] = "RUNNING"  # what the third activation's BEGIN of `charge` takes it for
    runs["mutant"] = r.lease().version().step(1).sleep().step(3).wait().step(5).succeed()
    verdict = verdict_of(finish(b, runs))
    res = assert_fails(verdict, "wf_step_once", "a committed step re-executed")
    assert res["counterexamples"][0]["task_id"] == r.id and res["counterexamples"][0]["step_ledger"]
    assert_fails(verdict, "wf_step_claims", "its activation got the committed outcome")


def test_reclaim_of_a_committed_step_in_a_later_lease_is_caught():
    b, runs = wf_run()
    r = runs["happy"]
    r.ledger("step", 1, step_attempt=2)  # under lease 3, after lease 1 committed it
    assert_fails(verdict_of(finish(b, runs)), "wf_step_once", "committed COMPLETED under lease 1 ran again")


def test_commit_from_a_zombie_claim_is_caught():
    """The mutant without the commit's fence: lease 2's late commit lands on lease 3's claim."""
    b, runs = wf_run()
    finish(b, runs)
    r = runs["rerun"]
    row(b, r, 3)["result"] = {"position": 3, "name": "reserve", "lease_epoch": 2, "step_attempt": 1}
    verdict = verdict_of(b)
    assert_fails(verdict, "wf_step_once", "a commit from another claim was accepted")


def test_run_returning_a_value_its_step_did_not_commit_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    task = next(t for t in b.tables["tasks"] if t["task_id"] == runs["happy"].id)
    task["result"]["steps"]["3"] = {"position": 3, "name": "reserve", "lease_epoch": 9, "step_attempt": 1}
    assert_fails(verdict_of(b), "wf_step_once", "the run returned")


def test_activation_handed_another_result_than_the_commit_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    lines(b, runs["happy"], "step_done", 1)[-1]["result_epoch"] = 2
    assert_fails(verdict_of(b), "wf_step_once", "the activation of lease 3 got step 1's result of lease 2")


def test_zombie_told_run_before_the_commit_is_counted_not_failed():
    """A sandbox told RUN under a lease that then died may start the step after the next lease
    committed it: an at-least-once duplicate the step attempt announces, not a re-execution."""
    b, runs = wf_run()
    finish(b, runs)
    r = runs["rerun"]
    late = dict(lines(b, r, "step", 3)[0], time=BASE + 10_000)
    b.ledger.remove(lines(b, r, "step", 3)[0])
    b.ledger.append(late)
    verdict = verdict_of(b)
    assert verdict["valid"], summary(verdict)
    assert verdict["invariants"]["wf_step_once"]["counts"]["zombie_runs_after_commit"] == 1


# -- (b) re-runs only after a claim from a dead lease -----------------------------------
def test_step_executed_twice_under_one_lease_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    b.ledger.append(dict(lines(b, runs["happy"], "step", 3)[0], time=BASE + 1))
    assert_fails(verdict_of(b), "wf_step_claims", "ran 2 times under lease 2")


def test_step_executed_under_a_lease_never_granted_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    b.ledger.append(dict(lines(b, runs["rerun"], "step", 3)[0], lease_epoch=7, step_attempt=1))
    assert_fails(verdict_of(b), "wf_step_claims", "never granted")


def test_claims_not_counted_one_more_each_time_are_caught():
    b, runs = wf_run()
    finish(b, runs)
    lines(b, runs["rerun"], "step", 3)[1]["step_attempt"] = 1
    assert_fails(verdict_of(b), "wf_step_claims", "each claim must count one more")


def test_row_attempt_above_the_leases_that_could_claim_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    row(b, runs["rerun"], 3)["attempt"] = 5
    verdict = verdict_of(b)
    assert_fails(verdict, "wf_step_claims", "only 3 lease(s)")
    assert_fails(verdict, "wf_step_once", "a commit from another claim")  # the stamp says attempt 2


def test_rerun_after_a_lease_that_suspended_is_caught():
    """Lease 2 ran the step and suspended with its claim open: nothing killed that claim."""
    b, runs = wf_run()
    finish(b, runs)
    r = runs["rerun"]
    att = next(a for a in b.tables["task_attempts"] if a["task_id"] == r.id and a["lease_epoch"] == 2)
    att.update(outcome="SUSPENDED", error_class=None)
    assert_fails(verdict_of(b), "wf_step_claims", "after lease 2, which ended SUSPENDED")


def test_rerun_after_a_dead_lease_is_explained():
    b, runs = wf_run()
    verdict = verdict_of(finish(b, runs))
    assert verdict["invariants"]["wf_step_claims"]["valid"]
    assert verdict["invariants"]["wf_step_claims"]["counts"]["claims_without_execution"] == 0


def test_commit_accepted_after_its_lease_ended_is_caught():
    """The chaos run of step_lease_fence: a zombie's commit lands seconds after its lease expired."""
    b, runs = wf_run()
    finish(b, runs)
    r = runs["rerun"]
    lease_end = next(t["at"] for t in b.tables["task_transitions"] if t["task_id"] == r.id
                     and t["from_state"] == "LEASED" and t["lease_epoch"] == 3)
    late = iso(dt.datetime.fromisoformat(lease_end).timestamp() + 4.0)
    row(b, r, 3).update(lease_epoch=2, attempt=1, finished_at=late,
                        result={"position": 3, "name": "reserve", "lease_epoch": 2, "step_attempt": 1})
    row(b, r, 3)["started_at"] = next(t["at"] for t in b.tables["task_transitions"] if t["task_id"] == r.id
                                      and t["to_state"] == "LEASED" and t["lease_epoch"] == 2)
    verdict = verdict_of(b)
    res = assert_fails(verdict, "wf_step_fenced", "was committed under lease 2")
    assert "after the lease ended" in res["counterexamples"][0]["problem"]


def test_claim_made_before_its_lease_began_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    row(b, runs["happy"], 5)["started_at"] = iso(BASE + 1.0)
    assert_fails(verdict_of(b), "wf_step_fenced", "before the lease began")


def test_step_writes_inside_their_leases_pass():
    b, runs = wf_run()
    verdict = verdict_of(finish(b, runs))
    res = verdict["invariants"]["wf_step_fenced"]
    assert res["valid"] and res["checked"] > 20 and res["counts"]["late_writes"] == 0


# -- (c) the log is the code's call sequence, and agrees with the run's state -------------
def test_logged_name_other_than_the_code_calls_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    row(b, runs["happy"], 3)["name"] = "refund"
    assert_fails(verdict_of(b), "wf_step_log", "position 3 logged STEP 'refund'; the code calls STEP 'reserve'")


def test_positions_with_a_gap_are_caught():
    b, runs = wf_run()
    finish(b, runs)
    b.tables["workflow_steps"].remove(row(b, runs["happy"], 2))
    verdict = verdict_of(b)
    assert_fails(verdict, "wf_step_log", "not dense from 0")
    assert_fails(verdict, "wf_layout_complete", "SUCCEEDED with 5 logged calls; its code makes 6")


def test_forked_log_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    b.tables["workflow_steps"].append(dict(row(b, runs["happy"], 3), name="refund"))
    assert_fails(verdict_of(b), "wf_step_log", "two rows at position 3")


def test_succeeded_run_with_an_unfinished_or_retryable_step_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    row(b, runs["happy"], 5).update(state="RUNNING", finished_at=None)
    row(b, runs["fatal"], 3).update(fatal=False)
    verdict = verdict_of(b)
    assert_fails(verdict, "wf_step_log", "the run SUCCEEDED but its last step 'ship' is RUNNING")
    assert_fails(verdict, "wf_step_log", "position 3 'reserve' is FAILED (not fatal) but the run went on")


def test_running_step_before_the_last_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    row(b, runs["cancel"], 1).update(state="RUNNING", finished_at=None)
    assert_fails(verdict_of(b), "wf_step_log", "position 1 'charge' is RUNNING but the run went on to position 4")


def test_workflow_type_without_a_layout_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    b.meta["workflow_layouts"] = {}
    assert_fails(verdict_of(b), "wf_step_log", "no layout known for workflow type 'flow'")


# -- (d) WAITING ----------------------------------------------------------------------
def _waiting(timeout: float | None = 3.0) -> tuple[Builder, WfRun, dict]:
    """A run left WAITING on its event (stuck for acked_terminal, but sound for the wf invariants)."""
    b, runs = wf_run()
    w = WfRun(b, "wf-6")
    w.lease().version().step(1).sleep().wake()
    w.lease().version().step(1).sleep().step(3).wait(timeout=timeout)
    finish(b, runs)
    w.finish()
    return b, w, verdict_of(b)


@pytest.mark.parametrize("timeout", [3.0, None])
def test_waiting_run_with_its_waker_passes(timeout):
    _b, _w, verdict = _waiting(timeout)
    assert_fails(verdict, "acked_terminal", "stuck")
    for name in ("wf_step_log", "wf_waiting", "transition_log", "attempt_accounting"):
        assert verdict["invariants"][name]["valid"], summary(verdict)


def test_waiting_run_without_a_wake_timer_is_caught():
    b, w, _ = _waiting()
    b.tables["timers"] = [t for t in b.tables["timers"] if t["task_id"] != w.id]
    assert_fails(verdict_of(b), "wf_waiting", "with no wake timer: nothing will wake it")


def test_waiting_run_without_its_open_wait_is_caught():
    b, w, _ = _waiting(None)
    b.tables["workflow_waits"] = [x for x in b.tables["workflow_waits"] if x["workflow_id"] != w.id]
    assert_fails(verdict_of(b), "wf_waiting", "with no open wait row")


def test_waiting_run_whose_log_ends_settled_is_caught():
    b, w, _ = _waiting()
    row(b, w, 4).update(state="COMPLETED", result={"op": "wf-6"}, finished_at=iso(BASE))
    assert_fails(verdict_of(b), "wf_step_log", "a waiting run waits on a pending sleep or wait")


def test_suspension_without_a_suspended_attempt_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    att = next(a for a in b.tables["task_attempts"] if a["task_id"] == runs["happy"].id and a["lease_epoch"] == 1)
    att["outcome"] = "SUCCEEDED"
    assert_fails(verdict_of(b), "wf_waiting", "went WAITING under leases [1, 2]")


def test_finished_run_keeping_an_open_wait_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    b.tables["workflow_waits"].append({"workflow_id": runs["cancel"].id, "position": 4, "tenant_id": "ten",
                                       "name": "go", "match": {}})
    assert_fails(verdict_of(b), "wf_waiting", "is CANCELED but still has open waits")


def test_state_machine_without_the_four_waiting_edges_is_caught(monkeypatch):
    b, runs = wf_run()
    finish(b, runs)
    allowed = {k: set(v) for k, v in sm.ALLOWED.items()}
    allowed["WAITING"].discard("EXPIRED")
    monkeypatch.setattr(sm, "ALLOWED", allowed)
    assert_fails(verdict_of(b), "wf_waiting", "not the four of the design")


def test_the_state_machine_in_use_has_the_waiting_edges():
    """transition_log holds workflow logs to ratchet.libs.taskstate, which has the WAITING edges."""
    assert sm.SOURCE == "ratchet.libs.taskstate"
    for src, dst in (("LEASED", "WAITING"), ("WAITING", "ENQUEUED"), ("WAITING", "CANCELED"),
                     ("WAITING", "EXPIRED")):
        assert sm.allowed(src, dst), (src, dst)
    assert not sm.allowed("WAITING", "LEASED") and not sm.allowed("WAITING", "SUCCEEDED")


def test_waiting_edge_the_machine_lacks_fails_the_transition_log():
    b, runs = wf_run()
    finish(b, runs)
    t = next(t for t in b.tables["task_transitions"] if t["task_id"] == runs["cancel"].id
             and t["to_state"] == "CANCELED")
    t["from_state"] = "WAITING"
    t["to_state"] = "SUCCEEDED"
    next(x for x in b.tables["tasks"] if x["task_id"] == runs["cancel"].id)["state"] = "SUCCEEDED"
    assert_fails(verdict_of(b), "transition_log", "WAITING->SUCCEEDED is not allowed")


# -- (e) acked start => terminal ----------------------------------------------------------
def test_acked_start_whose_run_is_lost_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    rid = runs["happy"].id
    for table in ("tasks", "task_transitions", "task_attempts", "workflow_steps"):
        b.tables[table] = [x for x in b.tables[table] if x.get("task_id", x.get("workflow_id")) != rid]
    res = assert_fails(verdict_of(b), "acked_terminal", "lost")
    assert res["counterexamples"][0]["task_id"] == rid


# -- events -------------------------------------------------------------------------
def test_acked_event_missing_from_the_inbox_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    b.op("c3", "send_workflow_event", {"task_id": runs["cancel"].id, "name": "go", "data": {"op": "x"}}, "ok",
         {"task_id": runs["cancel"].id, "delivered": False})
    b.get("c3", runs["cancel"].id, "CANCELED", len(runs["cancel"].log))
    assert_fails(verdict_of(b), "wf_events", "was acknowledged but the run's inbox does not hold it")


def test_event_consumed_by_two_waits_or_none_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    ev = next(e for e in b.tables["workflow_inbox"] if e["workflow_id"] == runs["happy"].id)
    b.tables["workflow_inbox"].append(dict(ev, seq=99))
    assert_fails(verdict_of(b), "wf_events", "2 events consumed by the wait at 4")
    b.tables["workflow_inbox"] = [e for e in b.tables["workflow_inbox"] if e["workflow_id"] != runs["happy"].id]
    assert_fails(verdict_of(b), "wf_events", "consumed no inbox event")


def test_wait_timing_out_over_an_unconsumed_event_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    r = runs["rerun"]
    received = iso(BASE + r.clock - 100)  # long before the wait's deadline
    b.tables["workflow_inbox"].append({"workflow_id": r.id, "seq": 98, "name": "go", "data": {"op": "wf-2"},
                                       "received_at": received, "consumed_by": None, "consumed_at": None})
    b.meta["workflow_event_match"] = {"go": ["op"]}
    res = assert_fails(verdict_of(b), "wf_events", "timed out at")
    assert res["counterexamples"][0]["task_id"] == r.id


def test_wrong_data_in_a_completed_wait_is_caught():
    b, runs = wf_run()
    finish(b, runs)
    row(b, runs["happy"], 4)["result"] = {"op": "someone else"}
    assert_fails(verdict_of(b), "wf_events", "consumed by position 4")


def test_verdict_is_plain_json():
    import json

    b, runs = wf_run()
    history, ledger, dump, meta = finish(b, runs).run()
    json.dumps(check(Run.from_parts(history, ledger, dump, meta)))
