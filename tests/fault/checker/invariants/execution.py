"""Invariants over executions, read from the ledger the handlers append to and
checked against the leases in the transition log: P3 (at-least-once with every
duplicate explained, stale completions rejected)."""

from __future__ import annotations

import collections
from collections import defaultdict
from itertools import pairwise

from .. import statemachine as sm
from ..core import Result, invariant
from ..model import Run

# Why a lease may end without the handler's outcome being accepted; a re-run
# after one of these is an explained duplicate (or a plain retry).
_EXPLAINED = {"LEASE_EXPIRED": "lease_expired", "CRASHED": "sandbox_crashed", "TIMED_OUT": "timed_out",
              "FAILED": "handler_failed_retry"}
_EXPLAINED_CLASSES = {"LeaseExpired": "lease_expired", "SandboxCrashed": "sandbox_crashed",
                      "StartToCloseTimeout": "timed_out", "SandboxStartFailed": "sandbox_start_failed",
                      # a workflow activation that could not reach the platform to record a step
                      "StepUnavailable": "step_unavailable"}
# Attempts that ended for a platform reason, not because of the handler's code.
PLATFORM_OUTCOMES = {"CRASHED", "LEASE_EXPIRED", "TIMED_OUT"}


def platform_fault(attempt) -> bool:
    return attempt.outcome in PLATFORM_OUTCOMES or (attempt.error_class or "") in _EXPLAINED_CLASSES


def _starts(run: Run, task_id: str) -> list[dict]:
    return [e for e in run.ledger_by_task().get(task_id, []) if e.get("phase") == "start"]


def _ends(run: Run, task_id: str) -> list[dict]:
    return [e for e in run.ledger_by_task().get(task_id, []) if e.get("phase") == "end"]


@invariant("single_completion", "P3")
def single_completion(run: Run, res: Result) -> None:
    """At most one accepted completion per lease and per task, and it came from the lease it ended."""
    res.counts["stale_completions_accepted"] = 0
    for task_id, log in run.dump.transitions.items():
        res.checked += 1
        leased_epoch = None
        exits = defaultdict(list)
        for t in log:
            if t.from_state == "LEASED":
                exits[leased_epoch].append(t)
                if t.lease_epoch is not None and leased_epoch is not None and t.lease_epoch != leased_epoch:
                    res.violation(f"v{t.version} ended lease {leased_epoch} but carries epoch {t.lease_epoch}",
                                  task_id)
            if t.to_state == "LEASED":
                leased_epoch = t.lease_epoch
        for epoch, outs in exits.items():
            if len(outs) > 1:
                res.violation(f"lease {epoch} was completed {len(outs)} times", task_id)
        terminal = [t for t in log if sm.is_terminal(t.to_state)]
        if len(terminal) > 1:
            res.violation(f"{len(terminal)} terminal transitions", task_id)
        succeeded = [a for a in run.dump.attempts.get(task_id, []) if a.outcome == "SUCCEEDED"]
        if len(succeeded) > 1:
            res.violation(f"{len(succeeded)} attempts recorded as SUCCEEDED", task_id)
        _check_result_provenance(run, res, task_id, log)


def _check_result_provenance(run: Run, res: Result, task_id: str, log) -> None:
    """The test app stamps its result with the lease epoch it ran under: an
    accepted success must carry the epoch of the lease that it ended."""
    task = run.dump.tasks.get(task_id)
    if task is None or task.state != "SUCCEEDED" or not isinstance(task.result, dict):
        return
    stamped = task.result.get("lease_epoch")
    if stamped is None:
        return
    wins = [t for t in log if t.to_state == "SUCCEEDED"]
    if wins and wins[-1].lease_epoch is not None and int(stamped) != wins[-1].lease_epoch:
        res.count("stale_completions_accepted")
        res.violation(f"the result was produced under lease {stamped} but accepted as the completion of "
                      f"lease {wins[-1].lease_epoch}: a stale completion was accepted", task_id)
    ended_ok = {int(e.get("lease_epoch", -1)) for e in _ends(run, task_id) if e.get("outcome") == "ok"}
    if run.ledger_by_task().get(task_id) and int(stamped) not in ended_ok:
        res.violation(f"accepted result of lease {stamped} but no execution under it returned", task_id)


