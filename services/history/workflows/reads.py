"""GetWorkflowSteps: a page of a run's step log, how long the log is, and what a suspended run
waits on, from one snapshot."""

from __future__ import annotations

import dataclasses

import asyncpg

from ratchet.libs.rpc.errors import NotFound
from ratchet.libs.taskstate import TaskState
from ratchet.services.history.errors import TaskNotFound
from ratchet.services.history.model import ErrorInfo
from ratchet.services.history.store import Store
from ratchet.services.history.store.rows import PendingRow, StepRow
from ratchet.services.history.workflows import fanout


@dataclasses.dataclass(frozen=True)
class StepPage:
    """Steps from a position, the log's length, where the next page starts (-1: none) and the
    pending sleep or wait of a WAITING run."""

    steps: list[StepRow]
    step_count: int
    next_position: int
    pending: PendingRow | None
    fanouts: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)  # position: (count, done)


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
        fanouts = (await tx.workflow_fanout_counts(workflow_id, from_position, page_size)
                   if any(r.kind in ("PARALLEL", "CHILD") for r in rows) else {})
    more = len(rows) > page_size
    rows = rows[:page_size]
    return StepPage(rows, count, rows[-1].position + 1 if more else -1, pending, fanouts)


@dataclasses.dataclass(frozen=True)
class ChildState:
    """One child of a fan-out as ListWorkflowChildren shows it."""

    index: int
    child_id: str
    task_type: str  # '' when the child does not exist (yet)
    state: str  # '' likewise
    result: bytes | None = None
    error: ErrorInfo | None = None


async def children_page(mesh: fanout.Mesh, conn: asyncpg.Connection, workflow_id: str, tenant_id: str,
                        position: int, from_index: int, page_size: int) -> tuple[list[ChildState], int]:
    """A page of the fan-out's children by index, and the next index (-1: the last page): the
    state from workflow_child_done when the child ended, else read from the child's shard.
    TaskNotFound for unknown and foreign runs and for a position that is not a fan-out."""
    store = mesh.store
    async with store.tx(conn, isolation="repeatable_read", readonly=True) as tx:
        owner = await tx.workflow_task_owner(workflow_id)
        if owner is None or owner[0] != tenant_id:
            raise TaskNotFound(workflow_id)
        counts = await tx.workflow_fanout_counts(workflow_id, position, 1)
        if position not in counts:
            raise NotFound(f"position {position} of run {workflow_id} is not a fan-out")
        n = counts[position][0]
        size = max(0, min(page_size, n - from_index))
        done = {d.child_index: d for d in await tx.workflow_child_done_page(workflow_id, position, from_index, size)}
    ids = fanout.child_ids(workflow_id, position, n, from_index, from_index + size)
    live = await _live_states(mesh, ids)
    out = []
    for k, cid in enumerate(ids):
        d = done.get(from_index + k)
        state, task_type = live.get(cid, ("", ""))
        if d is not None:  # ended: as recorded (what the step's DONE gives back)
            o = fanout.outcome(d)
            out.append(ChildState(o.index, cid, task_type, o.state, o.result, o.error))
        else:
            out.append(ChildState(from_index + k, cid, task_type, state))
    nxt = from_index + size
    return out, nxt if nxt < n else -1


async def _live_states(mesh: fanout.Mesh, ids: list[str]) -> dict[str, tuple[str, str]]:
    """{child: (state, task_type)} read from the children's shards (one read per shard); a
    child not created yet is absent."""
    by_shard: dict[int, list[str]] = {}
    for c in ids:
        by_shard.setdefault(mesh.map.shard_for_task(c), []).append(c)
    out: dict[str, tuple[str, str]] = {}
    for sid, group in by_shard.items():
        shard = mesh.served(sid)
        if shard is None:
            continue  # not served here: shown without a state
        async with shard.conn() as conn:
            out.update(await mesh.store.on(conn).workflow_children_states(group))
    return out
