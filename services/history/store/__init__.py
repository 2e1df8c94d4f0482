"""History's SQL: named queries from the .sql files beside this module, and
one typed wrapper per query (same name as the query).

Each wrapper runs through `Store._run`, which calls the test-only hooks for
that query name first/after, so a fault harness can inject a failure into
exactly one query ("the write happened but the caller saw a timeout").

Every statement here is the guarded one: there is no variant without its
fence, lock or compare-and-set. The fault checker's broken builds are made by
the fault tests from these statements (tests/fault/mutants).
"""

from __future__ import annotations

import dataclasses
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
from ratchet.services.history.model import DAWN, MAX_ID, NEVER, NIL_ID, TaskFilter, Transition

_HERE = pathlib.Path(__file__).parent
QUERIES = load_queries(*sorted(_HERE.glob("*.sql")))

Hook = Callable[[str], Awaitable[None]]

# What the COPY of plain tasks (Store.task_create_plain) writes: the id and the payload first,
# then the fields every row of a call shares, encoded once per call (libs/fastcheck.copy_rows
# writes the rows in C). Every other column takes its default: version 1, attempt 0,
# lease_epoch 0, cancel_requested false, NULL, and the transaction's now() for created_at,
# run_at and updated_at (migration 0015). The default queue, policy and timeouts go as NULL,
# as the statements store them (migration 0013).
_PLAIN_COPY_COLUMNS = ("task_id", "payload", "tenant_id", "app_id", "queue", "task_type", "state", "max_attempts",
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
# The fewest rows Store.task_create_plain copies in (a batch call's part for a shard: 100 rows
# a slot run); fewer go by the statement.
COPY_MIN_ROWS = 50

Key = tuple[str, str, str]  # (tenant_id, app_id, key)
TypeKey = tuple[str, str, str]  # (tenant_id, app_id, task_type)


@dataclasses.dataclass(slots=True)
class NewRow:
    """A validated task ready to insert (never modified once built; not frozen: a frozen
    dataclass of 16 fields costs ~2 us more to build, per task of a batch)."""

    task_id: str
    tenant_id: str
    app_id: str
    task_type: str
    queue: str
    payload: bytes
    delay_s: float | None
    run_at: datetime | None
    idempotency_key: str | None
    max_attempts: int
    retry_policy: dict
    timeouts: dict
    non_retryable: list[str]
    retry_rules: dict | None = None  # {error_class: Rule.to_json()}, None when there are none
    schedule_id: str | None = None
    scheduled_time: datetime | None = None


def _uuids(ids: Sequence[str]) -> list[uuid.UUID]:
    return [uuid.UUID(str(i)) for i in ids]


def _shared(values: list) -> list:
    """values as one element when every one is that element (list.count compares in C), else as is."""
    if len(values) > 1 and values.count(values[0]) == len(values):
        return values[:1]
    return values


def _checked(ids: Sequence) -> list:
    """Ids already checked (canonical strings from convert.task_id, or uuid values read from
    a shard): asyncpg encodes either as uuid, without _uuids' parse per id (~1.5-2.5 us) on
    the lease and completion paths."""
    return list(ids)


def _triples(keys: Sequence[TypeKey]) -> tuple[list[str], list[str], list[str]]:
    return [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]


class Store:
    """Typed access to one shard database's history tables.

    `before` and `after` map a query name to an async hook; they are empty in
    production and exist only for fault-injection tests. `queries` is the
    statement registry the wrappers run (by name).
    """

    queries: Mapping[str, str] = QUERIES

    def __init__(self) -> None:
        self.before: dict[str, Hook] = {}
        self.after: dict[str, Hook] = {}

    async def _run(self, conn: asyncpg.Connection, name: str, *args: Any, fetch: str = "all") -> Any:
        hook = self.before.get(name)
        if hook is not None:
            await hook(name)
        sql = self.queries[name]
        if fetch == "all":
            out = await conn.fetch(sql, *args)
        elif fetch == "row":
            out = await conn.fetchrow(sql, *args)
        else:
            out = await conn.fetchval(sql, *args)
        hook = self.after.get(name)
        if hook is not None:
            await hook(name)
        return out

    # -- tasks ----------------------------------------------------------------
    @staticmethod
    def _new_row_args(rows: Sequence[NewRow], s2s: Sequence[float | None], s2c: Sequence[float | None]) -> list:
        """The insert statements' array parameters, one per column. A column every row shares
        (a batch call's tenant, app, type, policy; the NULLs of what was not set) goes as a
        one-element array the statement reads for every row: asyncpg encodes and Postgres
        parses one value, not one per row (16 of the 18 columns of a typical batch)."""
        dumped: dict[int, str] = {}  # rows of one policy share its dicts: encode each object once

        def dumps(obj) -> str | None:
            if not obj:  # the defaults ({}, {}, []) go as NULL: stored so (migration 0013)
                return None
            text = dumped.get(id(obj))
            if text is None:
                text = dumped[id(obj)] = json.dumps(obj)
            return text
        # (task ids as the canonical strings convert.new_task checked: asyncpg encodes them as uuid)
        return [[r.task_id for r in rows], _shared([r.tenant_id for r in rows]), _shared([r.app_id for r in rows]),
                _shared([r.task_type for r in rows]), _shared([r.queue for r in rows]), [r.payload for r in rows],
                _shared([r.delay_s for r in rows]), _shared([r.run_at for r in rows]),
                _shared([r.idempotency_key for r in rows]), _shared([r.max_attempts for r in rows]),
                _shared([dumps(r.retry_policy) for r in rows]), _shared([dumps(r.timeouts) for r in rows]),
                _shared([dumps(r.non_retryable) for r in rows]), _shared(list(s2s)), _shared(list(s2c)),
                _shared([dumps(r.retry_rules) for r in rows]), _shared([r.schedule_id for r in rows]),
                _shared([r.scheduled_time for r in rows])]

    async def task_insert_batch(self, conn, rows: Sequence[NewRow],
                                s2s: Sequence[float | None], s2c: Sequence[float | None]) -> dict[str, bool]:
        """Insert tasks; returns {task_id: due_now} for the rows inserted now."""
        recs = await self._run(conn, "task_insert_batch", *self._new_row_args(rows, s2s, s2c))
        return {str(r["task_id"]): r["due"] for r in recs}

    async def task_create_batch(self, conn, rows: Sequence[NewRow], s2s: Sequence[float | None],
                                s2c: Sequence[float | None], fingerprints: Sequence[str | None],
                                window_s: float, strict: bool = False) -> dict[str, tuple[bool, bool, bool]]:
        """Claim keys and insert in one statement -> {task_id: (inserted, due, key claimed)};
        strict: every row is inserted or the statement aborts (InvalidTextRepresentationError)."""
        recs = await self._run(conn, "task_create_batch", *self._new_row_args(rows, s2s, s2c),
                               _shared(list(fingerprints)), window_s, strict)
        return {str(r["task_id"]): (r["inserted"], r["due"], r["claimed"]) for r in recs}

    async def task_create_plain(self, conn, task_ids: list[str], payloads: list[bytes], tenant_id: str,
                                app_id: str, task_type: str, queue: str, max_attempts: int, retry_policy: dict,
                                timeouts: dict, non_retryable: list[str], retry_rules: dict | None,
                                s2s: float | None, s2c: float | None) -> int:
        """Insert plain tasks, due now, sharing every value but id and payload; all or none
        (asyncpg.UniqueViolationError when an id exists). Returns how many: all of them. The
        ids must be canonical and each payload one JSON value alone (convert.plain checks).

        COPY_MIN_ROWS or more without schedule-to-start or schedule-to-close timeouts (no
        timer rows: the usual plain batch) go in by a binary COPY: Postgres' multi-row heap
        insert, one WAL record per page, no executor projection per row: ~25 % less backend
        CPU and ~11 % less WAL per row than the statement (250-row calls). Its data is built in
        one C call (copy_rows; asyncpg's records cost ~2 us per row to encode here). Fewer
        rows (the single enqueues' groups) keep the statement: there the COPY's fixed cost in
        history (asyncpg's copy-in, a second round trip) outweighs what Postgres saves (single
        enqueues, 32 producers: history 226 -> 263 us per task with COPY). One statement
        either way: one transaction."""
        rp = json.dumps(retry_policy) if retry_policy else None
        to = json.dumps(timeouts) if timeouts else None
        rr = json.dumps(retry_rules) if retry_rules else None
        if s2s is not None or s2c is not None or len(task_ids) < COPY_MIN_ROWS:
            # (one text and one bytea value, not two arrays: see the statement)
            return await self._run(conn, "task_create_plain", ",".join(task_ids),
                                   b"[" + b",".join(payloads) + b"]", tenant_id, app_id, task_type, queue,
                                   max_attempts, rp, to, non_retryable or None, rr, s2s, s2c, fetch="val")
        hook = self.before.get("task_create_plain")
        if hook is not None:
            await hook("task_create_plain")
        shared = b"".join((_field(tenant_id.encode()), _field(app_id.encode()),
                           _field(None if queue == "default" else queue.encode()), _field(task_type.encode()),
                           _ENQUEUED, _field(struct.pack("!i", max_attempts)), _jsonb(rp), _jsonb(to),
                           _field(_text_array(non_retryable) if non_retryable else None), _jsonb(rr)))
        data = copy_rows(task_ids, payloads, len(_PLAIN_COPY_COLUMNS), shared)
        # (a memoryview: asyncpg reads bytes as a file's path, os.fspath takes them)
        await conn.copy_to_table("tasks", source=memoryview(data), columns=_PLAIN_COPY_COLUMNS, format="binary")
        hook = self.after.get("task_create_plain")
        if hook is not None:
            await hook("task_create_plain")
        return len(task_ids)

    async def task_existing_batch(self, conn, ids: Sequence[str]) -> dict[str, tuple[str, str, str]]:
        """{task_id: (tenant_id, app_id, task_type)} for the ids that exist."""
        recs = await self._run(conn, "task_existing_batch", _uuids(ids))
        return {str(r["task_id"]): (r["tenant_id"], r["app_id"], r["task_type"]) for r in recs}

    async def task_get(self, conn, task_id: str) -> asyncpg.Record | None:
        """The whole task row, or None."""
        return await self._run(conn, "task_get", uuid.UUID(task_id), fetch="row")

    async def task_lock(self, conn, task_id: str) -> asyncpg.Record | None:
        """Lock one task row (FOR NO KEY UPDATE); None if it does not exist."""
        return await self._run(conn, "task_lock", uuid.UUID(task_id), fetch="row")

    async def task_state_batch(self, conn, ids: Sequence[str]) -> dict[str, str]:
        """{task_id: state} for the ids that exist."""
        recs = await self._run(conn, "task_state_batch", _uuids(ids))
        return {str(r["task_id"]): r["state"] for r in recs}

    async def task_ready_tenants(self, conn, after: str, upto: str | None, app_ids: Sequence[str],
                                 limit: int, excluded: Sequence[TypeKey] = ()) -> list[str]:
        """Tenants with ready work (not of the excluded types) in (after, upto], tenant order, at most `limit`."""
        recs = await self._run(conn, "task_ready_tenants", after, upto, list(app_ids), limit, *_triples(excluded))
        return [r["tenant_id"] for r in recs]

    async def task_claim_ready(self, conn, quotas: dict[str, int], app_ids: Sequence[str],
                               exclude: Sequence[str], excluded: Sequence[TypeKey] = ()) -> list[tuple[str, str]]:
        """Pick ready rows per tenant (not of the excluded types), without locking them; returns
        [(task_id, tenant_id)]."""
        recs = await self._run(conn, "task_claim_ready", list(quotas), list(quotas.values()), list(app_ids),
                               _uuids(exclude), *_triples(excluded))
        return [(str(r["task_id"]), r["tenant_id"]) for r in recs]

    async def task_claim_capped(self, conn, caps: dict[TypeKey, int], app_ids: Sequence[str],
                                exclude: Sequence[str]) -> list[tuple[str, TypeKey]]:
        """Pick up to caps[type] ready rows of each capped type, without locking them; returns
        [(task_id, type key)]."""
        keys = list(caps)
        recs = await self._run(conn, "task_claim_capped", *_triples(keys), [caps[k] for k in keys], list(app_ids),
                               _uuids(exclude))
        return [(str(r["task_id"]), (r["tenant_id"], r["app_id"], r["task_type"])) for r in recs]

    async def task_lease_batch(self, conn, ids: Sequence[str], worker_id: str,
                               lease_s: float) -> list[asyncpg.Record]:
        """Lease the claimed (locked) ids; returns the LeasedTask columns of each."""
        return await self._run(conn, "task_lease_batch", _checked(ids), worker_id, lease_s)

    async def task_heartbeat_batch(self, conn, ids: Sequence[str], epochs: Sequence[int], lease_s: float,
                                   grace_s: float, checkpoints: Sequence[bytes | None] | None = None
                                   ) -> list[asyncpg.Record]:
        """Extend leases still held, storing any checkpoint sent; returns a row per lease still held."""
        cps = list(checkpoints) if checkpoints is not None else [None] * len(ids)
        return await self._run(conn, "task_heartbeat_batch", _uuids(ids), list(epochs), lease_s, grace_s, cps)

    async def task_cancel_request_batch(self, conn, ids: Sequence[str], epochs: Sequence[int],
                                        reasons: Sequence[str], grace_s: float) -> set[str]:
        """Ask running attempts to stop; returns the ids whose lease matched."""
        recs = await self._run(conn, "task_cancel_request_batch", _uuids(ids), list(epochs), list(reasons),
                               grace_s)
        return {str(r["task_id"]) for r in recs}

    async def task_complete_read(self, conn, ids: Sequence[str], epochs: Sequence[int]) -> list[asyncpg.Record]:
        """Read, without locking, the tasks whose lease is current."""
        return await self._run(conn, "task_complete_read", _checked(ids), list(epochs))

    async def task_complete_lock(self, conn, ids: Sequence[str], epochs: Sequence[int]) -> list[asyncpg.Record]:
        """Lock tasks whose lease is current."""
        return await self._run(conn, "task_complete_lock", _checked(ids), list(epochs))

    async def task_transition_apply(self, conn, ts: Sequence[Transition]) -> dict[str, tuple[str, int]]:
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
        # isinstance check against collections.abc each: 16 full columns cost history ~2.9 us
        # per completion, shared ones ~0.85 (a batch of 100 successes, session 15).
        recs = await self._run(conn, "task_transition_apply", ids, *map(_shared, cols[1:]))
        return {str(r["task_id"]): (r["state"], r["version"]) for r in recs}

    async def attempt_list(self, conn, task_id: str) -> list[asyncpg.Record]:
        """A task's attempts, oldest first."""
        return await self._run(conn, "attempt_list", uuid.UUID(task_id))

    async def transition_list(self, conn, task_id: str) -> list[asyncpg.Record]:
        """A task's transition log in version order."""
        return await self._run(conn, "transition_list", uuid.UUID(task_id))

    async def task_retry_batch(self, conn, pairs: Sequence[tuple[str, Transition]]) -> dict[str, str]:
        """Bulk retry (original id, create transition of the new task); returns {original: new id} done
        (an original already retried is left out)."""
        recs = await self._run(conn, "task_retry_batch", _uuids([o for o, _ in pairs]),
                               _uuids([t.task_id for _, t in pairs]), [t.reason for _, t in pairs])
        return {str(r["original_id"]): str(r["task_id"]) for r in recs}

    # -- search ---------------------------------------------------------------
    @staticmethod
    def _filter_args(f: TaskFilter) -> list:
        since, until = f.bounds()
        return [f.task_type, f.queue, f.error_class, since, until]

    async def task_list_page(self, conn, tenant_id: str, app_id: str, f: TaskFilter,
                             cursor: tuple[datetime, str] | None, limit: int) -> list[asyncpg.Record]:
        """Up to `limit` tasks older than the cursor (sort time, task_id), newest first; rows carry sort_at."""
        at, tid = cursor if cursor is not None else (NEVER, MAX_ID)
        return await self._run(conn, "task_list_page", tenant_id, app_id, f.terminal_states(), f.live_states(),
                               *self._filter_args(f), at, uuid.UUID(tid), limit)

    async def task_count(self, conn, tenant_id: str, app_id: str, f: TaskFilter,
                         bound: datetime | None = None) -> int:
        """How many tasks match, counting only sort times up to `bound` when given."""
        return await self._run(conn, "task_count", tenant_id, app_id, f.terminal_states(), f.live_states(),
                               *self._filter_args(f), bound or NEVER, fetch="val")

    async def task_bulk_retry_scan(self, conn, tenant_id: str, app_id: str, f: TaskFilter, bound: datetime,
                                   cursor: tuple[str, datetime, str] | None, limit: int) -> list[asyncpg.Record]:
        """Lock the next terminal tasks of a RETRY operation in (state, finished_at, task_id) order."""
        state, at, tid = cursor if cursor is not None else ("", DAWN, NIL_ID)
        since, until = f.bounds()
        return await self._run(conn, "task_bulk_retry_scan", tenant_id, app_id, state, at, uuid.UUID(tid),
                               f.terminal_states(), since, until, bound, f.task_type, f.queue, f.error_class, limit)

    async def task_bulk_cancel_scan(self, conn, tenant_id: str, app_id: str, f: TaskFilter, bound: datetime,
                                    cursor_id: str | None, limit: int) -> list[asyncpg.Record]:
        """Lock the next live tasks of a CANCEL operation in task_id order."""
        since, until = f.bounds()
        return await self._run(conn, "task_bulk_cancel_scan", tenant_id, app_id, uuid.UUID(cursor_id or NIL_ID),
                               f.live_states(), since, until, bound, f.task_type, f.queue, f.error_class, limit)

    # -- bulk operations ------------------------------------------------------
    async def bulk_operation_insert(self, conn, operation_id: str, tenant_id: str, app_id: str, kind: str,
                                    f: TaskFilter, registered: Sequence[str], matched: int,
                                    bound: datetime) -> asyncpg.Record | None:
        """Insert a RUNNING operation part; None when the id already exists."""
        return await self._run(conn, "bulk_operation_insert", operation_id, tenant_id, app_id, kind,
                               json.dumps(f.to_json()), list(registered), matched, bound, fetch="row")

    async def bulk_operation_get(self, conn, operation_id: str) -> asyncpg.Record | None:
        """The operation part, or None."""
        return await self._run(conn, "bulk_operation_get", operation_id, fetch="row")

    async def bulk_operation_lock(self, conn, operation_id: str) -> asyncpg.Record | None:
        """Lock the operation part if RUNNING and not locked by another batch."""
        return await self._run(conn, "bulk_operation_lock", operation_id, fetch="row")

    async def bulk_operation_running(self, conn, limit: int) -> list[str]:
        """Ids of running operation parts, oldest first."""
        return [r["operation_id"] for r in await self._run(conn, "bulk_operation_running", limit)]

    async def bulk_operation_advance(self, conn, operation_id: str, succeeded: int, failed: int, skipped: int,
                                     cursor: tuple[str | None, datetime | None, str | None],
                                     done: bool) -> asyncpg.Record | None:
        """Record one batch's counts and cursor (and the end when done)."""
        state, at, tid = cursor
        return await self._run(conn, "bulk_operation_advance", operation_id, succeeded, failed, skipped, state, at,
                               uuid.UUID(tid) if tid else None, done, fetch="row")

    async def bulk_operation_cancel(self, conn, operation_id: str) -> asyncpg.Record | None:
        """Stop a running operation part; None if it was not running."""
        return await self._run(conn, "bulk_operation_cancel", operation_id, fetch="row")

    async def bulk_operation_failure_add_batch(self, conn, operation_id: str, recorded: int,
                                               failures: Sequence[tuple[str, str]]) -> None:
        """Record failures after the `recorded` ones (the first 1,000 are kept)."""
        await self._run(conn, "bulk_operation_failure_add_batch", operation_id, recorded,
                        _uuids([t for t, _ in failures]), [r for _, r in failures])

    async def bulk_operation_failure_list(self, conn, operation_id: str) -> list[tuple[str, str]]:
        """[(task_id, reason)] oldest first."""
        recs = await self._run(conn, "bulk_operation_failure_list", operation_id)
        return [(str(r["task_id"]), r["reason"]) for r in recs]

    # -- timers ---------------------------------------------------------------
    async def timer_claim_due(self, conn, max_timers: int) -> list[asyncpg.Record]:
        """Claim (lock, skipping rows others hold) and delete due timers with their tasks."""
        return await self._run(conn, "timer_claim_due", max_timers)

    async def timer_lease_reschedule_batch(self, conn, ids: Sequence[str], epochs: Sequence[int]) -> None:
        """Set the lease timer of held leases to their next event."""
        await self._run(conn, "timer_lease_reschedule_batch", _uuids(ids), list(epochs))

    async def timer_next_in(self, conn) -> float | None:
        """Seconds until the earliest timer (negative if overdue), or None."""
        return await self._run(conn, "timer_next_in", fetch="val")

    # -- idempotency keys -----------------------------------------------------
    async def idempotency_key_claim_batch(self, conn, keys: Sequence[Key], task_ids: Sequence[str],
                                          fingerprints: Sequence[str], window_s: float) -> set[Key]:
        """Claim keys (sorted by the caller); returns the keys this request now owns."""
        recs = await self._run(conn, "idempotency_key_claim_batch", [k[0] for k in keys], [k[1] for k in keys],
                               [k[2] for k in keys], _uuids(task_ids), list(fingerprints), window_s)
        return {(r["tenant_id"], r["app_id"], r["key"]) for r in recs}

    async def idempotency_key_get_batch(self, conn, keys: Sequence[Key]) -> dict[Key, tuple[str, str]]:
        """{key: (task_id, fingerprint)} for keys that exist."""
        recs = await self._run(conn, "idempotency_key_get_batch", [k[0] for k in keys], [k[1] for k in keys],
                               [k[2] for k in keys])
        return {(r["tenant_id"], r["app_id"], r["key"]): (str(r["task_id"]), r["fingerprint"]) for r in recs}
