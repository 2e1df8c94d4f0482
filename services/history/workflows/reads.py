"""GetWorkflowSteps: a page of a run's step log, how long the log is, and what a suspended run
waits on, from one snapshot."""

from __future__ import annotations

import dataclasses

import asyncpg

from ratchet.libs.taskstate import TaskState
from ratchet.services.history.errors import TaskNotFound
from ratchet.services.history.store import Store
from ratchet.services.history.store.rows import PendingRow, StepRow


@dataclasses.dataclass(frozen=True)
class StepPage:
    """Steps from a position, the log's length, where the next page starts (-1: none) and the
    pending sleep or wait of a WAITING run."""

    steps: list[StepRow]
    step_count: int
    next_position: int
    pending: PendingRow | None


async def step_page(conn: asyncpg.Connection, store: Store, workflow_id: str, tenant_id: str,
                    from_position: int, page_size: int) -> StepPage:
    """The page; TaskNotFound for unknown and foreign ids alike (as GetTask)."""
    async with store.tx(conn, isolation="repeatable_read", readonly=True) as tx:
        owner = await tx.workflow_task_owner(workflow_id)
        if owner is None or owner[0] != tenant_id:
            raise TaskNotFound(workflow_id)
        rows = await tx.workflow_step_page(workflow_id, from_position, page_size + 1)
        count = await tx.workflow_step_count(workflow_id)
        pending = await tx.workflow_pending(workflow_id) if owner[1] == TaskState.WAITING else None
    more = len(rows) > page_size
    rows = rows[:page_size]
    return StepPage(rows, count, rows[-1].position + 1 if more else -1, pending)
