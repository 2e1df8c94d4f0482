"""The invariant registry and the verdict.

An invariant is a function ``(run, result) -> None`` registered with
``@invariant(name, promise)``; it counts what it checked in ``result.checked``
and calls ``result.violation(...)`` for each counterexample. Invariants live
in modules under ``tests/fault/checker/invariants/``; a later capability
(workflows, quotas) adds its own module and lists it in ``MODULES`` (or passes
``modules=`` to ``check``), without touching the existing ones.
"""

from __future__ import annotations

import dataclasses
import importlib
import shlex
import time
from collections.abc import Callable
from typing import Any

from .model import Run

MODULES = [
    "tests.fault.checker.invariants.tasks",
    "tests.fault.checker.invariants.execution",
    "tests.fault.checker.invariants.clients",
    "tests.fault.checker.invariants.timers",
    "tests.fault.checker.invariants.cron",
    "tests.fault.checker.invariants.workflows",
]
MAX_EXAMPLES = 5  # counterexamples kept per invariant (the total is still counted)

_REGISTRY: dict[str, Invariant] = {}


@dataclasses.dataclass(frozen=True)
class Invariant:
    name: str
    promise: str  # which promise of docs/reliability.md it guards (P1..)
    doc: str
    fn: Callable[[Run, Result], None]
    module: str


def invariant(name: str, promise: str):
    """Register a check under a stable name (the verdict's key)."""
    def wrap(fn):
        _REGISTRY[name] = Invariant(name, promise, (fn.__doc__ or "").strip().split("\n")[0], fn, fn.__module__)
        return fn
    return wrap


class Result:
    """What one invariant found."""

    def __init__(self, inv: Invariant, run: Run):
        self.inv, self.run = inv, run
        self.checked = 0
        self.violations: list[dict] = []
        self.total_violations = 0
        self.counts: dict[str, Any] = {}
        self.error: str | None = None

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def violation(self, problem: str, task_id: str | None = None, **extra: Any) -> None:
        """Record a counterexample: the problem, and the task's slices of the log,
        attempts, ledger, client ops and timers (the smallest set that shows it)."""
        self.total_violations += 1
        if len(self.violations) >= MAX_EXAMPLES:
            return
        ex: dict[str, Any] = {"problem": problem}
        if task_id is not None:
            ex["task_id"] = task_id
            ex.update(task_slices(self.run, task_id))
        ex.update(extra)
        self.violations.append(ex)

    @property
    def valid(self) -> bool:
        return self.error is None and self.total_violations == 0

    def as_dict(self) -> dict:
        out = {"valid": self.valid, "promise": self.inv.promise, "what": self.inv.doc,
               "checked": self.checked, "violations": self.total_violations, "counts": self.counts,
               "counterexamples": self.violations}
        if self.error:
            out["error"] = self.error
        return out


def task_slices(run: Run, task_id: str) -> dict:
    """The evidence about one task from every source."""
    d = run.dump
    task = d.tasks.get(task_id)
    row = None
    if task is not None:
        row = {"shard": task.shard, "state": task.state, "version": task.version, "attempt": task.attempt,
               "max_attempts": task.max_attempts, "lease_epoch": task.lease_epoch, "op": task.op_id,
               "result": task.result, "cancel_requested": task.cancel_requested}
    return {"task": row,
            "log": [t.brief() for t in d.transitions.get(task_id, [])],
            "attempts": [a.brief() for a in d.attempts.get(task_id, [])],
            "ledger": run.ledger_by_task().get(task_id, []),
            "ops": [op.brief() for op in run.ops_for_task(task_id)][:20],
            "timers": d.timers.get(task_id, [])}


def load_modules(modules: list[str] | None = None) -> list[Invariant]:
    names = modules or MODULES
    for name in names:
        importlib.import_module(name)
    return [inv for inv in _REGISTRY.values() if inv.module in names]


def check(run: Run, modules: list[str] | None = None, only: list[str] | None = None) -> dict:
    """Run every registered invariant over a run and build the JSON verdict."""
    started = time.monotonic()
    results = {}
    for inv in load_modules(modules):
        if only and inv.name not in only:
            continue
        res = Result(inv, run)
        try:
            inv.fn(run, res)
        except Exception as e:  # noqa: BLE001 - a checker crash is a failed verdict, never a pass
            res.error = f"{type(e).__name__}: {e}"
        results[inv.name] = res.as_dict()
    from . import statemachine
    return {
        "valid": all(r["valid"] for r in results.values()),
        "seed": run.meta.get("seed"),
        "scenario": run.meta.get("scenario"),
        "rerun": run.meta.get("rerun") or rerun_command(run.meta),
        "recheck": f".venv/bin/python -m tests.fault.checker {shlex.quote(str(run.meta.get('run_dir', 'RUN_DIR')))}",
        "state_machine": statemachine.SOURCE,
        "schedule": run.nemesis,
        "stats": stats(run),
        "invariants": results,
        "checker_seconds": round(time.monotonic() - started, 3),
    }


def rerun_command(meta: dict) -> str:
    scenario = meta.get("scenario")
    if not scenario:
        return ""
    test = meta.get("test", "tests/fault")
    return (f"RATCHET_FAULT_SEED={meta.get('seed')} .venv/bin/python -m pytest {shlex.quote(test)} "
            f"-k {shlex.quote(scenario)} -m '' -p no:cacheprovider")


def stats(run: Run) -> dict:
    by_type: dict[str, int] = {}
    for op in run.ops:
        by_type[f"{op.f}:{op.type}"] = by_type.get(f"{op.f}:{op.type}", 0) + 1
    items = run.items
    return {"ops": len(run.ops), "ops_by_outcome": by_type,
            "enqueued_items": len(items),
            "acked": sum(1 for i in items if i.op.ok),
            "ambiguous": sum(1 for i in items if i.op.type == "info"),
            "failed": sum(1 for i in items if i.op.type == "fail"),
            "tasks_in_db": len(run.dump.tasks),
            "executions": sum(1 for e in run.ledger if e.get("phase") == "start"),
            "nemesis_events": len(run.nemesis)}
