"""Typed wrappers over the cron database's named queries.

`Store.tx()` opens a transaction and yields a `Tx` whose methods are the
named queries of schedules.sql and slots.sql, each with a deadline. Lost
connections, timeouts, lock waits and deadlocks leave the block as
errors.Unavailable, so callers see one error (and the transaction rolled
back). `hooks` (tests only) run before a named query, for fault injection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import pathlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg

from ratchet.libs.pg.queries import load_queries
from ratchet.services.cron import errors

HERE = pathlib.Path(__file__).parent
Q = load_queries(HERE / "schedules.sql", HERE / "slots.sql")
Hook = Callable[[str], Awaitable[None]]

OPEN_STATES = ("PENDING", "BUFFERED", "SENDING")


@dataclasses.dataclass(frozen=True)
class ScheduleRow:
    """One row of schedules; task_template is the proto JSON as a dict."""

    schedule_id: str
    tenant_id: str
    app_id: str
    cron: str
    timezone: str
    task_template: dict
    overlap_policy: str
    catchup_window_ms: int
    state: str
    next_fire_time: dt.datetime | None
    last_fire_time: dt.datetime | None
    last_task_id: str | None
    request_id: str | None
    fingerprint: str
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def of(cls, row: asyncpg.Record) -> ScheduleRow:
        data = dict(row)
        data["schedule_id"] = str(data["schedule_id"])
        if isinstance(data["task_template"], str):
            data["task_template"] = json.loads(data["task_template"])
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class SlotRow:
    """One row of schedule_slots."""

    schedule_id: str
    slot: dt.datetime
    kind: str
    state: str
    task_id: str | None
    cancel_task_id: str | None
    reason: str | None
    attempts: int
    next_attempt_at: dt.datetime
    created_at: dt.datetime
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, row: asyncpg.Record) -> SlotRow:
        data = dict(row)
        data["schedule_id"] = str(data["schedule_id"])
        return cls(**data)

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES


@dataclasses.dataclass(frozen=True)
class NewSchedule:
    schedule_id: str
    tenant_id: str
    app_id: str
    cron: str
    timezone: str
    task_template: dict
    overlap_policy: str
    catchup_window_ms: int
    next_fire_time: dt.datetime
    request_id: str | None
    fingerprint: str
    # The clock reading next_fire_time was computed from: the schedule's created_at, so its
    # first occurrence is always after its creation (a clock read at insert time could fall
    # after a second boundary that the read before it did not, on a busy machine).
    created_at: dt.datetime | None = None


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return None


class Tx:
    """The named queries, on one connection inside one transaction (Store.tx), or outside any,
    each statement on its own (Store.read: reads only)."""

    def __init__(self, conn: asyncpg.Connection, timeout: float, hooks: dict[str, Hook]):
        self.conn = conn
        self.timeout = timeout
        self._hooks = hooks

    async def _hook(self, name: str) -> None:
        hook = self._hooks.get(name)
        if hook is not None:
            await hook(name)

    async def _fetch(self, name: str, *args) -> list[asyncpg.Record]:
        await self._hook(name)
        return await self.conn.fetch(Q[name], *args, timeout=self.timeout)

    async def _row(self, name: str, *args) -> asyncpg.Record | None:
        rows = await self._fetch(name, *args)
        return rows[0] if rows else None

    # -- schedules ---------------------------------------------------------------
    async def clock_read(self) -> dt.datetime:
        """The database clock: the only clock that decides what is due."""
        return (await self._row("clock_read"))["now"]

    async def schedule_insert(self, s: NewSchedule) -> ScheduleRow | None:
        """Insert; None when the caller's request_id already names a schedule."""
        row = await self._row("schedule_insert", uuid.UUID(s.schedule_id), s.tenant_id, s.app_id, s.cron,
                              s.timezone, json.dumps(s.task_template, sort_keys=True), s.overlap_policy,
                              s.catchup_window_ms, s.next_fire_time, s.request_id, s.fingerprint,
                              s.created_at)
        return ScheduleRow.of(row) if row else None

    async def schedule_get(self, schedule_id: str, tenant_id: str, app_id: str) -> ScheduleRow | None:
        sid = _uuid(schedule_id)
        row = await self._row("schedule_get", sid, tenant_id, app_id) if sid else None
        return ScheduleRow.of(row) if row else None

    async def schedule_get_by_request(self, tenant_id: str, app_id: str, request_id: str) -> ScheduleRow | None:
        row = await self._row("schedule_get_by_request", tenant_id, app_id, request_id)
        return ScheduleRow.of(row) if row else None

    async def schedule_get_any(self, schedule_id: str) -> ScheduleRow | None:
        row = await self._row("schedule_get_any", uuid.UUID(schedule_id))
        return ScheduleRow.of(row) if row else None

    async def schedule_lock(self, schedule_id: str) -> ScheduleRow | None:
        row = await self._row("schedule_lock", uuid.UUID(schedule_id))
        return ScheduleRow.of(row) if row else None

    async def schedule_lock_owned(self, schedule_id: str, tenant_id: str, app_id: str) -> ScheduleRow | None:
        sid = _uuid(schedule_id)
        row = await self._row("schedule_lock_owned", sid, tenant_id, app_id) if sid else None
        return ScheduleRow.of(row) if row else None

    async def schedule_list(self, tenant_id: str, app_id: str, after: tuple[dt.datetime, str] | None,
                            limit: int) -> list[ScheduleRow]:
        created, sid = after if after else (None, None)
        rows = await self._fetch("schedule_list", tenant_id, app_id, created,
                                 uuid.UUID(sid) if sid else None, limit)
        return [ScheduleRow.of(r) for r in rows]

    async def schedule_next_due(self) -> float | None:
        """Seconds until a schedule is due (<= 0: one is due now); None when none could fire."""
        return (await self._row("schedule_next_due"))["due_in_s"]

    async def schedule_claim_due(self, now: dt.datetime, limit: int) -> list[ScheduleRow]:
        return [ScheduleRow.of(r) for r in await self._fetch("schedule_claim_due", now, limit)]

    async def schedule_advance(self, schedule_id: str, due: dt.datetime, following: dt.datetime | None) -> bool:
        return await self._row("schedule_advance", uuid.UUID(schedule_id), due, following) is not None

    async def schedule_record_fire(self, schedule_id: str, slot: dt.datetime, task_id: str) -> bool:
        return await self._row("schedule_record_fire", uuid.UUID(schedule_id), slot, task_id) is not None

    async def schedule_pause(self, schedule_id: str) -> ScheduleRow | None:
        row = await self._row("schedule_pause", uuid.UUID(schedule_id))
        return ScheduleRow.of(row) if row else None

    async def schedule_resume(self, schedule_id: str, next_fire_time: dt.datetime) -> ScheduleRow | None:
        row = await self._row("schedule_resume", uuid.UUID(schedule_id), next_fire_time)
        return ScheduleRow.of(row) if row else None

    async def schedule_delete(self, schedule_id: str, tenant_id: str, app_id: str) -> bool:
        sid = _uuid(schedule_id)
        return sid is not None and await self._row("schedule_delete", sid, tenant_id, app_id) is not None

    # -- slots -------------------------------------------------------------------
    async def slot_insert(self, schedule_id: str, slot: dt.datetime, kind: str) -> bool:
        """Record a slot as PENDING; False if (schedule_id, slot) already exists."""
        return await self._row("slot_insert", uuid.UUID(schedule_id), slot, kind) is not None

    async def slot_get(self, schedule_id: str, slot: dt.datetime) -> SlotRow | None:
        row = await self._row("slot_get", uuid.UUID(schedule_id), slot)
        return SlotRow.of(row) if row else None

    async def slot_list_open(self, schedule_id: str, limit: int) -> list[SlotRow]:
        return [SlotRow.of(r) for r in await self._fetch("slot_list_open", uuid.UUID(schedule_id), limit)]

    async def slot_list_recent(self, schedule_id: str, limit: int) -> list[SlotRow]:
        return [SlotRow.of(r) for r in await self._fetch("slot_list_recent", uuid.UUID(schedule_id), limit)]

    async def slot_due_schedules(self, limit: int) -> tuple[list[str], bool]:
        """(ids of schedules with a slot to act on now, soonest first; whether any slot is open)."""
        rows = await self._fetch("slot_due_schedules", limit)
        return [str(r["schedule_id"]) for r in rows if r["due"]], bool(rows)

    async def slot_decision_guards(self, schedule_id: str, slot: dt.datetime) -> tuple[bool, bool]:
        """(an earlier slot is undecided or unsent, another slot is buffered)."""
        row = await self._row("slot_decision_guards", uuid.UUID(schedule_id), slot)
        return row["earlier_open"], row["other_buffered"]

    async def slot_decide(self, schedule_id: str, slot: dt.datetime, expected: str, state: str,
                          reason: str | None, cancel_task_id: str | None, recheck_s: float) -> bool:
        return await self._row("slot_decide", uuid.UUID(schedule_id), slot, expected, state, reason,
                               cancel_task_id, float(recheck_s)) is not None

    async def slot_check_later(self, schedule_id: str, slot: dt.datetime, after_s: float) -> bool:
        return await self._row("slot_check_later", uuid.UUID(schedule_id), slot, float(after_s)) is not None

    async def slot_mark_fired(self, schedule_id: str, slot: dt.datetime, task_id: str) -> bool:
        return await self._row("slot_mark_fired", uuid.UUID(schedule_id), slot, task_id) is not None

    async def slot_mark_failed(self, schedule_id: str, slot: dt.datetime, reason: str) -> bool:
        return await self._row("slot_mark_failed", uuid.UUID(schedule_id), slot, reason) is not None

    async def slot_retry_later(self, schedule_id: str, slot: dt.datetime, state: str, reason: str,
                               after_s: float) -> bool:
        return await self._row("slot_retry_later", uuid.UUID(schedule_id), slot, state, reason,
                               float(after_s)) is not None

    async def slot_skip_on_pause(self, schedule_id: str) -> None:
        await self._fetch("slot_skip_on_pause", uuid.UUID(schedule_id))

    async def slot_delete_for_schedule(self, schedule_id: str) -> None:
        await self._fetch("slot_delete_for_schedule", uuid.UUID(schedule_id))

    async def slot_prune(self, older_than_s: float, limit: int) -> int:
        await self._hook("slot_prune")
        status = await self.conn.execute(Q["slot_prune"], float(older_than_s), limit, timeout=self.timeout)
        return int(status.split()[-1])


