"""Invariants over workflow runs (issue 24, docs/design/workflows-protocol.md):
the step log is a run's memory, so a committed step must never run again, a
step runs again only because the lease that claimed it died, the log is the
code's call sequence and agrees with the run's state, a WAITING run waits on
something, and every event a client handed over is either still in the inbox
or consumed by exactly one wait.

A run is also a task: `acked_terminal`, `enqueue_outcomes` and `handler_outcomes`
see a workflow start as an enqueue (model.enqueue_items), and `transition_log`
holds its log to the state machine, WAITING edges included (from
ratchet.libs.taskstate)."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise

from .. import statemachine as sm
from ..core import Result, invariant
from ..model import Run
from ..wfmodel import COMPLETED, FAILED, RUNNING, SLEEP, STEP, WAIT, Execution, StepRow, Workflows, when

WAITING_EDGES = (("LEASED", "WAITING"), ("WAITING", "ENQUEUED"), ("WAITING", "CANCELED"), ("WAITING", "EXPIRED"))
# How an activation's lease may end so that a step it claimed may run again: the claim is dead.
DEAD_LEASE = {"LEASE_EXPIRED": "lease_expired", "CRASHED": "sandbox_crashed", "TIMED_OUT": "timed_out",
              "FAILED": "activation_failed"}
# Database timestamps (now(): a transaction's start) against each other, and the sandboxes'
# wall clock against the database's (same host, neither skewed by the nemesis).
CLOCK_SLACK_S = 0.25
# A statement may read the clock before it waits for a row lock: a lease's end may be stamped that much
# before a step write the end waited for (healthy runs: < 10 ms; a zombie write comes seconds late).
FENCE_SLACK_S = 1.0


def _committed(row: StepRow | None) -> bool:
    """A step whose outcome is final: completed, or failed fatally (never run again)."""
    return row is not None and (row.state == COMPLETED or (row.state == FAILED and row.fatal))


def _stamp(row: StepRow) -> tuple[int, int] | None:
    """(lease epoch, step attempt) the fault app stamps into a step's result: who produced it."""
    r = row.result
    if isinstance(r, dict) and "lease_epoch" in r and "step_attempt" in r:
        return int(r["lease_epoch"]), int(r["step_attempt"])
    return None


def _step_positions(wf: Workflows, run_id: str) -> list[int]:
    """Positions holding a STEP row or a step execution."""
    rows = {p for p, s in wf.steps.get(run_id, {}).items() if s.kind == STEP}
    return sorted(rows | {x.position for x in wf.executions.get(run_id, []) if x.phase == "step"})


# -- (a) ---------------------------------------------------------------------------------
@invariant("wf_step_once", "P7")
def wf_step_once(run: Run, res: Result) -> None:
    """A committed step never runs again: no execution of its side effect under a lease later than
    the commit (or than an activation that got its outcome back), and the value committed, and handed
    to the workflow, is the one its own claim produced."""
    wf = Workflows.of(run)
    res.counts.update({"steps": 0, "executions": 0, "zombie_runs_after_commit": 0})
    for run_id in wf.run_ids():
        for p in _step_positions(wf, run_id):
            res.checked += 1
            res.count("steps")
            _once_at(wf, res, run_id, p)
        _final_result_matches(wf, res, run_id)


