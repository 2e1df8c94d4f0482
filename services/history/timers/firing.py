"""Firing timers: claim due timers and apply them, in one transaction (the shard's timer
loop, loops/timers.py, decides when).

A task's due timers are folded oldest first into one plan (decide.py), so
two timers of one task that fire together (a lease and a schedule_to_close,
say) combine into the right outcome. Transitions go in rounds: round k
holds each task's k-th transition, so a task can move twice in one call
(RETRY_WAIT -> ENQUEUED -> EXPIRED) with every step logged.
"""

from __future__ import annotations

import dataclasses
import random

import asyncpg

from ratchet.libs import gates
from ratchet.libs.taskstate import TERMINAL, CancelReason, TaskState
from ratchet.services.history.decide import CANCEL_GRACE_ERROR, WAKE_TIMER_REASON, Rand, TimerPlan, plan_timers
from ratchet.services.history.model import TaskView, Transition
from ratchet.services.history.store import DueTask, Store, Tx
from ratchet.services.history.workflows.suspend import wake


@dataclasses.dataclass(frozen=True)
class FireOut:
    """What one firing did: timers fired, whether work became ready, and when the next
    pending timer is due (seconds on the shard clock, negative if overdue; None: none)."""

    fired: int
    ready: bool
    next_in_s: float | None


def _plans(claimed: list[DueTask], rand: Rand) -> dict[str, tuple[TaskView, TimerPlan]]:
    return {d.view.task_id: (d.view, plan_timers(d.view, d.dues, rand=rand)) for d in claimed}


async def _mark_compensating(tx: Tx, claimed: list[DueTask]) -> None:
    """A user-cancelled lease whose kill time passed: is it a run that keeps its cancel for its
    compensations? Only such kills (rare) are looked up, in one statement."""
    kills = [d.view.task_id for d in claimed
             if d.view.cancel_requested and d.view.cancel_reason == CancelReason.USER
             and any(x.kind == "lease" and x.kill_passed for x in d.dues)]
    if not kills:
        return
    held = await tx.workflow_cancelled_batch(kills)
    for d in claimed:
        if d.view.task_id in held:
            d.view.compensating = True


async def _apply_round(tx: Tx, ts: list[Transition]) -> None:
    """One round of transitions. A suspended workflow run woken by its `wake` timer goes by the
    wake statement (due now, logged); one that expires loses its open waits with it."""
    wakes = [t.task_id for t in ts if t.from_state == TaskState.WAITING and t.to_state == TaskState.ENQUEUED]
    rest = [t for t in ts if t.from_state != TaskState.WAITING or t.to_state != TaskState.ENQUEUED] if wakes else ts
    if wakes:
        await wake(tx, wakes, WAKE_TIMER_REASON)
    if rest:
        applied = await tx.task_transition_apply(rest)
        # Every run that ended loses its open waits, from whatever state it ended (a wait that
        # timed out or a crash after a BEGIN leaves one open outside WAITING).
        ended = [t.task_id for t in rest if t.to_state in TERMINAL and t.task_id in applied]
        if ended:
            await tx.workflow_waits_delete_batch(ended)
        spent = [t.task_id for t in rest if t.to_state == TaskState.FAILED and t.attempt_error is CANCEL_GRACE_ERROR
                 and t.task_id in applied]
        if spent:  # a run with compensations out of attempts: its kept cancel goes
            await tx.workflow_cancels_delete_batch(spent)


async def fire_timers(conn: asyncpg.Connection, store: Store, *, max_timers: int, grace_s: float,
                      rand: Rand = random.random) -> FireOut:
    """Claim up to max_timers due timers and apply them.

    First one read outside any transaction: when neither a timer nor a lease check is due,
    the claim would find nothing, so the answer is that read's next_in alone (one statement
    instead of BEGIN, claim, next_in, COMMIT): what the timer loop's idle wake-ups cost. A
    timer due by the read's snapshot still goes through the claim, which locks and re-checks."""
    next_in = await store.on(conn).timer_next_in()
    if next_in is None or next_in > 0:
        return FireOut(0, False, next_in)
    async with store.tx(conn) as tx:
        claimed = await tx.timer_claim_due(max_timers)
        await _mark_compensating(tx, claimed)
        plans = _plans(claimed, rand)
        rounds = max((len(p.transitions) for _, p in plans.values()), default=0)
        for k in range(rounds):
            await _apply_round(tx, [p.transitions[k] for _, p in plans.values() if len(p.transitions) > k])
        cancels = [(tid, v.lease_epoch, p.cancel_reason.value) for tid, (v, p) in plans.items() if p.cancel_reason]
        if cancels:
            await tx.task_cancel_request_batch([c[0] for c in cancels], [c[1] for c in cancels],
                                               [c[2] for c in cancels], grace_s)
        lease = [(tid, v.lease_epoch) for tid, (v, p) in plans.items() if p.reschedule_lease]
        if lease:
            await tx.timer_lease_reschedule_batch([t for t, _ in lease], [e for _, e in lease])
        next_in = await tx.timer_next_in()
        await gates.reach("history.timers.before_commit")  # fault tests: fired, not committed
    return FireOut(sum(len(d.dues) for d in claimed), any(p.ready for _, p in plans.values()), next_in)
