"""Events: into one run's inbox, or broadcast to the open waits of a tenant on this shard.

Both lock a run's task row (FOR NO KEY UPDATE) before they touch its log, as a suspension
does, so an event that completes a wait and the suspension on it are serialised: whichever is
second sees the other (a suspension then wakes the run at once; an event wakes a run already
WAITING). The caller announces ready work after the commit when a run woke.
"""

from __future__ import annotations

import dataclasses

import asyncpg

from ratchet.libs import taskstate
from ratchet.libs.rpc.errors import FailedPrecondition
from ratchet.libs.taskstate import TaskState
from ratchet.services.history.errors import TaskNotFound
from ratchet.services.history.model import NIL_ID
from ratchet.services.history.store import Store
from ratchet.services.history.workflows.convert import Event
from ratchet.services.history.workflows.suspend import wake

BROADCAST_BATCH = 200  # runs locked and completed per transaction of a broadcast


@dataclasses.dataclass(frozen=True)
class Delivered:
    """How many waits the event completed, and how many suspended runs it woke."""

    delivered: int
    woken: int


def _reason(name: str) -> str:
    return f"woken: event {name} came"


async def deliver_to_run(conn: asyncpg.Connection, store: Store, e: Event) -> Delivered:
    """The inbox: kept for a later wait, or completing the run's open wait at once."""
    assert e.workflow_id is not None
    async with store.tx(conn) as tx:
        row = await tx.task_lock(e.workflow_id)
        if row is None or row.tenant_id != e.tenant_id:
            raise TaskNotFound(e.workflow_id)
        if taskstate.is_terminal(row.state):
            raise FailedPrecondition(f"the run has ended (run {e.workflow_id} is {row.state}): "
                                     "an event can no longer reach it")
        if e.event_id is not None:
            seen = await tx.workflow_inbox_event_seen(e.workflow_id, e.event_id)
            if seen is not None:  # a resend: kept once, answered as the first was
                return Delivered(int(seen), 0)
        position = await tx.workflow_inbox_deliver(e.workflow_id, e.name, e.data_json, e.event_id)
        if position is None:
            return Delivered(0, 0)
        woken = await wake(tx, [e.workflow_id], _reason(e.name)) if row.state == TaskState.WAITING else {}
    return Delivered(1, len(woken))


async def broadcast(conn: asyncpg.Connection, store: Store, e: Event, batch: int = BROADCAST_BATCH) -> Delivered:
    """Every open wait of (tenant, name) on this shard whose match the data contains and whose
    timeout has not passed: completed, its run woken if WAITING. In batches of runs, each one
    transaction that locks its runs' task rows in workflow_id order."""
    after, delivered, woken = NIL_ID, 0, 0
    while True:
        ids = await store.on(conn).workflow_waits_probe(e.tenant_id, e.name, e.data_json, after, batch)
        if not ids:
            return Delivered(delivered, woken)
        async with store.tx(conn) as tx:
            await tx.workflow_tasks_lock(ids)
            done = await tx.workflow_broadcast_apply(ids, e.tenant_id, e.name, e.data_json)
            runs = sorted({wid for wid, _ in done})
            woke = await wake(tx, runs, _reason(e.name)) if runs else {}
        delivered, woken, after = delivered + len(done), woken + len(woke), ids[-1]
        if len(ids) < batch:
            return Delivered(delivered, woken)