def _once_at(wf: Workflows, res: Result, run_id: str, p: int) -> None:
    row = wf.steps.get(run_id, {}).get(p)
    execs = wf.runs_of(run_id, "step", p)
    res.count("executions", len(execs))
    if row is None:
        if execs:
            res.violation(f"step {p} ran {len(execs)} time(s) but the log has no row at {p}: it ran without a "
                          "claim", run_id, **wf.evidence(run_id, p))
        return
    dones = wf.runs_of(run_id, "step_done", p)
    if dones:
        seen = dones[0]
        for x in execs:
            if x.lease_epoch > seen.lease_epoch:
                res.violation(f"step {p} {row.name!r} ran again under lease {x.lease_epoch} (step attempt "
                              f"{x.step_attempt}) after the activation of lease {seen.lease_epoch} had its "
                              "committed outcome: a committed step re-executed", run_id, **wf.evidence(run_id, p))
    if not _committed(row):
        return
    for x in execs:
        if x.lease_epoch > row.lease_epoch:
            res.violation(f"step {p} {row.name!r} committed {row.state} under lease {row.lease_epoch} ran again "
                          f"under lease {x.lease_epoch}", run_id, **wf.evidence(run_id, p))
        elif (x.lease_epoch < row.lease_epoch and row.finished_at is not None
              and x.time > row.finished_at.timestamp() + CLOCK_SLACK_S):
            res.count("zombie_runs_after_commit")  # told RUN under a lease that died before the commit
    _provenance(wf, res, run_id, row, execs, dones)


def _provenance(wf: Workflows, res: Result, run_id: str, row: StepRow, execs: list[Execution],
                dones: list[Execution]) -> None:
    """The committed result came from the claim the row holds, and every activation got that result."""
    stamp = _stamp(row) if row.state == COMPLETED else None
    if stamp is None:
        if row.state == COMPLETED and execs:
            res.violation(f"step {row.position} {row.name!r} is COMPLETED with a result the app's step did not "
                          f"produce: {row.result!r}", run_id, **wf.evidence(run_id, row.position))
        return
    if stamp != (row.lease_epoch, row.attempt):
        res.violation(f"step {row.position} {row.name!r} holds the result of lease {stamp[0]} (step attempt "
                      f"{stamp[1]}) but its claim is lease {row.lease_epoch} attempt {row.attempt}: a commit "
                      "from another claim was accepted", run_id, **wf.evidence(run_id, row.position))
    if not any((x.lease_epoch, x.step_attempt) == stamp for x in execs):
        res.violation(f"step {row.position} {row.name!r} committed a result of lease {stamp[0]} attempt {stamp[1]} "
                      "that no recorded execution produced", run_id, **wf.evidence(run_id, row.position))
    for d in dones:
        got = (d.raw.get("result_epoch"), d.raw.get("result_attempt"))
        if d.outcome == "ok" and got != stamp:
            res.violation(f"the activation of lease {d.lease_epoch} got step {row.position}'s result of lease "
                          f"{got[0]} attempt {got[1]}, but the log committed lease {stamp[0]} attempt {stamp[1]}",
                          run_id, **wf.evidence(run_id, row.position))


def _final_result_matches(wf: Workflows, res: Result, run_id: str) -> None:
    """A SUCCEEDED run's result holds the values its steps committed (memoized, not re-run)."""
    task = wf.run.dump.tasks.get(run_id)
    if task is None or task.state != "SUCCEEDED" or not isinstance(task.result, dict):
        return
    for pos, value in (task.result.get("steps") or {}).items():
        row = wf.steps.get(run_id, {}).get(int(pos))
        if row is not None and row.state == COMPLETED and value != row.result:
            res.violation(f"the run returned {value!r} for step {pos} {row.name!r}, which committed "
                          f"{row.result!r}", run_id, **wf.evidence(run_id, int(pos)))


# -- (b) ---------------------------------------------------------------------------------
@invariant("wf_step_claims", "P7")
def wf_step_claims(run: Run, res: Result) -> None:
    """A step runs again only after a claim from a dead lease: one execution per lease, each under a
    granted lease, step attempts rising with the lease, the row's attempt counting the claims, and each
    re-run following a lease that expired, crashed, timed out or failed."""
    wf = Workflows.of(run)
    res.counts.update({"re_executions": 0, "duplicate_side_effects": 0, "claims_without_execution": 0, "why": {}})
    for run_id in wf.run_ids():
        leases = wf.leases(run_id)
        for p in _step_positions(wf, run_id):
            res.checked += 1
            execs = wf.runs_of(run_id, "step", p)
            _one_per_lease(wf, res, run_id, p, execs, leases)
            row = wf.steps.get(run_id, {}).get(p)
            if row is not None:
                _claims_counted(wf, res, run_id, row, execs, leases)
            for x1, x2 in pairwise(_first_per_epoch(execs)):
                _rerun_explained(wf, res, run_id, p, x1, x2)


