"""Heartbeats, completions and cancels: everything that happens to a task between its
lease and its terminal state (timers are in timers/firing.py).

Every change is a compare-and-set on (task_id, state, lease_epoch); a
request that lost the race gets an answer saying so and changes nothing.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import asyncpg

from ratchet.libs import gates
from ratchet.libs.taskstate import TERMINAL, CancelReason, TaskState
from ratchet.services.history.decide import Rand, cancel_now, on_completion
from ratchet.services.history.errors import TaskNotFound
from ratchet.services.history.model import CompletionIn, SuspendIn, TaskView, Transition
from ratchet.services.history.store import Store, Tx
from ratchet.services.history.store.rows import CancelLocked
from ratchet.services.history.workflows.suspend import apply_suspensions


@dataclasses.dataclass(frozen=True)
class HeartbeatOut:
    """The answer to one lease: CONTINUE, CANCEL or LEASE_LOST."""

    task_id: str
    lease_epoch: int
    action: str
    reason: str = ""
    kill_after_s: float | None = None


async def record_heartbeats(conn: asyncpg.Connection, store: Store, leases: Sequence[tuple],
                            lease_s: float, grace_s: float) -> list[HeartbeatOut]:
    """Extend the leases still held, storing any checkpoint under the same
    fence; one statement for the whole batch. `leases` holds
    (task_id, lease_epoch) or (task_id, lease_epoch, checkpoint or None)."""
    rows = await store.on(conn).task_heartbeat_batch([x[0] for x in leases], [x[1] for x in leases], lease_s,
                                                     grace_s, [x[2] if len(x) > 2 else None for x in leases])
    held = {(str(r.task_id), r.lease_epoch): r for r in rows}
    out = []
    for task_id, epoch, *_ in leases:
        r = held.get((task_id, epoch))
        if r is None:
            out.append(HeartbeatOut(task_id, epoch, "LEASE_LOST",
                                    "the lease is no longer held (expired, revoked, completed or a stale epoch)"))
        elif r.cancel_requested:
            out.append(HeartbeatOut(task_id, epoch, "CANCEL", _cancel_text(r.cancel_reason),
                                    max(0.0, r.kill_after_s or 0.0)))
        else:
            out.append(HeartbeatOut(task_id, epoch, "CONTINUE"))
    return out


def _cancel_text(reason: str | None) -> str:
    return {
        CancelReason.USER.value: "the task was cancelled",
        CancelReason.START_TO_CLOSE.value: "the attempt passed its start_to_close timeout",
        CancelReason.SCHEDULE_TO_CLOSE.value: "the task passed its schedule_to_close timeout",
    }.get(reason or "", "stop requested")


@dataclasses.dataclass(frozen=True)
class CompletionOut:
    """The outcome of one completion."""

    task_id: str
    accepted: bool
    state: TaskState | None
    reason: str = ""
    # Accepted into RETRY_WAIT (or WAITING with a wake-up): its retry (wake) timer is due in this long.
    retry_in_s: float | None = None


async def complete_tasks(conn: asyncpg.Connection, store: Store, items: Sequence[CompletionIn],
                         rand: Rand = random.random, *, suspensions: bool = False) -> list[CompletionOut]:
    """Apply completions whose lease is current; reject the rest without effect. suspensions:
    some items are SUSPENDED completions (SuspendIn, workflows/suspend.py); without it the
    items are ordinary and nothing looks for one."""
    first: dict[str, int] = {}
    for i, c in enumerate(items):
        first.setdefault(c.task_id, i)
    uniq = [items[i] for i in sorted(first.values())]
    retry_in: dict[str, float] = {}
    await gates.reach("history.complete.received")  # fault tests: before any lock is taken
    async with store.tx(conn) as tx:
        if suspensions:
            applied = await _apply_with_suspensions(tx, uniq, rand, retry_in)
        else:
            applied = await _apply_optimistic(tx, uniq, rand, retry_in)
        others = [c.task_id for c in uniq if c.task_id not in applied]
        states = await tx.task_state_batch(others) if others else {}
        await gates.reach("history.complete.before_commit")  # fault tests: applied, not committed
    out = []
    for i, c in enumerate(items):
        if first[c.task_id] != i:
            out.append(CompletionOut(c.task_id, False, _state(states, applied, c.task_id),
                                     "duplicate completion in one request; the first one counted"))
        elif c.task_id in applied:
            out.append(CompletionOut(c.task_id, True, TaskState(applied[c.task_id][0]),
                                     retry_in_s=retry_in.get(c.task_id)))
        elif c.task_id in states:
            out.append(CompletionOut(c.task_id, False, TaskState(states[c.task_id]),
                                     "stale lease: the task is no longer leased under this epoch"))
        else:
            out.append(CompletionOut(c.task_id, False, None, "unknown task"))
    return out


async def _apply_optimistic(tx: Tx, uniq: Sequence[CompletionIn], rand: Rand, retry_in: dict[str, float]) -> dict:
    """Decide from an unlocked read and apply with a compare-and-set that includes the cancel
    request read; a row that changed in between (a cancel request, a timer, another completion)
    is decided again under a row lock. Without contention no row is locked before its update."""
    read = await tx.task_complete_read([c.task_id for c in uniq], [c.lease_epoch for c in uniq])
    applied = await _decide_and_apply(tx, uniq, read, rand, optimistic=True, retry_in=retry_in)
    seen = {v.task_id for v in read}
    raced = [c for c in uniq if c.task_id in seen and c.task_id not in applied]
    if raced:
        locked = await tx.task_complete_lock([c.task_id for c in raced], [c.lease_epoch for c in raced])
        applied.update(await _decide_and_apply(tx, raced, locked, rand, optimistic=False, retry_in=retry_in))
    return applied


async def _apply_with_suspensions(tx: Tx, uniq: Sequence[CompletionIn], rand: Rand,
                                  retry_in: dict[str, float]) -> dict:
    """A request that holds suspensions: its ordinary completions as always, then the
    suspensions by their own statements, in the same transaction."""
    plain = [c for c in uniq if not isinstance(c, SuspendIn)]
    applied = await _apply_optimistic(tx, plain, rand, retry_in) if plain else {}
    applied.update(await apply_suspensions(tx, [c for c in uniq if isinstance(c, SuspendIn)], retry_in))
    return applied


async def _decide_and_apply(tx: Tx, items: Sequence[CompletionIn], read: Sequence[TaskView], rand: Rand,
                            optimistic: bool, retry_in: dict[str, float] | None = None) -> dict:
    """Decide each completion from its task's view and apply the transitions; returns what applied.
    retry_in collects the retry delay of each applied RETRY_WAIT (the timer hint)."""
    views = {v.task_id: v for v in read}
    compensating = await mark_compensating(tx, items, views)
    decided: list[Transition] = []
    for c in items:
        view = views.get(c.task_id)
        if view is None:
            continue
        decided.append(on_completion(view, c, rand=rand, cancel_seen=view.cancel_seen if optimistic else None))
    # In task_id order, as the lock took them, so two batches sharing tasks cannot deadlock.
    decided.sort(key=lambda t: t.task_id)
    applied = await tx.task_transition_apply(decided) if decided else {}
    if compensating:  # a cancelled run with compensations that ended: its kept cancel goes
        ended = [t.task_id for t in decided if t.task_id in compensating and t.task_id in applied
                 and t.to_state in TERMINAL]
        if ended:
            await tx.workflow_cancels_delete_batch(ended)
    if retry_in is not None:
        for t in decided:
            if t.delay_s is not None and t.task_id in applied:
                retry_in[t.task_id] = t.delay_s
    return applied


async def mark_compensating(tx: Tx, items: Sequence[CompletionIn], views: dict[str, TaskView]) -> set[str]:
    """Which of these ends are of runs that keep a cancel for their compensations (their views
    marked). Only a CANCELED completion or an end under a user cancel can be one: successes and
    ordinary failures look nothing up."""
    maybe = [c.task_id for c in items if c.outcome != "SUCCEEDED" and c.task_id in views
             and (c.outcome == "CANCELED" or views[c.task_id].cancel_reason == CancelReason.USER)]
    if not maybe:
        return set()
    held = await tx.workflow_cancelled_batch(maybe)
    for tid in held:
        views[tid].compensating = True
    return held


def _state(states: dict, applied: dict, task_id: str) -> TaskState | None:
    if task_id in applied:
        return TaskState(applied[task_id][0])
    return TaskState(states[task_id]) if task_id in states else None


async def cancel_task(conn: asyncpg.Connection, store: Store, task_id: str, tenant_id: str,
                      grace_s: float) -> tuple[TaskState, bool]:
    """Cancel one task; returns (state after, cancel_requested)."""
    async with store.tx(conn) as tx:
        row = await tx.task_cancel_lock(task_id)
        if row is None or row.tenant_id != tenant_id:
            raise TaskNotFound(task_id)
        state = TaskState(row.state)
        if row.has_compensations and state not in TERMINAL:
            return await _cancel_compensated(tx, row, state, grace_s)
        t = cancel_now(task_id, state, row.lease_epoch)
        if t is not None:
            await tx.task_transition_apply([t])  # (its timers go with it, a WAITING run's wake too)
            # A run may hold an open wait or fan-out in any state it is cancelled from (a wait
            # that timed out leaves the run ENQUEUED, a crash after a BEGIN leaves it
            # RETRY_WAIT): no event completes a step of a run that ended, and its open
            # fan-outs' children are cancelled too. (One probe each for a plain task.)
            await tx.workflow_waits_delete_batch([task_id])
            await tx.workflow_cascade_open([task_id])
            return TaskState.CANCELED, False
        if state == TaskState.LEASED:
            await tx.task_cancel_request_batch([task_id], [row.lease_epoch], [CancelReason.USER.value], grace_s)
            # The lease timer must now fire by the kill time, not only at lease expiry.
            await tx.timer_lease_reschedule_batch([task_id], [row.lease_epoch])
            await tx.workflow_cascade_open([task_id])  # a run with open fan-outs: their children too
            return TaskState.LEASED, True
        return state, row.cancel_requested



COMPENSATE_REASON = "cancelled: the run runs its compensations"


async def _cancel_compensated(tx: Tx, row: CancelLocked, state: TaskState, grace_s: float) -> tuple[TaskState, bool]:
    """The cancel of a run whose log registered compensations (an ON_CANCEL row): it does not end
    now. Its cancel is kept (workflow_cancels) until the activation that runs them ends it; its
    open fan-outs' children are cancelled and its waits dropped as for any cancel; a run not
    running is due now (ENQUEUED), a running one is asked to stop (its next BEGIN answers
    CANCELLED). A second cancel changes nothing."""
    if row.cancelled:
        return state, True
    task_id = row.task_id
    await tx.workflow_cancel_insert(task_id, CancelReason.USER.value)
    await tx.workflow_cascade_open([task_id])
    await tx.workflow_waits_delete_batch([task_id])
    if state == TaskState.LEASED:
        await tx.task_cancel_request_batch([task_id], [row.lease_epoch], [CancelReason.USER.value], grace_s)
        await tx.timer_lease_reschedule_batch([task_id], [row.lease_epoch])
        return TaskState.LEASED, True
    await tx.workflow_cancel_enqueue(task_id, COMPENSATE_REASON)
    return TaskState.ENQUEUED, True
