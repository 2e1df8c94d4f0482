"""Typed wrappers over the dispatcher database's named queries (breakers.sql).

`Store.tx()` opens a transaction and yields a `Tx` whose methods are the
named queries, each with a deadline. Lost connections, timeouts and lock
waits leave the block as errors.BreakersUnavailable (rolled back).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import pathlib
from collections.abc import AsyncIterator

import asyncpg

from ratchet.libs.pg.queries import load_queries
from ratchet.services.dispatcher.breakers import Breaker, BreakerKey, Crash
from ratchet.services.dispatcher.errors import BreakerConflict, BreakersUnavailable

HERE = pathlib.Path(__file__).parent
Q = load_queries(HERE / "breakers.sql")

_UNAVAILABLE = (OSError, asyncpg.exceptions.PostgresConnectionError, asyncpg.exceptions.CannotConnectNowError,
                asyncpg.exceptions.TooManyConnectionsError, asyncpg.exceptions.InterfaceError,
                asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.LockNotAvailableError,
                asyncpg.exceptions.SerializationError)


def breaker_of(row: asyncpg.Record) -> Breaker:
    """A Breaker from a row of the breakers table."""
    crashes = row["last_crashes"]
    if isinstance(crashes, str):
        crashes = json.loads(crashes)
    return Breaker(key=BreakerKey(row["tenant_id"], row["app_id"], row["task_type"]), state=row["state"],
                   crash_times=tuple(row["crash_times"] or ()),
                   last_crashes=tuple(Crash.from_json(c) for c in crashes), reason=row["reason"],
                   opened_at=row["opened_at"], probe_at=row["probe_at"], probe_owner=row["probe_owner"],
                   probe_task_id=row["probe_task_id"], probe_leased_at=row["probe_leased_at"],
                   version=row["version"])


class Tx:
    """The named queries, on one connection inside one transaction."""

    def __init__(self, conn: asyncpg.Connection, timeout: float):
        self.conn = conn
        self.timeout = timeout

    async def _fetch(self, name: str, *args) -> list[asyncpg.Record]:
        return await self.conn.fetch(Q[name], *args, timeout=self.timeout)

    async def clock_read(self) -> dt.datetime:
        """The database clock: the only `now` breakers are decided with."""
        return (await self._fetch("clock_read"))[0]["now"]

    async def breaker_lock(self, key: BreakerKey, create: bool = False) -> Breaker | None:
        """Lock the breaker's row (creating a CLOSED one first if `create`); None if there is none."""
        args = (key.tenant_id, key.app_id, key.task_type)
        if create:
            await self.conn.execute(Q["breaker_create"], *args, timeout=self.timeout)
        rows = await self._fetch("breaker_lock", *args)
        return breaker_of(rows[0]) if rows else None

    async def breaker_get(self, key: BreakerKey) -> Breaker | None:
        rows = await self._fetch("breaker_get", key.tenant_id, key.app_id, key.task_type)
        return breaker_of(rows[0]) if rows else None

    async def breaker_update(self, old: Breaker, new: Breaker) -> Breaker:
        """Write `new` over `old` if the row still holds old's state and version."""
        k = old.key
        rows = await self._fetch(
            "breaker_update", k.tenant_id, k.app_id, k.task_type, old.state, old.version, new.state,
            list(new.crash_times), json.dumps([c.to_json() for c in new.last_crashes]), new.reason,
            new.opened_at, new.probe_at, new.probe_owner, new.probe_task_id, new.probe_leased_at)
        if not rows:
            raise BreakerConflict(f"breaker {k.tenant_id}/{k.app_id}/{k.task_type} is no longer {old.state} "
                                  f"at version {old.version}; not changed")
        return breaker_of(rows[0])

    async def breaker_list_not_closed(self) -> list[Breaker]:
        return [breaker_of(r) for r in await self._fetch("breaker_list_not_closed")]

    async def breaker_list_app(self, tenant_id: str, app_id: str, window_s: float) -> list[Breaker]:
        return [breaker_of(r) for r in await self._fetch("breaker_list_app", tenant_id, app_id, float(window_s))]


class Store:
    """The dispatcher database through one asyncpg pool."""

    def __init__(self, pool: asyncpg.Pool | None, timeout_s: float):
        self.pool = pool  # set once the server has migrated and connected
        self.timeout = timeout_s

    @contextlib.asynccontextmanager
    async def tx(self) -> AsyncIterator[Tx]:
        """One transaction; database trouble leaves as BreakersUnavailable (rolled back)."""
        if self.pool is None:
            raise BreakersUnavailable("breakers database not connected yet; retry shortly")
        try:
            async with self.pool.acquire(timeout=self.timeout) as conn, conn.transaction():
                yield Tx(conn, self.timeout)
        except _UNAVAILABLE as e:
            raise BreakersUnavailable(f"breakers database unavailable: {type(e).__name__}: {e}; "
                                      "retry shortly") from e
        except (TimeoutError, asyncpg.exceptions.QueryCanceledError) as e:
            raise BreakersUnavailable("breakers database did not answer in time; retry shortly") from e