def _first_per_epoch(execs: list[Execution]) -> list[Execution]:
    out: dict[int, Execution] = {}
    for x in execs:
        out.setdefault(x.lease_epoch, x)
    return [out[e] for e in sorted(out)]


def _one_per_lease(wf: Workflows, res: Result, run_id: str, p: int, execs: list[Execution], leases) -> None:
    by_epoch: dict[int, list[Execution]] = defaultdict(list)
    for x in execs:
        by_epoch[x.lease_epoch].append(x)
    for epoch, xs in sorted(by_epoch.items()):
        if epoch not in leases:
            res.violation(f"step {p} ran under lease {epoch}, which the run was never granted", run_id,
                          **wf.evidence(run_id, p))
        if len(xs) > 1:
            res.violation(f"step {p} ran {len(xs)} times under lease {epoch}", run_id, **wf.evidence(run_id, p))
    tries = [x.step_attempt for x in _first_per_epoch(execs)]
    if None in tries or any(b <= a for a, b in pairwise(tries)) or (tries and tries[0] < 1):  # type: ignore[operator]  # (None is tested first)
        res.violation(f"step {p}'s executions saw step attempts {tries} (by lease): each claim must count one "
                      "more", run_id, **wf.evidence(run_id, p))


def _claims_counted(wf: Workflows, res: Result, run_id: str, row: StepRow, execs: list[Execution], leases) -> None:
    """row.attempt is the number of claims: never below what an execution saw, never above the leases
    that could have claimed, and the attempt of the claim the row holds."""
    p = row.position
    if row.lease_epoch not in leases:
        res.violation(f"step {p} is held by lease {row.lease_epoch}, which the run was never granted", run_id,
                      **wf.evidence(run_id, p))
    could = sum(1 for e in leases if e <= row.lease_epoch)
    if row.attempt > could:
        res.violation(f"step {p} has attempt {row.attempt} but only {could} lease(s) up to its claim's lease "
                      f"{row.lease_epoch} could have claimed it", run_id, **wf.evidence(run_id, p))
    seen = [x for x in _first_per_epoch(execs) if x.step_attempt is not None]
    if seen and max(x.step_attempt or 0 for x in seen) > row.attempt:
        res.violation(f"step {p} has attempt {row.attempt} but an execution saw step attempt "
                      f"{max(x.step_attempt or 0 for x in seen)}", run_id, **wf.evidence(run_id, p))
    mine = [x for x in seen if x.lease_epoch == row.lease_epoch]
    if mine and mine[0].step_attempt != row.attempt:
        res.violation(f"step {p}'s claim of lease {row.lease_epoch} is attempt {row.attempt} but its execution saw "
                      f"step attempt {mine[0].step_attempt}", run_id, **wf.evidence(run_id, p))
    later = [x for x in seen if x.lease_epoch > row.lease_epoch]
    if later and row.state != COMPLETED:
        res.violation(f"step {p} ran under lease {later[0].lease_epoch}, after the claim the row holds (lease "
                      f"{row.lease_epoch}): a claim was lost", run_id, **wf.evidence(run_id, p))
    claims = len({x.lease_epoch for x in seen} | {row.lease_epoch})
    if row.attempt > claims:
        res.count("claims_without_execution", row.attempt - claims)  # a sandbox killed between RUN and the step


