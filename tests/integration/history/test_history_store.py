"""The store's rows: typed values that match their statements' columns."""

from __future__ import annotations

import dataclasses

import asyncpg

from ratchet.services.history.model import TaskView
from ratchet.services.history.store import (
    QUERIES,
    AttemptRow,
    BulkOperationRow,
    CancelCandidate,
    HeldLease,
    LeasedRow,
    LockedTask,
    RetryCandidate,
    TaskRow,
    TransitionRow,
)


async def _columns(conn, name: str) -> tuple[str, ...]:
    stmt = await conn.prepare(QUERIES[name])
    return tuple(a.name for a in stmt.get_attributes())


async def test_the_hot_rows_fields_are_their_statements_columns_in_order(hist):
    """Made from a record's values by position (_make): the fields must be the columns, in order."""
    conn = await asyncpg.connect(hist.dsns[1])
    try:
        for name, row in (("task_lease_batch", LeasedRow), ("task_heartbeat_batch", HeldLease)):
            assert await _columns(conn, name) == row._fields, name
    finally:
        await conn.close()


_VIEW = tuple(f.name for f in dataclasses.fields(TaskView) if f.name != "retry") + ("retry_policy", "retry_rules")
_DUE = ("kind", "timer_epoch", "due_now", "lease_expired", "deadline_passed", "kill_passed")


def _fields(row) -> set[str]:
    return {f.name for f in dataclasses.fields(row)}


async def test_every_other_row_reads_columns_its_statement_returns(hist):
    """The rows read their columns by name: each statement returns every column its row reads."""
    reads = {"task_get": _fields(TaskRow) - {"sort_at"}, "task_list_page": _fields(TaskRow),
             "task_lock": _fields(LockedTask), "attempt_list": _fields(AttemptRow),
             "transition_list": _fields(TransitionRow), "task_bulk_retry_scan": _fields(RetryCandidate),
             "task_bulk_cancel_scan": _fields(CancelCandidate),
             "task_complete_read": set(_VIEW) - {"rules"}, "task_complete_lock": set(_VIEW) - {"rules"},
             "timer_claim_due": set(_VIEW) - {"rules"} | set(_DUE)}
    for name in ("bulk_operation_insert", "bulk_operation_get", "bulk_operation_lock", "bulk_operation_advance",
                 "bulk_operation_cancel"):
        reads[name] = _fields(BulkOperationRow)
    conn = await asyncpg.connect(hist.dsns[1])
    try:
        for name, fields in reads.items():
            missing = fields - set(await _columns(conn, name))
            assert not missing, (name, missing)
    finally:
        await conn.close()
