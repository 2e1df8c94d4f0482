"""The store's shape: typed rows that match their statements' columns, and `Store.tx(conn)`,
a transaction whose statements run on its connection."""

from __future__ import annotations

import dataclasses

import asyncpg
import pytest

from ratchet.libs.taskstate import TaskState
from ratchet.services.history.decide import cancel_now
from ratchet.services.history.model import TaskView
from ratchet.services.history.store import (
    QUERIES,
    AttemptRow,
    BulkOperationRow,
    CancelCandidate,
    CancelLocked,
    HeldLease,
    LeasedRow,
    LockedTask,
    RetryCandidate,
    Store,
    TaskRow,
    TransitionRow,
)

from .helpers import unique


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


# (compensating: set by the decisions' callers from workflow_cancels, not a column)
_VIEW = tuple(f.name for f in dataclasses.fields(TaskView)
              if f.name not in ("retry", "compensating")) + ("retry_policy", "retry_rules")
_DUE = ("kind", "timer_epoch", "due_now", "lease_expired", "deadline_passed", "kill_passed")


def _fields(row) -> set[str]:
    return {f.name for f in dataclasses.fields(row)}


async def test_every_other_row_reads_columns_its_statement_returns(hist):
    """The rows read their columns by name: each statement returns every column its row reads."""
    reads = {"task_get": _fields(TaskRow) - {"sort_at"}, "task_list_page": _fields(TaskRow),
             "task_lock": _fields(LockedTask), "task_cancel_lock": _fields(CancelLocked),
             "attempt_list": _fields(AttemptRow),
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


async def test_a_tx_commits_when_its_block_ends_and_rolls_back_when_it_raises(hist):
    store = Store()
    tenant = unique("t")
    task_id = await hist.create_one(tenant)
    conn = await asyncpg.connect(hist.dsns[1])
    try:
        with pytest.raises(RuntimeError):
            async with store.tx(conn) as tx:
                row = await tx.task_lock(task_id)
                assert row == LockedTask(task_id, tenant, "ENQUEUED", 0, False) and conn.is_in_transaction()
                assert await tx.task_transition_apply([cancel_now(task_id, TaskState.ENQUEUED, 0)]) == {
                    task_id: ("CANCELED", 2)}
                raise RuntimeError("after the write")
        assert not conn.is_in_transaction()
        got = await store.on(conn).task_get(task_id)
        assert isinstance(got, TaskRow) and (got.state, got.version) == ("ENQUEUED", 1)
        async with store.tx(conn) as tx:
            assert await tx.task_transition_apply([cancel_now(task_id, TaskState.ENQUEUED, 0)])
        assert (await store.on(conn).task_get(task_id)).state == "CANCELED"
        async with store.tx(conn, isolation="repeatable_read", readonly=True) as tx:
            assert (await tx.task_get(task_id)).task_id == task_id
            assert await tx.attempt_list(task_id) == []
        assert not conn.is_in_transaction()
        with pytest.raises(TypeError, match=r"Store\.tx"):
            async with store.on(conn):
                pass
    finally:
        await conn.close()