def _rerun_explained(wf: Workflows, res: Result, run_id: str, p: int, x1: Execution, x2: Execution) -> None:
    res.count("re_executions")
    ended = next((e.outcome for e in wf.runs_of(run_id, "step_end", p) if e.lease_epoch == x1.lease_epoch), None)
    seen_done = any(d.lease_epoch == x1.lease_epoch for d in wf.runs_of(run_id, "step_done", p))
    att = wf.attempt_of(run_id, x1.lease_epoch)
    outcome = att.outcome if att is not None else None
    why = DEAD_LEASE.get(outcome or "")
    if why is None and ended == "raise" and outcome in ("SUSPENDED", "SUCCEEDED"):
        why = "step_failed_handled"  # the workflow caught the step's error: the next activation retries it
    if seen_done or why is None:
        res.violation(f"step {p} ran again under lease {x2.lease_epoch} after lease {x1.lease_epoch}, which "
                      f"ended {outcome or 'with no attempt row'} (its execution ended {ended or 'unrecorded'}"
                      f"{', and its activation got the committed outcome' if seen_done else ''}): not a claim "
                      "from a dead lease", run_id, **wf.evidence(run_id, p))
        return
    res.counts["why"][why] = res.counts["why"].get(why, 0) + 1
    if ended == "ok":
        res.count("duplicate_side_effects")


@invariant("wf_step_fenced", "P7")
def wf_step_fenced(run: Run, res: Result) -> None:
    """Every step write happened while the lease it names was current (the database's clock): a row is
    created or claimed inside its lease's life, and a step is committed before that lease ended. A
    write after the end is a zombie activation's, which the lease fence must refuse."""
    wf = Workflows.of(run)
    res.counts["late_writes"] = 0
    for run_id in wf.run_ids():
        lives = _lease_lives(wf, res, run_id)
        if lives is None:
            continue
        for row in wf.log(run_id):
            res.checked += 1
            life = lives.get(row.lease_epoch)
            if life is None:
                continue  # wf_step_claims reports a lease never granted
            writes = [("claimed", row.started)] + ([("committed", row.finished_at)] if row.kind == STEP else [])
            for what, at in writes:
                if at is None:
                    continue
                early = (life[0] - at).total_seconds() > FENCE_SLACK_S
                late = life[1] is not None and (at - life[1]).total_seconds() > FENCE_SLACK_S
                if early or late:
                    res.count("late_writes")
                    res.violation(f"step {row.position} {row.name!r} was {what} under lease {row.lease_epoch} at {at}, "
                                  f"{'before the lease began' if early else 'after the lease ended'} "
                                  f"({life[0]} .. {life[1]}): a write from outside its lease was accepted", run_id,
                                  **wf.evidence(run_id, row.position))


def _lease_lives(wf: Workflows, res: Result, run_id: str) -> dict | None:
    """{epoch: (granted at, ended at or None)} from the run's transition log."""
    lives: dict[int, list] = {}
    current = None
    for t in wf.run.dump.transitions.get(run_id, []):
        try:
            at = when(t.at)
        except (TypeError, ValueError):
            res.violation(f"the transition log's time {t.at!r} is not a timestamp: cannot place step writes", run_id)
            return None
        if t.to_state == "LEASED" and t.lease_epoch is not None:
            current = t.lease_epoch
            lives[current] = [at, None]
        elif t.from_state == "LEASED" and current in lives:
            lives[current][1] = at
    return {e: (a, b) for e, (a, b) in lives.items()}