@invariant("duplicates_explained", "P3")
def duplicates_explained(run: Run, res: Result) -> None:
    """Every execution ran under a granted lease, no lease ran twice, and each re-run follows a lease
    that ended by expiry, crash, timeout or a handler failure."""
    res.counts.update({"executions": 0, "extra_executions": 0, "duplicate_side_effects": 0,
                       "leases_never_started": 0, "why": {}})
    for task_id in sorted(run.ledger_by_task()):
        res.checked += 1
        starts = _starts(run, task_id)
        res.count("executions", len(starts))
        log = run.dump.transitions.get(task_id, [])
        leases = {t.lease_epoch: t for t in log if t.to_state == "LEASED"}
        attempts = {a.lease_epoch: a for a in run.dump.attempts.get(task_id, [])}
        by_epoch: dict[int, list[dict]] = defaultdict(list)
        for e in starts:
            by_epoch[int(e.get("lease_epoch", -1))].append(e)
        for epoch, runs in sorted(by_epoch.items()):
            if epoch not in leases:
                res.violation(f"an execution ran under lease {epoch}, which was never granted", task_id)
            if len(runs) > 1:
                res.violation(f"lease {epoch} was executed {len(runs)} times", task_id)
            att = attempts.get(epoch)
            if att is not None and any(int(e.get("attempt", att.attempt)) != att.attempt for e in runs):
                res.violation(f"the handler saw attempt {runs[0].get('attempt')} under lease {epoch}, "
                              f"the store charged attempt {att.attempt}", task_id)
        _explain_reruns(run, res, task_id, sorted(by_epoch), attempts, log)
        res.count("leases_never_started", len(set(leases) - set(by_epoch)))
    for task_id in run.dump.transitions:
        if task_id not in run.ledger_by_task():
            leases = [t for t in run.dump.transitions[task_id] if t.to_state == "LEASED"]
            res.count("leases_never_started", len(leases))


def _exit_of(log, epoch):
    """The transition that ended the lease with this epoch, if any."""
    current = None
    for t in log:
        if t.to_state == "LEASED":
            current = t.lease_epoch
        elif t.from_state == "LEASED" and current == epoch:
            return t
    return None


def _explain_reruns(run: Run, res: Result, task_id: str, epochs: list[int], attempts, log) -> None:
    ended_ok = {int(e.get("lease_epoch", -1)) for e in _ends(run, task_id) if e.get("outcome") == "ok"}
    for prev, cur in pairwise(epochs):
        res.count("extra_executions")
        exit_ = _exit_of(log, prev)
        att = attempts.get(prev)
        why = None
        if att is not None:
            why = _EXPLAINED_CLASSES.get(att.error_class or "") or _EXPLAINED.get(att.outcome or "")
        if att is None and exit_ is not None and exit_.to_state == "RETRY_WAIT":
            why = _EXPLAINED_CLASSES.get(exit_.reason or "", f"retry:{exit_.reason}")
        if why is None or (exit_ is not None and sm.is_terminal(exit_.to_state)):
            res.violation(f"lease {cur} ran after lease {prev}, which ended "
                          f"{exit_.to_state if exit_ else 'never'} ({att.outcome if att else 'no attempt row'}): "
                          "an unexplained duplicate", task_id)
            continue
        if prev in ended_ok:  # the handler's side effect happened twice
            res.count("duplicate_side_effects")
            res.counts["why"][why] = res.counts["why"].get(why, 0) + 1


@invariant("handler_outcomes", "P1")
def handler_outcomes(run: Run, res: Result) -> None:
    """Each acked task ends in a state its handler script allows (`expect`), or CANCELED after a
    cancel, or FAILED with every attempt charged when faults used them up."""
    cancelled = {(op.value or {}).get("task_id") for op in run.ops if op.f == "cancel"}
    for item in run.items:
        expect = item.request.get("expect")
        task = run.dump.tasks.get(item.task_id) if item.task_id else None
        if not expect or task is None or not sm.is_terminal(task.state):
            continue
        res.checked += 1
        allowed = set(expect) | ({"CANCELED"} if item.task_id in cancelled else set())
        if task.state in allowed:
            _check_attempts_spent(res, item, task, run)
            continue
        attempts = run.dump.attempts.get(item.task_id, [])
        faults = [a for a in attempts if platform_fault(a)]
        if task.state == "FAILED" and faults and task.attempt == task.max_attempts:
            res.count("failed_by_faults")
            continue
        why = collections.Counter(a.error_class or a.outcome for a in attempts)
        res.violation(f"ended {task.state} (attempts: {', '.join(f'{k} x{v}' for k, v in why.items()) or 'none'}); "
                      f"the handler script allows {sorted(allowed)}", item.task_id, request=item.request)


def _check_attempts_spent(res: Result, item, task, run: Run) -> None:
    """A task whose handler always raises a retryable error is FAILED only after all its attempts."""
    if item.request.get("mode") != "fail" or task.state != "FAILED":
        return
    if task.max_attempts is not None and task.attempt is not None and task.attempt < task.max_attempts:
        res.violation(f"FAILED after {task.attempt} of {task.max_attempts} attempts with retryable errors",
                      item.task_id)
