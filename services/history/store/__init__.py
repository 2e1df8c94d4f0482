"""History's SQL: named queries from the .sql files beside this module, and
one typed wrapper per query (same name as the query), a method of `Tx`.

`Store.tx(conn)` opens a transaction on one of a shard's connections
(`Shard.conn`) and yields a `Tx` whose methods run on it; `Store.on(conn)` is
a `Tx` without one, each statement on its own (the single-statement paths:
creates, heartbeats, the lease's picks, the timer loop's idle read). Every
method returns typed rows (rows.py) or plain values, never a record.

Each wrapper runs through `Tx._run`, which calls the store's test-only hooks
for that query name first/after, so a fault harness can inject a failure into
exactly one query ("the write happened but the caller saw a timeout").

Every statement here is the guarded one: there is no variant without its
fence, lock or compare-and-set. The fault checker's broken builds are made by
the fault tests from these statements (tests/fault/mutants).
"""

from __future__ import annotations

import json
import pathlib
import struct
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from ratchet.libs.fastcheck import copy_rows
from ratchet.libs.pg.queries import load_queries
from ratchet.services.history.enqueue import Batch, Row
from ratchet.services.history.model import (
    DAWN,
    MAX_ID,
    NEVER,
    NIL_ID,
    ErrorInfo,
    TaskFilter,
    TaskView,
    TimerDue,
    Transition,
)
from ratchet.services.history.store.rows import (
    AttemptRow,
    BulkOperationRow,
    CancelCandidate,
    CancelLocked,
    ChildDoneRow,
    ChildEnd,
    DueTask,
    FanoutRow,
    HeldLease,
    LeasedRow,
    LockedTask,
    PendingRow,
    RetryCandidate,
    StepRow,
    SuspendedRow,
    TaskRow,
    TransitionRow,
)

_HERE = pathlib.Path(__file__).parent
QUERIES = load_queries(*sorted(_HERE.glob("*.sql")))

Hook = Callable[[str], Awaitable[None]]

# What the COPY of uniform tasks (Tx.task_copy_uniform) writes: the id and the payload first,
# then the fields every row of a call shares, encoded once per call (libs/fastcheck.copy_rows
# writes the rows in C). Every other column takes its default: version 1, attempt 0,
# lease_epoch 0, cancel_requested false, NULL, and the transaction's now() for created_at,
# run_at and updated_at (migration 0015). The default queue, policy and timeouts go as NULL,
# as the statements store them (migration 0013).
_UNIFORM_COPY_COLUMNS = ("task_id", "payload", "tenant_id", "app_id", "queue", "task_type", "state", "max_attempts",
                       "retry_policy", "timeouts", "non_retryable", "retry_rules")


def _field(value: bytes | None) -> bytes:
    """One field of a binary COPY tuple: its length and bytes, or -1 for NULL."""
    return b"\xff\xff\xff\xff" if value is None else struct.pack("!i", len(value)) + value


def _jsonb(text: str | None) -> bytes:
    return _field(None if text is None else b"\x01" + text.encode())  # (jsonb's binary form: version 1, text)


def _text_array(values: list[str]) -> bytes:
    """text[] in binary: one dimension, no NULLs, element type text (oid 25), lower bound 1."""
    parts = [struct.pack("!iiiii", 1, 0, 25, len(values), 1)]
    for v in values:
        parts.append(_field(v.encode()))
    return b"".join(parts)


_ENQUEUED = _field(b"ENQUEUED")

Key = tuple[str, str, str]  # (tenant_id, app_id, key)
TypeKey = tuple[str, str, str]  # (tenant_id, app_id, task_type)


_CREATED = Row(created=True, due=True)
_CREATED_LATER = Row(created=True)


def _uuids(ids: Sequence[str]) -> list[uuid.UUID]:
    return [uuid.UUID(str(i)) for i in ids]


def _shared(values: list) -> list:
    """values as one element when every one is that element (list.count compares in C), else as is."""
    if len(values) > 1 and values.count(values[0]) == len(values):
        return values[:1]
    return values


def _checked(ids: Sequence) -> list:
    """Ids already checked (canonical strings from convert.task_id, or uuid values read from
    a shard): asyncpg encodes either as uuid, without _uuids' parse per id on the lease,
    heartbeat and completion paths."""
    return list(ids)


def _triples(keys: Sequence[TypeKey]) -> tuple[list[str], list[str], list[str]]:
    return [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]


class Store:
    """Typed access to the shard databases' history tables: `tx(conn)` and `on(conn)` give the
    statements on one connection (a `Tx`).

    `before` and `after` map a query name to an async hook; they are empty in
    production and exist only for fault-injection tests. `queries` is the
    statement registry the wrappers run (by name).
    """

    queries: Mapping[str, str] = QUERIES

    def __init__(self) -> None:
        self.before: dict[str, Hook] = {}
        self.after: dict[str, Hook] = {}
        # Called after a commit that wrote a fan-out child's outbox row (the server wires the
        # delivery loop's wake to it: in-process, no NOTIFY).
        self.on_child_end: Callable[[], None] = lambda: None

    def tx(self, conn: asyncpg.Connection, **options: Any) -> Tx:
        """`async with store.tx(conn) as tx:` one transaction on conn (options: asyncpg's,
        isolation, readonly, deferrable), committed when the block ends cleanly, else rolled back."""
        return Tx(self, conn, conn.transaction(**options))

    def on(self, conn: asyncpg.Connection) -> Tx:
        """The statements on conn outside any transaction, each on its own."""
        return Tx(self, conn)