# -- (c) ---------------------------------------------------------------------------------
@invariant("wf_step_log", "P7")
def wf_step_log(run: Run, res: Result) -> None:
    """Each run's step log is its code's call sequence (dense positions 0..n-1, each the name and kind the
    workflow calls there) and agrees with the run's state: a SUCCEEDED run logged every call, each
    COMPLETED or failed fatally; only the last row of a run may be RUNNING, and on a terminal run only
    when a cancel, expiry or failure interrupted it."""
    wf = Workflows.of(run)
    res.counts.update({"runs": 0, "rows": 0, "by_state": {}})
    for run_id, p in wf.duplicate_steps:
        res.violation(f"two rows at position {p}: the log forked", run_id, **wf.evidence(run_id))
    for run_id in wf.run_ids():
        res.checked += 1
        res.count("runs")
        task = run.dump.tasks.get(run_id)
        log = wf.log(run_id)
        res.count("rows", len(log))
        if task is None:
            res.violation("a step log of a run that has no task row", run_id, **wf.evidence(run_id))
            continue
        res.counts["by_state"][task.state] = res.counts["by_state"].get(task.state, 0) + 1
        for problem in _log_vs_code(wf, wf.task_type(task), log) + _log_vs_state(task.state, log):
            res.violation(problem, run_id, **wf.evidence(run_id))


def _log_vs_code(wf: Workflows, task_type: str | None, log: list[StepRow]) -> list[str]:
    layout = wf.layouts.get(task_type or "")
    problems = []
    if [s.position for s in log] != list(range(len(log))):
        problems.append(f"positions {[s.position for s in log]} are not dense from 0")
    if layout is None:
        return problems + [f"no layout known for workflow type {task_type!r} (run.json workflow_layouts)"]
    for s in log:
        want = layout[s.position] if s.position < len(layout) else None
        if want != (s.name, s.kind):
            problems.append(f"position {s.position} logged {s.kind} {s.name!r}; the code calls "
                            f"{want[1] + ' ' + repr(want[0]) if want else 'nothing'} there")
    return problems


def _settled(s: StepRow) -> bool:
    """A row the workflow got past: completed, failed fatally, or a wait that timed out (fatal too)."""
    return s.state == COMPLETED or (s.state == FAILED and s.fatal)


def _log_vs_state(state: str | None, log: list[StepRow]) -> list[str]:
    problems = []
    for s in log[:-1]:
        if not _settled(s):
            what = f"{s.state} (not fatal)" if s.state == FAILED else s.state
            problems.append(f"position {s.position} {s.name!r} is {what} but the run went on to position "
                            f"{log[-1].position}")
    if state == "SUCCEEDED":
        if log and not _settled(log[-1]):
            problems.append(f"the run SUCCEEDED but its last step {log[-1].name!r} is {log[-1].state}"
                            f"{'' if log[-1].state == RUNNING else ' and not fatal'}")
    elif state == "WAITING" and (not log or log[-1].state != RUNNING or log[-1].kind not in (SLEEP, WAIT)):
        problems.append(f"the run is WAITING but its log ends {log[-1].state + ' ' + log[-1].kind if log else 'empty'}"
                        "; a waiting run waits on a pending sleep or wait at the end of its log")
    return problems


@invariant("wf_layout_complete", "P7")
def wf_layout_complete(run: Run, res: Result) -> None:
    """A SUCCEEDED run logged every checkpoint call its code makes (the layout's length)."""
    wf = Workflows.of(run)
    for run_id in wf.run_ids():
        task = run.dump.tasks.get(run_id)
        layout = wf.layouts.get(wf.task_type(task) or "")
        if task is None or task.state != "SUCCEEDED" or layout is None:
            continue
        res.checked += 1
        n = len(wf.log(run_id))
        if n != len(layout):
            res.violation(f"the run SUCCEEDED with {n} logged calls; its code makes {len(layout)}", run_id,
                          **wf.evidence(run_id))


