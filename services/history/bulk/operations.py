"""Bulk operations (retry or cancel every task matching a filter): this
shard's part, started idempotently per operation id and advanced by the
bulk loop (loops/bulk.py) one batch per transaction.

A batch locks the operation row, locks its next items in the operation's
stable scan order, applies the plan (decide.plan_bulk_*), records the
failures, and commits the counts with the cursor after the last item, so a
crash loses at most the batch in flight and the next run resumes after the
last committed one. A bulk retry never moves a state backwards: it creates a
new task and links the original to it (retried_as), which is also what makes
a re-run skip it.
"""

from __future__ import annotations

import dataclasses

import asyncpg

from ratchet.libs import gates
from ratchet.libs.shardmap import new_task_id, slot_of
from ratchet.libs.taskstate import CancelReason, TaskState
from ratchet.services.history.decide import BulkPlan, plan_bulk_cancel, plan_bulk_retry
from ratchet.services.history.errors import OperationConflict, OperationNotFound
from ratchet.services.history.model import TaskFilter
from ratchet.services.history.store import BulkOperationRow, CancelCandidate, RetryCandidate, Store, Tx

RETRY, CANCEL = "RETRY", "CANCEL"
MAX_FAILURES_KEPT = 1000


@dataclasses.dataclass(frozen=True)
class BulkStart:
    """A validated StartBulkOperation request."""

    operation_id: str
    tenant_id: str
    app_id: str
    kind: str
    filter: TaskFilter
    registered_task_types: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class BatchOut:
    """What one batch did."""

    ran: bool  # False when the operation was not running or another process held it
    created: int = 0  # new ready tasks (bulk retry): the dispatcher should hear of them
    done: bool = False


async def start(conn: asyncpg.Connection, store: Store, req: BulkStart) -> BulkOperationRow:
    """Start this shard's part, or return the existing one with this id (same tenant and app)."""
    async with store.tx(conn) as tx:
        existing = await tx.bulk_operation_get(req.operation_id)
        if existing is None:
            bound = await conn.fetchval("SELECT clock_timestamp()")
            matched = await tx.task_count(req.tenant_id, req.app_id, req.filter, bound)
            existing = await tx.bulk_operation_insert(req.operation_id, req.tenant_id, req.app_id, req.kind,
                                                      req.filter, req.registered_task_types, matched, bound)
            if existing is None:  # a concurrent Start inserted it first
                existing = await tx.bulk_operation_get(req.operation_id)
    if (existing.tenant_id, existing.app_id) != (req.tenant_id, req.app_id):
        raise OperationConflict(req.operation_id)
    return existing


async def get(conn: asyncpg.Connection, store: Store, operation_id: str,
              tenant_id: str) -> tuple[BulkOperationRow, list[tuple[str, str]]]:
    """(operation row, failures); OperationNotFound for unknown and foreign ids alike."""
    async with store.tx(conn, isolation="repeatable_read", readonly=True) as tx:
        row = await tx.bulk_operation_get(operation_id)
        if row is None or row.tenant_id != tenant_id:
            raise OperationNotFound(operation_id)
        failures = await tx.bulk_operation_failure_list(operation_id)
    return row, failures


async def cancel(conn: asyncpg.Connection, store: Store, operation_id: str,
                 tenant_id: str) -> tuple[BulkOperationRow, list[tuple[str, str]]]:
    """Stop a running operation part (waits for the batch in flight); a finished one is returned as it is."""
    async with store.tx(conn) as tx:
        row = await tx.bulk_operation_get(operation_id)
        if row is None or row.tenant_id != tenant_id:
            raise OperationNotFound(operation_id)
        await tx.bulk_operation_cancel(operation_id)
    return await get(conn, store, operation_id, tenant_id)


def _new_id(original: str) -> str:
    # Same slot, so the new task lives on this shard next to the original.
    return new_task_id(slot_of(original))


async def _retry_batch(tx: Tx, op: BulkOperationRow, limit: int) -> tuple[BulkPlan, list[RetryCandidate], tuple]:
    cur = (op.cursor_state, op.cursor_time, op.cursor_task_id) if op.cursor_state else None
    rows = await tx.task_bulk_retry_scan(op.tenant_id, op.app_id, op.filter, op.bound_at, cur, limit)
    plan = plan_bulk_retry(rows, frozenset(op.registered_task_types), _new_id, op.operation_id)
    if plan.retries:
        done = await tx.task_retry_batch(plan.retries)
        # Locked above, so only a concurrent writer outside any operation could have beaten us.
        plan.skipped += len(plan.retries) - len(done)
        plan.retries = [(o, t) for o, t in plan.retries if o in done]
    last = rows[-1] if rows else None
    cursor = (last.state, last.finished_at, last.task_id) if last else cur or (None, None, None)
    return plan, rows, cursor


async def _cancel_batch(tx: Tx, op: BulkOperationRow, limit: int,
                        grace_s: float) -> tuple[BulkPlan, list[CancelCandidate], tuple]:
    cur_id = op.cursor_task_id
    rows = await tx.task_bulk_cancel_scan(op.tenant_id, op.app_id, op.filter, op.bound_at, cur_id, limit)
    plan = plan_bulk_cancel(rows, op.operation_id)
    if plan.cancels:
        applied = await tx.task_transition_apply(plan.cancels)
        plan.skipped += len(plan.cancels) - len(applied)
    if plan.cancel_requests:
        ids, epochs = [t for t, _ in plan.cancel_requests], [e for _, e in plan.cancel_requests]
        asked = await tx.task_cancel_request_batch(ids, epochs, [CancelReason.USER.value] * len(ids), grace_s)
        # The lease timer must now fire by the kill time, not only at lease expiry.
        await tx.timer_lease_reschedule_batch(ids, epochs)
        plan.skipped += len(ids) - len(asked)
    runs = [t.task_id for t in plan.cancels if t.from_state == TaskState.WAITING]
    runs += [t for t, _ in plan.cancel_requests]
    if runs:  # runs with open fan-outs: their children are cancelled too (the cascade)
        await tx.workflow_cascade_open(runs)
    return plan, rows, (None, None, rows[-1].task_id if rows else cur_id)


async def run_batch(conn: asyncpg.Connection, store: Store, operation_id: str, *, batch_size: int,
                    grace_s: float) -> BatchOut:
    """Process the next batch of a running operation part in one transaction."""
    async with store.tx(conn) as tx:
        op = await tx.bulk_operation_lock(operation_id)
        if op is None:
            return BatchOut(ran=False)
        if op.kind == RETRY:
            plan, rows, cursor = await _retry_batch(tx, op, batch_size)
            succeeded = len(plan.retries)
        else:
            plan, rows, cursor = await _cancel_batch(tx, op, batch_size, grace_s)
            succeeded = len(rows) - len(plan.failures) - plan.skipped
        if plan.failures and op.failed < MAX_FAILURES_KEPT:
            await tx.bulk_operation_failure_add_batch(operation_id, op.failed, plan.failures)
        done = len(rows) < batch_size
        await tx.bulk_operation_advance(operation_id, succeeded, len(plan.failures), plan.skipped, cursor, done)
        await gates.reach("history.bulk.before_commit")  # fault tests: batch applied, not committed
    return BatchOut(ran=True, created=len(plan.retries), done=done)