class Tx:
    """The named queries on one connection: inside one transaction (Store.tx, used as
    `async with`), or each statement on its own (Store.on). One small object per use, no
    state of its own: each statement reads the store's hooks and registry as it runs (a
    test's hook, a mutant's statements)."""

    __slots__ = ("_child_end", "_store", "_transaction", "conn")

    def __init__(self, store: Store, conn: asyncpg.Connection, transaction: Any = None):
        self.conn = conn
        self._store = store
        self._transaction = transaction
        self._child_end = False

    async def __aenter__(self) -> Tx:
        if self._transaction is None:
            raise TypeError("Store.on(conn) runs each statement on its own; open a transaction with Store.tx(conn)")
        await self._transaction.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._transaction.__aexit__(*exc)
        if self._child_end and exc[0] is None:  # committed: the outbox rows are there to deliver
            self._store.on_child_end()

    def _child_ended(self) -> None:
        """A statement wrote a fan-out child's outbox row: wake the delivery loop once it is
        committed (at once outside a transaction)."""
        if self._transaction is None:
            self._store.on_child_end()
        else:
            self._child_end = True

    async def _run(self, name: str, *args: Any, fetch: str = "all") -> Any:
        store = self._store
        hook = store.before.get(name)
        if hook is not None:
            await hook(name)
        sql = store.queries[name]
        if fetch == "all":
            out = await self.conn.fetch(sql, *args)
        elif fetch == "row":
            out = await self.conn.fetchrow(sql, *args)
        else:
            out = await self.conn.fetchval(sql, *args)
        hook = store.after.get(name)
        if hook is not None:
            await hook(name)
        return out

    # -- tasks ----------------------------------------------------------------
    @staticmethod
    def _create_args(b: Batch) -> list:
        """task_create's array parameters, one per column. A column every row shares (a batch
        call's tenant, app, type, policy; the NULLs of what was not set) goes as a one-element
        array the statement reads for every row: asyncpg encodes and Postgres parses one value,
        not one per row (16 of the 19 columns of a typical batch)."""
        dumped: dict[int, str] = {}  # rows of one policy share its dicts: encode each object once

        def dumps(obj) -> str | None:
            if not obj:  # the defaults ({}, {}, []) go as NULL: stored so (migration 0013)
                return None
            text = dumped.get(id(obj))
            if text is None:
                text = dumped[id(obj)] = json.dumps(obj)
            return text
        pol = b.policy
        # (task ids as the canonical strings convert checked: asyncpg encodes them as uuid)
        return [b.task_ids, _shared(b.tenant_id), _shared(b.app_id), _shared(b.task_type), _shared(b.queue),
                b.payloads, _shared(b.delay_s), _shared(b.run_at), _shared(b.key),
                _shared([p.max_attempts for p in pol]), _shared([dumps(p.retry_json) for p in pol]),
                _shared([dumps(p.timeouts_json) for p in pol]), _shared([dumps(p.non_retryable) for p in pol]),
                _shared([p.schedule_to_start_s for p in pol]), _shared([p.schedule_to_close_s for p in pol]),
                _shared([dumps(p.rules_json) for p in pol]), _shared(b.schedule_id), _shared(b.scheduled_time),
                _shared(b.fingerprint)]

    async def task_create(self, b: Batch, requests: list[int], window_s: float) -> list[Row] | None:
        """Create the tasks of one or more requests (requests: each task's, or one for all), each
        request whole or not at all: one Row per task, in order, saying what happened to it. None
        when another writer inserted one of these ids or keys after the statement's snapshot (a
        unique violation: SQLSTATE 23505, the race lost): nothing was written, and the next
        statement sees that writer's rows."""
        try:
            recs = await self._run("task_create", *self._create_args(b), _shared(requests), window_s)
        except asyncpg.UniqueViolationError:
            return None
        rows: list[Row] = [_CREATED] * len(b)
        for r in recs:
            if r["created"] and not r["due"]:
                rows[r["ord"] - 1] = _CREATED_LATER
            elif not r["created"]:
                key_task = r["key_task"]
                rows[r["ord"] - 1] = Row(
                    created=False,
                    id_owner=(r["id_tenant"], r["id_app"], r["id_type"]) if r["id_tenant"] is not None else None,
                    key_task=str(key_task) if key_task is not None else None, key_fingerprint=r["key_fingerprint"],
                    key_expired=bool(r["key_expired"]), key_other=bool(r["key_other"]))
        return rows

    @staticmethod
    def _uniform_policy(b: Batch) -> tuple:
        p = b.policy[0]
        return (p.max_attempts, json.dumps(p.retry_json) if p.retry_json else None,
                json.dumps(p.timeouts_json) if p.timeouts_json else None, p.non_retryable or None,
                json.dumps(p.rules_json) if p.rules_json else None)

    async def task_create_uniform(self, b: Batch) -> bool:
        """Insert uniform tasks (enqueue.uniform: every value but id and payload shared, all due now)
        by the uniform statement, all or none: False when an id exists (a unique violation, SQLSTATE
        23505), nothing written. The ids must be canonical and each payload one JSON value alone
        (convert checks)."""
        max_attempts, rp, to, nr, rr = self._uniform_policy(b)
        pol = b.policy[0]
        try:
            # (one text and one bytea value, not two arrays: see the statement)
            await self._run("task_create_uniform", ",".join(b.task_ids), b"[" + b",".join(b.payloads) + b"]",
                            b.tenant_id[0], b.app_id[0], b.task_type[0], b.queue[0], max_attempts, rp, to, nr, rr,
                            pol.schedule_to_start_s, pol.schedule_to_close_s, fetch="val")
        except asyncpg.UniqueViolationError:
            return False
        return True

    async def task_copy_uniform(self, b: Batch) -> bool:
        """task_create_uniform's rows by a binary COPY (uniform tasks without timer rows): Postgres'
        multi-row heap insert, one WAL record per page, no executor projection per row: less
        backend CPU and less WAL per row than the statement. Its data is built in one C call
        (copy_rows; asyncpg's records cost more per row to encode here).
        False when an id exists (a unique violation), nothing written. Runs the
        task_create_uniform hooks (fault injection names the write, not its form)."""
        max_attempts, rp, to, nr, rr = self._uniform_policy(b)
        hook = self._store.before.get("task_create_uniform")
        if hook is not None:
            await hook("task_create_uniform")
        queue = b.queue[0]
        shared = b"".join((_field(b.tenant_id[0].encode()), _field(b.app_id[0].encode()),
                           _field(None if queue == "default" else queue.encode()), _field(b.task_type[0].encode()),
                           _ENQUEUED, _field(struct.pack("!i", max_attempts)), _jsonb(rp), _jsonb(to),
                           _field(_text_array(nr) if nr else None), _jsonb(rr)))
        data = copy_rows(b.task_ids, b.payloads, len(_UNIFORM_COPY_COLUMNS), shared)
        try:
            # (a memoryview: asyncpg reads bytes as a file's path, os.fspath takes them)
            await self.conn.copy_to_table("tasks", source=memoryview(data), columns=_UNIFORM_COPY_COLUMNS,
                                          format="binary")
        except asyncpg.UniqueViolationError:
            return False
        hook = self._store.after.get("task_create_uniform")
        if hook is not None:
            await hook("task_create_uniform")
        return True

    async def task_get(self, task_id: str) -> TaskRow | None:
        """The whole task row, or None."""
        r = await self._run("task_get", uuid.UUID(task_id), fetch="row")
        return TaskRow.of(r) if r is not None else None

    async def task_lock(self, task_id: str) -> LockedTask | None:
        """Lock one task row (FOR NO KEY UPDATE); None if it does not exist."""
        r = await self._run("task_lock", uuid.UUID(task_id), fetch="row")
        return LockedTask.of(r) if r is not None else None

    async def task_state_batch(self, ids: Sequence[str]) -> dict[str, str]:
        """{task_id: state} for the ids that exist."""
        recs = await self._run("task_state_batch", _uuids(ids))
        return {str(r["task_id"]): r["state"] for r in recs}

    async def task_ready_tenants(self, after: str, upto: str | None, app_ids: Sequence[str], limit: int,
                                 excluded: Sequence[TypeKey] = ()) -> list[str]:
        """Tenants with ready work (not of the excluded types) in (after, upto], tenant order, at most `limit`."""
        recs = await self._run("task_ready_tenants", after, upto, list(app_ids), limit, *_triples(excluded))
        return [r["tenant_id"] for r in recs]

    async def task_claim_ready(self, quotas: dict[str, int], app_ids: Sequence[str], exclude: Sequence[str],
                               excluded: Sequence[TypeKey] = ()) -> list[tuple[str, str]]:
        """Pick ready rows per tenant (not of the excluded types), without locking them; returns
        [(task_id, tenant_id)]."""
        recs = await self._run("task_claim_ready", list(quotas), list(quotas.values()), list(app_ids),
                               _uuids(exclude), *_triples(excluded))
        return [(str(r["task_id"]), r["tenant_id"]) for r in recs]

    async def task_claim_capped(self, caps: dict[TypeKey, int], app_ids: Sequence[str],
                                exclude: Sequence[str]) -> list[tuple[str, TypeKey]]:
        """Pick up to caps[type] ready rows of each capped type, without locking them; returns
        [(task_id, type key)]."""
        keys = list(caps)
        recs = await self._run("task_claim_capped", *_triples(keys), [caps[k] for k in keys], list(app_ids),
                               _uuids(exclude))
        return [(str(r["task_id"]), (r["tenant_id"], r["app_id"], r["task_type"])) for r in recs]

    async def task_lease_batch(self, ids: Sequence[str], worker_id: str, lease_s: float) -> list[LeasedRow]:
        """Lease the claimed (locked) ids; returns the LeasedTask columns of each."""
        recs = await self._run("task_lease_batch", _checked(ids), worker_id, lease_s)
        return list(map(LeasedRow._make, recs))

    async def task_heartbeat_batch(self, ids: Sequence[str], epochs: Sequence[int], lease_s: float, grace_s: float,
                                   checkpoints: Sequence[bytes | None] | None = None) -> list[HeldLease]:
        """Extend leases still held (ids canonical: convert.lease_ref checks), storing any checkpoint
        sent; returns a row per lease still held."""
        cps = list(checkpoints) if checkpoints is not None else [None] * len(ids)
        recs = await self._run("task_heartbeat_batch", _checked(ids), list(epochs), lease_s, grace_s, cps)
        return list(map(HeldLease._make, recs))

    async def task_cancel_request_batch(self, ids: Sequence[str], epochs: Sequence[int], reasons: Sequence[str],
                                        grace_s: float) -> set[str]:
        """Ask running attempts to stop; returns the ids whose lease matched."""
        recs = await self._run("task_cancel_request_batch", _uuids(ids), list(epochs), list(reasons), grace_s)
        return {str(r["task_id"]) for r in recs}

    async def task_complete_read(self, ids: Sequence[str], epochs: Sequence[int]) -> list[TaskView]:
        """Read, without locking, the tasks whose lease is current, as the views decisions read."""
        recs = await self._run("task_complete_read", _checked(ids), list(epochs))
        return list(map(TaskView.from_row, recs))

    async def task_complete_lock(self, ids: Sequence[str], epochs: Sequence[int]) -> list[TaskView]:
        """Lock tasks whose lease is current; their views."""
        recs = await self._run("task_complete_lock", _checked(ids), list(epochs))
        return list(map(TaskView.from_row, recs))

    async def task_transition_apply(self, ts: Sequence[Transition]) -> dict[str, tuple[str, int]]:
        """Apply transitions (one per task), each a compare-and-set; returns {task_id: (state, version)}
        of those applied."""
        cols: list[list] = [[] for _ in range(16)]
        (ids, from_s, epochs, to_s, delays, results, e_cls, e_msg, e_stack, reasons, outcomes, a_cls, a_msg,
         a_stack, checkpoints, cancel_seen) = cols
        for t in ts:
            ids.append(t.task_id)
            from_s.append(t.from_state.value)
            epochs.append(t.lease_epoch)
            to_s.append(t.to_state.value)
            delays.append(t.delay_s)
            results.append(t.result)
            e = t.error
            e_cls.append(e.error_class if e is not None else None)
            e_msg.append(e.message if e is not None else None)
            e_stack.append(e.stack if e is not None else None)
            reasons.append(t.reason)
            outcomes.append(t.attempt_outcome.value if t.attempt_outcome else None)
            a = t.attempt_error
            a_cls.append(a.error_class if a is not None else None)
            a_msg.append(a.message if a is not None else None)
            a_stack.append(a.stack if a is not None else None)
            checkpoints.append(t.checkpoint)
            cancel_seen.append(t.cancel_seen)
        # Every column but the ids as one element when the batch shares it (the statement reads
        # a one-element column as every row's). asyncpg encodes an array element by element, an
        # isinstance check against collections.abc each: full columns cost history far more
        # CPU per completion than shared ones.
        recs = await self._run("task_transition_apply", ids, *map(_shared, cols[1:]))
        if recs and recs[0]["child_ends"]:  # (one value for the statement) a fan-out's child ended
            self._child_ended()
        return {str(r["task_id"]): (r["state"], r["version"]) for r in recs}

    async def attempt_list(self, task_id: str) -> list[AttemptRow]:
        """A task's attempts, oldest first."""
        return [AttemptRow.of(r) for r in await self._run("attempt_list", uuid.UUID(task_id))]

    async def transition_list(self, task_id: str) -> list[TransitionRow]:
        """A task's transition log in version order."""
        return [TransitionRow.of(r) for r in await self._run("transition_list", uuid.UUID(task_id))]

    async def task_retry_batch(self, pairs: Sequence[tuple[str, Transition]]) -> dict[str, str]:
        """Bulk retry (original id, create transition of the new task); returns {original: new id} done
        (an original already retried is left out)."""
        recs = await self._run("task_retry_batch", _uuids([o for o, _ in pairs]),
                               _uuids([t.task_id for _, t in pairs]), [t.reason for _, t in pairs])
        return {str(r["original_id"]): str(r["task_id"]) for r in recs}

    # -- search ---------------------------------------------------------------
    @staticmethod
    def _filter_args(f: TaskFilter) -> list:
        since, until = f.bounds()
        return [f.task_type, f.queue, f.error_class, since, until]

    async def task_list_page(self, tenant_id: str, app_id: str, f: TaskFilter, cursor: tuple[datetime, str] | None,
                             limit: int) -> list[TaskRow]:
        """Up to `limit` tasks older than the cursor (sort time, task_id), newest first; rows carry sort_at."""
        at, tid = cursor if cursor is not None else (NEVER, MAX_ID)
        recs = await self._run("task_list_page", tenant_id, app_id, f.terminal_states(), f.live_states(),
                               *self._filter_args(f), at, uuid.UUID(tid), limit)
        return [TaskRow.of(r) for r in recs]

    async def task_count(self, tenant_id: str, app_id: str, f: TaskFilter, bound: datetime | None = None) -> int:
        """How many tasks match, counting only sort times up to `bound` when given."""
        return await self._run("task_count", tenant_id, app_id, f.terminal_states(), f.live_states(),
                               *self._filter_args(f), bound or NEVER, fetch="val")

    async def task_bulk_retry_scan(self, tenant_id: str, app_id: str, f: TaskFilter, bound: datetime,
                                   cursor: tuple[str, datetime, str] | None, limit: int) -> list[RetryCandidate]:
        """Lock the next terminal tasks of a RETRY operation in (state, finished_at, task_id) order."""
        state, at, tid = cursor if cursor is not None else ("", DAWN, NIL_ID)
        since, until = f.bounds()
        recs = await self._run("task_bulk_retry_scan", tenant_id, app_id, state, at, uuid.UUID(tid),
                               f.terminal_states(), since, until, bound, f.task_type, f.queue, f.error_class, limit)
        return [RetryCandidate.of(r) for r in recs]

    async def task_bulk_cancel_scan(self, tenant_id: str, app_id: str, f: TaskFilter, bound: datetime,
                                    cursor_id: str | None, limit: int) -> list[CancelCandidate]:
        """Lock the next live tasks of a CANCEL operation in task_id order."""
        since, until = f.bounds()
        recs = await self._run("task_bulk_cancel_scan", tenant_id, app_id, uuid.UUID(cursor_id or NIL_ID),
                               f.live_states(), since, until, bound, f.task_type, f.queue, f.error_class, limit)
        return [CancelCandidate.of(r) for r in recs]

    # -- bulk operations ------------------------------------------------------
    async def bulk_operation_insert(self, operation_id: str, tenant_id: str, app_id: str, kind: str, f: TaskFilter,
                                    registered: Sequence[str], matched: int,
                                    bound: datetime) -> BulkOperationRow | None:
        """Insert a RUNNING operation part; None when the id already exists."""
        r = await self._run("bulk_operation_insert", operation_id, tenant_id, app_id, kind, json.dumps(f.to_json()),
                            list(registered), matched, bound, fetch="row")
        return BulkOperationRow.of(r) if r is not None else None

    async def bulk_operation_get(self, operation_id: str) -> BulkOperationRow | None:
        """The operation part, or None."""
        r = await self._run("bulk_operation_get", operation_id, fetch="row")
        return BulkOperationRow.of(r) if r is not None else None

    async def bulk_operation_lock(self, operation_id: str) -> BulkOperationRow | None:
        """Lock the operation part if RUNNING and not locked by another batch."""
        r = await self._run("bulk_operation_lock", operation_id, fetch="row")
        return BulkOperationRow.of(r) if r is not None else None

    async def bulk_operation_running(self, limit: int) -> list[str]:
        """Ids of running operation parts, oldest first."""
        return [r["operation_id"] for r in await self._run("bulk_operation_running", limit)]

    async def bulk_operation_advance(self, operation_id: str, succeeded: int, failed: int, skipped: int,
                                     cursor: tuple[str | None, datetime | None, str | None],
                                     done: bool) -> BulkOperationRow | None:
        """Record one batch's counts and cursor (and the end when done); the part as it is now,
        None if it was no longer running."""
        state, at, tid = cursor
        r = await self._run("bulk_operation_advance", operation_id, succeeded, failed, skipped, state, at,
                            uuid.UUID(tid) if tid else None, done, fetch="row")
        return BulkOperationRow.of(r) if r is not None else None

    async def bulk_operation_cancel(self, operation_id: str) -> BulkOperationRow | None:
        """Stop a running operation part; None if it was not running."""
        r = await self._run("bulk_operation_cancel", operation_id, fetch="row")
        return BulkOperationRow.of(r) if r is not None else None

    async def bulk_operation_failure_add_batch(self, operation_id: str, recorded: int,
                                               failures: Sequence[tuple[str, str]]) -> None:
        """Record failures after the `recorded` ones (the first 1,000 are kept)."""
        await self._run("bulk_operation_failure_add_batch", operation_id, recorded, _uuids([t for t, _ in failures]),
                        [r for _, r in failures])

    async def bulk_operation_failure_list(self, operation_id: str) -> list[tuple[str, str]]:
        """[(task_id, reason)] oldest first."""
        recs = await self._run("bulk_operation_failure_list", operation_id)
        return [(str(r["task_id"]), r["reason"]) for r in recs]

    # -- timers ---------------------------------------------------------------
    async def timer_claim_due(self, max_timers: int) -> list[DueTask]:
        """Claim (lock, skipping rows others hold) and delete due timers with their tasks: each
        task once, in the order of its first due timer, with its timers oldest first."""
        by_task: dict[str, DueTask] = {}
        for r in await self._run("timer_claim_due", max_timers):
            task_id = str(r["task_id"])
            due = by_task.get(task_id)
            if due is None:  # (the task's columns are the same on each of its rows)
                due = by_task[task_id] = DueTask(TaskView.from_row(r), [])
            due.dues.append(TimerDue(task_id=task_id, kind=r["kind"], timer_epoch=r["timer_epoch"],
                                     due_now=r["due_now"], lease_expired=r["lease_expired"],
                                     deadline_passed=r["deadline_passed"], kill_passed=r["kill_passed"]))
        return list(by_task.values())

    async def timer_lease_reschedule_batch(self, ids: Sequence[str], epochs: Sequence[int]) -> None:
        """Set the lease timer of held leases to their next event."""
        await self._run("timer_lease_reschedule_batch", _uuids(ids), list(epochs))

    async def timer_next_in(self) -> float | None:
        """Seconds until the earliest timer (negative if overdue), or None."""
        return await self._run("timer_next_in", fetch="val")

    # -- workflows (workflows.sql) ---------------------------------------------
    async def workflow_lease_share(self, task_id: str, lease_epoch: int) -> tuple[str, bool] | None:
        """Lock a run's task row FOR SHARE while LEASED under lease_epoch; (its tenant, whether it
        holds a cancel for its compensations), or None when the lease is not current."""
        r = await self._run("workflow_lease_share", task_id, lease_epoch, fetch="row")
        return None if r is None else (r["tenant_id"], r["cancelled"])

    async def task_cancel_lock(self, task_id: str) -> CancelLocked | None:
        """task_lock for CancelTask, with whether the run keeps its cancel for compensations."""
        r = await self._run("task_cancel_lock", task_id, fetch="row")
        return CancelLocked.of(r) if r is not None else None

    async def workflow_cancel_insert(self, task_id: str, reason: str) -> None:
        """Keep a run's cancel for its compensations."""
        await self._run("workflow_cancel_insert", task_id, reason, fetch="status")

    async def workflow_cancel_enqueue(self, task_id: str, reason: str) -> int | None:
        """ENQUEUED/RETRY_WAIT/WAITING -> ENQUEUED due now (retry and wake timers gone); the new
        version, or None when the task is in none of those states."""
        return await self._run("workflow_cancel_enqueue", task_id, reason, fetch="val")

    async def workflow_cancelled_batch(self, ids: Sequence[str]) -> set[str]:
        """The runs of ids that hold a cancel for their compensations."""
        return {str(r["workflow_id"]) for r in await self._run("workflow_cancelled_batch", _uuids(ids))}

    async def workflow_steps_ahead(self, task_id: str, position: int, limit: int,
                                   max_bytes: int) -> list[tuple[int, str, str, int, bytes | None]]:
        """The completed entries right after position a resuming run answers from (see the SQL):
        (position, name, kind, attempt, result), in order."""
        recs = await self._run("workflow_steps_ahead", task_id, position, limit, max_bytes)
        return [(r["position"], r["name"], r["kind"], r["attempt"], r["result"]) for r in recs]

    async def workflow_cancels_delete_batch(self, ids: Sequence[str]) -> None:
        """Drop the kept cancels of runs that ended."""
        await self._run("workflow_cancels_delete_batch", _uuids(ids), fetch="status")

    async def workflow_step_lock(self, task_id: str, position: int) -> StepRow | None:
        """The log's row at position, locked; None when the log holds none there."""
        r = await self._run("workflow_step_lock", task_id, position, fetch="row")
        return StepRow.of(r) if r is not None else None

    async def workflow_step_exists(self, task_id: str, position: int) -> bool:
        """Whether the log holds a row at position."""
        return await self._run("workflow_step_exists", task_id, position, fetch="val")

    async def workflow_step_insert(self, task_id: str, position: int, name: str, kind: str, state: str,
                                   lease_epoch: int, result: bytes | None = None,
                                   wake_in_s: float | None = None) -> StepRow | None:
        """Insert a row of the log; None when a concurrent op inserted that position first."""
        r = await self._run("workflow_step_insert", task_id, position, name, kind, state, lease_epoch, result,
                            wake_in_s, fetch="row")
        return StepRow.of(r) if r is not None else None

    async def workflow_step_reclaim(self, task_id: str, position: int, lease_epoch: int) -> int | None:
        """Claim a STEP row again for lease_epoch (attempt + 1); the new attempt, or None."""
        return await self._run("workflow_step_reclaim", task_id, position, lease_epoch, fetch="val")

    async def workflow_step_commit(self, task_id: str, position: int, name: str, lease_epoch: int, state: str,
                                   result: bytes | None, error: ErrorInfo | None, fatal: bool,
                                   kind: str = "STEP") -> int | None:
        """Store a claimed STEP's outcome (compare-and-set on RUNNING under lease_epoch); its attempt,
        or None when the claim is not this lease's."""
        e = error
        return await self._run("workflow_step_commit", task_id, position, lease_epoch, state, result,
                               e.error_class if e else None, e.message if e else None, e.stack if e else None,
                               fatal, name, kind, fetch="val")

    async def workflow_step_close(self, task_id: str, position: int, state: str, result: bytes | None = None,
                                  error: ErrorInfo | None = None) -> bool:
        """End a RUNNING sleep or wait (and its open wait); False if it was not RUNNING."""
        n = await self._run("workflow_step_close", task_id, position, state, result,
                            error.error_class if error else None, error.message if error else None, fetch="val")
        return n == 1

    async def workflow_wait_insert(self, task_id: str, position: int, tenant_id: str, name: str,
                                   match_json: str) -> None:
        """Open the wait of a RUNNING wait row."""
        await self._run("workflow_wait_insert", task_id, position, tenant_id, name, match_json)

    async def workflow_inbox_take(self, task_id: str, name: str, match_json: str, position: int) -> bytes | None:
        """Consume the oldest matching inbox event into the wait at position; its data, or None."""
        data = await self._run("workflow_inbox_take", task_id, name, match_json, position, fetch="val")
        return bytes(data) if data is not None else None

    async def workflow_suspend_batch(self, ts: Sequence[Transition], positions: Sequence[int],
                                     wake_after_s: Sequence[float | None],
                                     checkpoints: Sequence[bytes | None]) -> list[SuspendedRow]:
        """LEASED -> WAITING for the locked runs (each t a Transition of that edge), with their wake
        timers; per run applied, whether its awaited step is still RUNNING."""
        recs = await self._run("workflow_suspend_batch", [t.task_id for t in ts], [t.lease_epoch for t in ts],
                               list(positions), list(wake_after_s), list(checkpoints), [t.reason for t in ts])
        return [SuspendedRow.of(r) for r in recs]

    async def workflow_wake_batch(self, ids: Sequence[str], reason: str) -> dict[str, int]:
        """WAITING -> ENQUEUED (due now, wake timer deleted) for the ids still WAITING;
        {task_id: version} of those woken."""
        recs = await self._run("workflow_wake_batch", _uuids(ids), reason)
        return {str(r["task_id"]): r["version"] for r in recs}

    async def workflow_waits_delete_batch(self, ids: Sequence[str]) -> None:
        """Drop the open waits of runs that ended."""
        await self._run("workflow_waits_delete_batch", _uuids(ids))

    async def workflow_task_owner(self, task_id: str) -> tuple[str, str] | None:
        """(tenant_id, state) of a task, or None."""
        r = await self._run("workflow_task_owner", task_id, fetch="row")
        return (r["tenant_id"], r["state"]) if r is not None else None

    async def workflow_step_page(self, task_id: str, from_position: int, limit: int) -> list[StepRow]:
        """Up to limit rows of the log from from_position, in position order."""
        return [StepRow.of(r) for r in await self._run("workflow_step_page", task_id, from_position, limit)]

    async def workflow_step_count(self, task_id: str) -> int:
        """How many rows the run's log holds."""
        return await self._run("workflow_step_count", task_id, fetch="val")

    async def workflow_pending(self, task_id: str) -> PendingRow | None:
        """The last RUNNING sleep or wait of the log, or None."""
        r = await self._run("workflow_pending", task_id, fetch="row")
        return PendingRow.of(r) if r is not None else None

    async def workflow_inbox_deliver(self, task_id: str, name: str, data_json: str,
                                     event_id: str | None = None) -> int | None:
        """Put an event into a (locked) run's inbox; the position of the open wait it completed, or
        None (kept for a later wait)."""
        return await self._run("workflow_inbox_deliver", task_id, name, data_json, event_id, fetch="val")

    async def workflow_waits_probe(self, tenant_id: str, name: str, data_json: str, after: str,
                                   limit: int) -> list[str]:
        """The next runs (workflow_id order, after `after`) with an open wait the event may match."""
        recs = await self._run("workflow_waits_probe", tenant_id, name, data_json, uuid.UUID(after), limit)
        return [str(r["workflow_id"]) for r in recs]

    async def workflow_tasks_lock(self, ids: Sequence[str]) -> list[str]:
        """Lock these task rows in task_id order; the ids that exist."""
        return [str(r["task_id"]) for r in await self._run("workflow_tasks_lock", _uuids(ids))]

    async def workflow_broadcast_apply(self, ids: Sequence[str], tenant_id: str, name: str,
                                       data_json: str) -> list[tuple[str, int]]:
        """Complete the locked runs' open waits the event matches; [(run, position)] completed."""
        recs = await self._run("workflow_broadcast_apply", _uuids(ids), tenant_id, name, data_json)
        return [(str(r["workflow_id"]), r["position"]) for r in recs]

    # -- fan-outs (fanout.sql) -------------------------------------------------
    async def workflow_fanout_insert(self, task_id: str, position: int, name: str, kind: str, lease_epoch: int,
                                     child_count: int, on_failure: str) -> bool:
        """Insert a RUNNING fan-out step and its barrier; False when the position was taken first."""
        return await self._run("workflow_fanout_insert", task_id, position, name, kind, lease_epoch, child_count,
                               on_failure, fetch="val") == 1

    async def workflow_fanout_lock(self, task_id: str, position: int) -> FanoutRow | None:
        """The log's row at position (locked) with its fan-out columns; None when there is none."""
        r = await self._run("workflow_fanout_lock", task_id, position, fetch="row")
        return FanoutRow.of(r) if r is not None else None

    async def workflow_child_done_page(self, task_id: str, position: int, from_index: int,
                                       limit: int) -> list[ChildDoneRow]:
        """The recorded ends of the fan-out's children with index in [from_index, from_index + limit)."""
        recs = await self._run("workflow_child_done_page", task_id, position, from_index, limit)
        return [ChildDoneRow.of(r) for r in recs]

    async def workflow_children_link(self, links: Sequence[tuple[str, str, int, int]]) -> None:
        """(child, parent, position, index): the parent link of children created in this transaction."""
        await self._run("workflow_children_link", [x[0] for x in links], [x[1] for x in links],
                        [x[2] for x in links], [x[3] for x in links])

    async def workflow_outbox_take(self, limit: int) -> list[ChildEnd]:
        """Up to limit undelivered child ends of this shard, locked (SKIP LOCKED)."""
        return [ChildEnd.of(r) for r in await self._run("workflow_outbox_take", limit)]

    async def workflow_outbox_delete(self, child_ids: Sequence[str]) -> None:
        """Drop delivered child ends."""
        await self._run("workflow_outbox_delete", _uuids(child_ids))

    async def workflow_barriers_lock(self, ends: Sequence[ChildEnd]) -> dict[tuple[str, int, int], tuple[int, int]]:
        """Lock the stripe rows these ends may decrement, in one global order;
        {(run, position, stripe): (remaining, the fan-out's K)}."""
        recs = await self._run("workflow_barriers_lock", _uuids([e.parent_id for e in ends]),
                               [e.position for e in ends], [e.child_index for e in ends])
        return {(str(r["workflow_id"]), r["position"], r["stripe"]): (r["remaining"], r["k"]) for r in recs}

    async def workflow_barrier_tops_lock(self, fanouts: Sequence[tuple[str, int]]) -> None:
        """Lock the top rows of these fan-outs (after their stripes), in order."""
        await self._run("workflow_barrier_tops_lock", _uuids([f[0] for f in fanouts]), [f[1] for f in fanouts])

    async def workflow_children_states(self, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """{task_id: (state, task_type)} of the ids on this shard."""
        recs = await self._run("workflow_children_states", _uuids(ids))
        return {str(r["task_id"]): (r["state"], r["task_type"]) for r in recs}

    async def workflow_child_deliver(self, ends: Sequence[ChildEnd]) -> list[tuple[str, int, str, str]]:
        """Record child ends on the parent's shard (once each) and decrement the barriers;
        [(parent, position, why, on_failure)] of the fan-outs completed now."""
        recs = await self._run("workflow_child_deliver", _uuids([e.child_id for e in ends]),
                               _uuids([e.parent_id for e in ends]), [e.position for e in ends],
                               [e.child_index for e in ends], [e.state for e in ends], [e.result for e in ends],
                               [e.error_class for e in ends], [e.error_message for e in ends],
                               [e.ended_at for e in ends])
        return [(str(r["workflow_id"]), r["position"], r["why"], r["on_failure"]) for r in recs]

    async def workflow_cascade_open(self, run_ids: Sequence[str], position: int | None = None) -> int:
        """Open the cascade (cancel the children) of each open fan-out of these runs, or of the
        fan-out at position of the one run; how many were opened."""
        n = await self._run("workflow_cascade_open", _uuids(run_ids), position, fetch="val")
        if n:
            self._child_ended()  # (the same loop drives cascades: wake it after the commit)
        return n

    async def workflow_cascade_take(self, limit: int) -> list[tuple[str, int, int, int]]:
        """Up to limit open cascades, locked: (parent, position, cursor, child count)."""
        recs = await self._run("workflow_cascade_take", limit)
        return [(str(r["parent_id"]), r["position"], r["cursor"], r["child_count"]) for r in recs]

    async def workflow_cascade_advance(self, parent_id: str, position: int, cursor: int, child_count: int) -> None:
        """Move the cascade's cursor, or drop it at the fan-out's end."""
        await self._run("workflow_cascade_advance", uuid.UUID(parent_id), position, cursor, child_count)

    async def workflow_children_cancel_lock(self, ids: Sequence[str]) -> list[tuple[str, str, int, bool]]:
        """The live tasks among ids, locked: (task_id, state, lease_epoch, cancel_requested)."""
        recs = await self._run("workflow_children_cancel_lock", _uuids(ids))
        return [(str(r["task_id"]), r["state"], r["lease_epoch"], r["cancel_requested"]) for r in recs]

    async def workflow_fanout_counts(self, task_id: str, from_position: int, limit: int) -> dict[int, tuple[int, int]]:
        """{position: (child_count, children ended)} of the fan-out rows in the page."""
        recs = await self._run("workflow_fanout_counts", task_id, from_position, limit)
        return {r["position"]: (r["child_count"], r["done"]) for r in recs}

    async def workflow_inbox_event_seen(self, task_id: str, event_id: str) -> bool | None:
        """A resent event: None when (run, event id) is new, else whether it completed a wait."""
        return await self._run("workflow_inbox_event_seen", task_id, event_id, fetch="val")

    # -- idempotency keys -----------------------------------------------------
    async def idempotency_key_expire_batch(self, keys: Sequence[Key]) -> None:
        """Delete these keys where their window has passed (a live key stays)."""
        await self._run("idempotency_key_expire_batch", [k[0] for k in keys], [k[1] for k in keys],
                        [k[2] for k in keys])