_UNAVAILABLE = (OSError, asyncpg.exceptions.PostgresConnectionError, asyncpg.exceptions.CannotConnectNowError,
                asyncpg.exceptions.TooManyConnectionsError, asyncpg.exceptions.InterfaceError,
                asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.LockNotAvailableError,
                asyncpg.exceptions.SerializationError)


class Store:
    """The cron database through one asyncpg pool."""

    def __init__(self, pool: asyncpg.Pool, timeout_s: float = 5.0, hooks: dict[str, Hook] | None = None):
        self.pool = pool
        self.timeout = timeout_s
        self.hooks: dict[str, Hook] = hooks if hooks is not None else {}

    @contextlib.asynccontextmanager
    async def tx(self) -> AsyncIterator[Tx]:
        """One transaction; database trouble leaves as errors.Unavailable (rolled back)."""
        async with self._conn(transaction=True) as tx:
            yield tx

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        """One connection, no transaction: for the loops' reads of what is due (no BEGIN and
        COMMIT round trips around a read that finds nothing, several times a second)."""
        async with self._conn(transaction=False) as tx:
            yield tx

    @contextlib.asynccontextmanager
    async def _conn(self, *, transaction: bool) -> AsyncIterator[Tx]:
        try:
            async with self.pool.acquire(timeout=self.timeout) as conn:
                if transaction:
                    async with conn.transaction():
                        yield Tx(conn, self.timeout, self.hooks)
                else:
                    yield Tx(conn, self.timeout, self.hooks)
        except _UNAVAILABLE as e:
            raise errors.Unavailable(f"cron database unavailable: {type(e).__name__}: {e}; retry shortly") from e
        except (TimeoutError, asyncpg.exceptions.QueryCanceledError) as e:
            raise errors.Unavailable("cron database did not answer in time; retry shortly") from e
