"""GetTask, ListTasks and CountTasks: a tenant's tasks on one shard. GetTask reads a task and
its attempts; ListTasks lists them newest first by sort time (finished_at for terminal tasks,
created_at otherwise), paged with a keyset cursor "<sort time RFC 3339>|<task_id>" (see
history.proto)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import asyncpg

from ratchet.services.history.errors import TaskNotFound
from ratchet.services.history.model import TaskFilter
from ratchet.services.history.store import AttemptRow, Store, TaskRow


@dataclasses.dataclass(frozen=True)
class Page:
    """One page: task rows (each with sort_at) and where the next one starts ("" at the end)."""

    rows: list[TaskRow]
    next_cursor: tuple[dt.datetime, str] | None


async def list_tasks(conn: asyncpg.Connection, store: Store, tenant_id: str, app_id: str, f: TaskFilter,
                     cursor: tuple[dt.datetime, str] | None, page_size: int) -> Page:
    """The page of tasks strictly older than the cursor; one statement, so one snapshot."""
    rows = await store.on(conn).task_list_page(tenant_id, app_id, f, cursor, page_size + 1)
    if len(rows) <= page_size:
        return Page(rows, None)
    rows = rows[:page_size]
    last = rows[-1]
    return Page(rows, (last.sort_at, last.task_id))


async def count_tasks(conn: asyncpg.Connection, store: Store, tenant_id: str, app_id: str, f: TaskFilter) -> int:
    """How many of the tenant's tasks match."""
    return await store.on(conn).task_count(tenant_id, app_id, f)


async def get_task(conn: asyncpg.Connection, store: Store, task_id: str,
                   tenant_id: str) -> tuple[TaskRow, list[AttemptRow]]:
    """(task row, attempt rows) read from one snapshot; TaskNotFound for unknown and foreign ids alike."""
    async with store.tx(conn, isolation="repeatable_read", readonly=True) as tx:
        row = await tx.task_get(task_id)
        if row is None or row.tenant_id != tenant_id:
            raise TaskNotFound(task_id)
        attempts = await tx.attempt_list(task_id)
    return row, attempts
