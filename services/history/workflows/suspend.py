"""A SUSPENDED completion (LEASED -> WAITING) and the wake-up (WAITING -> ENQUEUED).

Suspensions take their own statements inside CompleteTasks' transaction: the ordinary
completions of a request go the optimistic way they always do (leases/lifecycle.py), and only
a request that holds a suspension runs these. A suspension locks its task row first
(task_complete_lock), and the statement after the lock reads the awaited step: an event that
completed it in between (it locks the task row too) is seen, and the run wakes at once
instead of waiting for a wake-up that already happened.
"""

from __future__ import annotations

from collections.abc import Sequence

from ratchet.libs import taskstate
from ratchet.libs.taskstate import CancelReason, TaskState
from ratchet.services.history.decide import on_suspend
from ratchet.services.history.model import SuspendIn, Transition
from ratchet.services.history.store import Tx

WOKEN_FIRST_REASON = "woken: the awaited step completed before the run suspended"


async def apply_suspensions(tx: Tx, items: Sequence[SuspendIn], timer_in: dict[str, float]) -> dict:
    """Apply suspensions whose lease is current; {task_id: (state, version)} of those applied.
    timer_in collects the wake timer of each run left WAITING (the timer loop's hint)."""
    locked = {v.task_id: v for v in await tx.task_complete_lock([c.task_id for c in items],
                                                                 [c.lease_epoch for c in items])}
    held = await _compensating(tx, locked)
    waits: list[tuple[SuspendIn, Transition]] = []
    ends: list[Transition] = []
    for c in sorted(items, key=lambda c: c.task_id):
        view = locked.get(c.task_id)
        if view is None:
            continue  # a stale lease: answered as any stale completion
        t = on_suspend(view, c)
        if t.to_state == TaskState.WAITING:
            waits.append((c, t))
        else:
            ends.append(t)
    applied: dict = {}
    if ends:  # a cancel asked for while the activation ran: the run ends
        applied.update(await tx.task_transition_apply(ends))
        await tx.workflow_waits_delete_batch([t.task_id for t in ends if t.task_id in applied])
    if waits:
        applied.update(await _suspend(tx, waits, timer_in, held))
    return applied


async def _compensating(tx: Tx, views: dict) -> set[str]:
    """The user-cancelled runs among these that keep their cancel for compensations (marked):
    their suspension does not end them, it wakes them at once to run the compensations."""
    asked = [tid for tid, v in views.items() if v.cancel_reason == CancelReason.USER]
    held = await tx.workflow_cancelled_batch(asked) if asked else set()
    for tid in held:
        views[tid].compensating = True
    return held


async def _suspend(tx: Tx, waits: list[tuple[SuspendIn, Transition]], timer_in: dict[str, float],
                   held: frozenset[str] | set[str] = frozenset()) -> dict:
    rows = await tx.workflow_suspend_batch([t for _, t in waits], [c.suspend_position for c, _ in waits],
                                           [c.wake_after_s for c, _ in waits], [c.checkpoint for c, _ in waits])
    applied = {r.task_id: (r.state, r.version) for r in rows}
    first = [r.task_id for r in rows if not r.awaiting or r.task_id in held]
    woken = await wake(tx, first, WOKEN_FIRST_REASON) if first else {}
    applied.update({tid: (TaskState.ENQUEUED.value, v) for tid, v in woken.items()})
    for c, _ in waits:
        if c.task_id in applied and c.task_id not in woken and c.wake_after_s is not None:
            timer_in[c.task_id] = c.wake_after_s
    return applied


async def wake(tx: Tx, ids: Sequence[str], reason: str) -> dict[str, int]:
    """WAITING -> ENQUEUED (due now, the wake timer gone) for the runs of ids still WAITING;
    {task_id: version} woken. The caller announces ready work after its commit."""
    taskstate.check(TaskState.WAITING, TaskState.ENQUEUED)
    return await tx.workflow_wake_batch(sorted(ids), reason)