# -- (d) ---------------------------------------------------------------------------------
@invariant("wf_waiting", "P7")
def wf_waiting(run: Run, res: Result) -> None:
    """The state machine has exactly the four WAITING edges; every suspension is a LEASED -> WAITING under
    the lease, with its attempt SUSPENDED; a WAITING run has what will wake it (a wake timer for a sleep or
    a timed wait, an open wait row for a wait); a finished run keeps no open wait."""
    wf = Workflows.of(run)
    res.counts["suspensions"] = 0
    edges = {(a, b) for a, bs in sm.ALLOWED.items() for b in bs if "WAITING" in (a, b)}
    res.checked += 1
    if edges != set(WAITING_EDGES):
        res.violation(f"the state machine ({sm.SOURCE}) has WAITING edges {sorted(edges)}, not the four of the "
                      f"design {list(WAITING_EDGES)}")
    for run_id in wf.run_ids():
        task = run.dump.tasks.get(run_id)
        if task is None:
            continue
        res.checked += 1
        _suspensions_match(wf, res, run_id)
        if task.state == "WAITING":
            _waiting_has_waker(wf, res, run_id)
        open_waits = wf.waits.get(run_id, {})
        if sm.is_terminal(task.state) and open_waits:
            res.violation(f"the run is {task.state} but still has open waits at {sorted(open_waits)}", run_id,
                          **wf.evidence(run_id))
        for pos in open_waits:
            row = wf.steps.get(run_id, {}).get(pos)
            if row is None or row.kind != WAIT or row.state != RUNNING:
                res.violation(f"an open wait at position {pos} whose step is "
                              f"{'missing' if row is None else row.state + ' ' + row.kind}", run_id,
                              **wf.evidence(run_id))


def _suspensions_match(wf: Workflows, res: Result, run_id: str) -> None:
    log = wf.run.dump.transitions.get(run_id, [])
    into = [t.lease_epoch for t in log if t.to_state == "WAITING"]
    suspended = [a.lease_epoch for a in wf.run.dump.attempts.get(run_id, []) if a.outcome == "SUSPENDED"]
    res.count("suspensions", len(into))
    if sorted(into) != sorted(suspended):
        res.violation(f"the run went WAITING under leases {into} but its SUSPENDED attempts are {suspended}",
                      run_id, **wf.evidence(run_id))
    for t in log:
        if t.to_state == "WAITING" and t.from_state != "LEASED":
            res.violation(f"v{t.version} {t.from_state}->WAITING: only an activation suspends", run_id)


def _waiting_has_waker(wf: Workflows, res: Result, run_id: str) -> None:
    log = wf.log(run_id)
    last = log[-1] if log else None
    kinds = {str(r.get("kind")) for r in wf.run.dump.timers.get(run_id, [])}
    if last is None or last.state != RUNNING or last.kind not in (SLEEP, WAIT):
        return  # wf_step_log reports it
    needs_timer = last.kind == SLEEP or last.wake_at is not None
    if needs_timer and "wake" not in kinds:
        res.violation(f"WAITING on {last.kind} {last.name!r} (wake at {last.wake_at}) with no wake timer: nothing "
                      "will wake it", run_id, **wf.evidence(run_id))
    if last.kind == WAIT and last.position not in wf.waits.get(run_id, {}):
        res.violation(f"WAITING on event {last.name!r} with no open wait row: no event can wake it", run_id,
                      **wf.evidence(run_id))


