"""Invariants over the timer table at quiescence (P1): the one timer mechanism
must neither leave timers behind nor lose the ones a waiting task needs."""

from __future__ import annotations

import datetime as dt

from .. import statemachine as sm
from ..core import Result, invariant
from ..model import Run, pick

# A waiting state and the timer kinds, at least one of which must exist for the task to move on.
NEEDS = {"RETRY_WAIT": {"retry", "schedule_to_close"}, "LEASED": {"lease"}}
MAX_LAG_S = 5.0  # a due timer not fired this long after its time counts as lost


def _when(value) -> dt.datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


@invariant("timers", "P1")
def timers(run: Run, res: Result) -> None:
    """No timer outlives its task's end, every waiting task has the timer that will move it, and no
    due timer is left unfired."""
    now = _when(run.dump.db_now) if run.dump.db_now not in (None, "now") else None
    for task_id, task in run.dump.tasks.items():
        res.checked += 1
        rows = run.dump.timers.get(task_id, [])
        kinds = {pick(r, "kind") for r in rows}
        if sm.is_terminal(task.state) and rows:
            res.violation(f"{task.state} task still has timers {sorted(kinds)}", task_id)
        need = NEEDS.get(task.state or "")
        if need and not kinds & need:
            res.violation(f"{task.state} task has no {'/'.join(sorted(need))} timer: nothing will move it",
                          task_id)
        for r in rows:
            fire_at = _when(pick(r, "fire_at"))
            if now is not None and fire_at is not None and (now - fire_at).total_seconds() > MAX_LAG_S:
                res.count("overdue")
                res.violation(f"{pick(r, 'kind')} timer due {(now - fire_at).total_seconds():.1f}s ago never fired",
                              task_id)