# -- events --------------------------------------------------------------------------------
@invariant("wf_events", "P7")
def wf_events(run: Run, res: Result) -> None:
    """An acknowledged event sent to a run is in its inbox (never lost); each inbox event is consumed by
    at most one wait, which completed with its data; each completed wait consumed one event; and no wait
    timed out while a matching event received before its deadline sat unconsumed."""
    wf = Workflows.of(run)
    res.counts.update({"sent": 0, "acked": 0, "inbox": 0, "consumed": 0, "timed_out_waits": 0})
    _acked_events_kept(run, wf, res)
    broadcast = any(op.f == "send_event" for op in run.ops)
    for run_id in wf.run_ids():
        inbox = wf.inbox.get(run_id, [])
        res.count("inbox", len(inbox))
        by_wait: dict[int, list[dict]] = defaultdict(list)
        for ev in inbox:
            if ev.get("consumed_by") is not None:
                by_wait[int(ev["consumed_by"])].append(ev)
        res.count("consumed", sum(len(v) for v in by_wait.values()))
        for pos, evs in sorted(by_wait.items()):
            res.checked += 1
            row = wf.steps.get(run_id, {}).get(pos)
            if len(evs) > 1:
                res.violation(f"{len(evs)} events consumed by the wait at {pos}", run_id, **wf.evidence(run_id))
            if row is None or row.kind != WAIT or row.state != COMPLETED or row.result != evs[0]["data"]:
                res.violation(f"event {evs[0]['data']!r} consumed by position {pos}, whose step is "
                              f"{'missing' if row is None else f'{row.state} {row.kind} with {row.result!r}'}",
                              run_id, **wf.evidence(run_id))
        for row in wf.log(run_id):
            if row.kind != WAIT:
                continue
            res.checked += 1
            if row.state == COMPLETED and not broadcast and row.position not in by_wait:
                res.violation(f"the wait at {row.position} completed with {row.result!r} but consumed no inbox "
                              "event", run_id, **wf.evidence(run_id))
            if row.state == FAILED:
                res.count("timed_out_waits")
                _no_event_missed(wf, res, run_id, row, inbox)


def _no_event_missed(wf: Workflows, res: Result, run_id: str, row: StepRow, inbox: list[dict]) -> None:
    if row.wake_at is None:
        return
    match = _match_of(wf, run_id, row.name)
    for ev in inbox:
        received = when(ev.get("received_at"))
        if ev.get("name") != row.name or ev.get("consumed_by") is not None or received is None:
            continue
        if match is None or not _contains(ev["data"], match):
            continue
        if (row.wake_at - received).total_seconds() > CLOCK_SLACK_S:
            res.violation(f"the wait at {row.position} for {row.name!r} timed out at {row.wake_at} while event "
                          f"{ev['data']!r}, received at {received}, sat unconsumed in the inbox", run_id,
                          **wf.evidence(run_id))


def _match_of(wf: Workflows, run_id: str, name: str) -> dict | None:
    """The match the run's wait `name` used: the payload fields run.json's workflow_event_match names
    (its open wait row is gone once it timed out). None: unknown, so no event is judged."""
    fields = (wf.run.meta.get("workflow_event_match") or {}).get(name)
    task = wf.run.dump.tasks.get(run_id)
    if fields is None or task is None or not isinstance(task.payload, dict):
        return None
    return {f: task.payload.get(f) for f in fields}


def _contains(data, match) -> bool:
    """jsonb containment (data @> match) for the objects the fault app matches on."""
    if isinstance(match, dict):
        return isinstance(data, dict) and all(k in data and _contains(data[k], v) for k, v in match.items())
    return data == match


def _acked_events_kept(run: Run, wf: Workflows, res: Result) -> None:
    """Every acknowledged send_workflow_event's data is in the run's inbox; an event only ambiguously
    sent may be absent; none appears more often than it was sent."""
    sends: dict[tuple[str, str], list] = defaultdict(list)
    for op in run.ops:
        if op.f != "send_workflow_event":
            continue
        res.count("sent")
        v = op.value or {}
        sends[(str(v.get("task_id")), _key(v.get("data")))].append(op)
    for (run_id, data), ops in sorted(sends.items()):
        res.checked += 1
        held = [ev for ev in wf.inbox.get(run_id, []) if _key(ev["data"]) == data]
        acked = [op for op in ops if op.ok]
        res.count("acked", len(acked))
        if acked and not held:
            res.violation(f"event {data} was acknowledged but the run's inbox does not hold it", run_id,
                          send=acked[0].brief(), **wf.evidence(run_id))
        if len(held) > len([op for op in ops if op.type != "fail"]):
            res.violation(f"event {data} is in the inbox {len(held)} times but was sent {len(ops)} time(s)", run_id,
                          **wf.evidence(run_id))


def _key(data) -> str:
    return json.dumps(data, sort_keys=True)
