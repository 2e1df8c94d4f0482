"""The shard databases history serves: one pool per shard, migrated at
start-up. A shard that cannot be reached is marked unavailable (its calls
fail with UNAVAILABLE naming it) and retried in the background; it never
stops the other shards from serving."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
from collections.abc import AsyncIterator

import asyncpg

from ratchet.libs.pg import migrate
from ratchet.libs.pg.pool import create_pool, settable
from ratchet.libs.rpc.errors import ServiceError
from ratchet.services.history.config import HistoryConfig
from ratchet.services.history.errors import ShardUnavailable, UnknownShard, translate_db_error

log = logging.getLogger(__name__)

MIGRATIONS = pathlib.Path(__file__).parent / "migrations"
SERVICE = "history"
CONNECT_TIMEOUT_S = 15.0
ACQUIRE_TIMEOUT_S = 5.0
# A kept connection goes back through the pool (reset, and recycled by max_queries) once in
# this many uses (see Shard.conn).
PARK_ROUNDS = 1000


class Shard:
    """One shard database: its pool once connected, else why not."""

    def __init__(self, shard_id: int, dsn: str, cfg: HistoryConfig):
        self.id = shard_id
        self.dsn = dsn
        self._cfg = cfg
        self.pool: asyncpg.Pool | None = None
        self._kept: list[asyncpg.Connection] = []  # acquired from the pool, idle (see conn)
        self._waiting = 0  # callers waiting in pool.acquire (see conn)
        self._uses = 0
        self.last_error = "not connected yet"
        self._lock = asyncio.Lock()
        # LeaseTasks on this shard run one at a time: the claim takes no row locks
        # (store/tasks.sql, task_claim_ready), so two at once would pick the same rows
        # and the second would wait for the first, then lease fewer.
        self.lease_lock = asyncio.Lock()

    @property
    def available(self) -> bool:
        """True once migrated and pooled."""
        return self.pool is not None

    async def connect(self) -> bool:
        """Apply migrations and open the pool; False (with last_error set) if unreachable."""
        async with self._lock:
            if self.pool is not None:
                return True
            try:
                await asyncio.wait_for(migrate.apply(self.dsn, SERVICE, MIGRATIONS), CONNECT_TIMEOUT_S)
                settings = await asyncio.wait_for(self._settings(), CONNECT_TIMEOUT_S)
                self.pool = await asyncio.wait_for(
                    create_pool(self.dsn, min_size=1, max_size=self._cfg.pool_max_size,
                                statement_timeout_ms=self._cfg.statement_timeout_ms,
                                command_timeout=self._cfg.statement_timeout_ms / 1000 + 5, settings=settings),
                    CONNECT_TIMEOUT_S)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
                self.last_error = f"{type(e).__name__}: {e}"[:300]
                return False
            log.info("shard %s connected and migrated", self.id)
            return True

    async def _settings(self) -> dict[str, str]:
        """The session settings the config asks for that this shard's role may set; a refused
        one is logged (what to grant) and left to the server."""
        if not self._cfg.wal_compression:
            return {}
        wanted = {"wal_compression": self._cfg.wal_compression}
        ok, refused = await settable(self.dsn, wanted)
        for name, why in refused.items():
            log.warning("shard %s: sessions keep the server's %s (config asks for %r): %s; grant it with "
                        "GRANT SET ON PARAMETER %s TO <the shard role>, or set it in postgresql.conf",
                        self.id, name, wanted[name], why, name)
        return ok

    @contextlib.asynccontextmanager
    async def conn(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection of this shard; database failures become domain errors naming the shard.

        A connection whose use ended cleanly (a result or a domain error, no transaction left
        open) is kept here and handed to the next caller without going through the pool:
        asyncpg's acquire and release with a timeout cost CPU per call between them (a task
        for the timeout, a shield for the release) of the order of a small statement's. Any
        other ending, and every PARK_ROUNDS-th use, releases it to the pool (which rolls back,
        resets and recycles); close() returns the kept ones first. So does
        every return while a caller waits in the pool: that caller came when none was kept and
        looks only at the pool, where every connection may be out (kept or in use), so keeping
        this one would leave it waiting out ACQUIRE_TIMEOUT_S beside an idle connection."""
        pool = self.pool
        if pool is None:
            raise ShardUnavailable(self.id, self.last_error)
        conn = self._kept.pop() if self._kept else await self._acquire(pool)
        clean = False
        try:
            yield conn
            clean = True
        except ServiceError:
            clean = True  # a domain answer: the connection is as good as after a result
            raise
        except Exception as e:
            mapped = translate_db_error(self.id, e)
            if isinstance(mapped, ShardUnavailable):
                _terminate(conn)  # never hand a broken connection to the next request
            if mapped is None:
                raise
            raise mapped from e
        finally:
            if not self._keep(pool, conn, clean):
                await pool.release(conn)

    async def _acquire(self, pool: asyncpg.Pool) -> asyncpg.Connection:
        """A connection from the pool, counted as waiting there while it comes (see conn)."""
        self._waiting += 1
        try:
            return await pool.acquire(timeout=ACQUIRE_TIMEOUT_S)
        except ServiceError:
            raise
        except Exception as e:  # nothing was sent: always safe to report as unavailable
            raise ShardUnavailable(self.id, type(e).__name__) from e
        finally:
            self._waiting -= 1

    def _keep(self, pool: asyncpg.Pool, conn: asyncpg.Connection, clean: bool) -> bool:
        """Keep a connection whose use ended for the next caller when conn's rules allow (True),
        else leave it to be released to the pool (False). A plain function, not a coroutine: the
        common ending, kept, awaits nothing."""
        self._uses += 1
        if (clean and not self._waiting and pool is self.pool and self._uses % PARK_ROUNDS
                and not conn.is_closed() and not conn.is_in_transaction()):
            self._kept.append(conn)
            return True
        return False

    async def close(self) -> None:
        """Close the pool(s), terminating connections that do not close in time."""
        if self.pool is not None:
            pool, self.pool = self.pool, None
            kept, self._kept = self._kept, []
            for conn in kept:
                await pool.release(conn)
            try:
                await asyncio.wait_for(pool.close(), 5)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                pool.terminate()


def _terminate(conn) -> None:
    try:
        conn.terminate()
    except asyncpg.InterfaceError:
        pass  # the connection was lost and asyncpg already took it back from us


class ShardSet:
    """All shards of this history service, by id."""

    def __init__(self, cfg: HistoryConfig):
        self._shards = {sid: Shard(sid, dsn, cfg) for sid, dsn in sorted(cfg.shard_dsns.items())}

    @property
    def ids(self) -> list[int]:
        """Shard ids in order."""
        return list(self._shards)

    def __iter__(self):
        return iter(self._shards.values())

    def get(self, shard_id: int) -> Shard:
        """The shard, or UnknownShard (INVALID_ARGUMENT) naming the known ones."""
        try:
            return self._shards[shard_id]
        except KeyError:
            raise UnknownShard(shard_id, self.ids) from None

    def unavailable(self) -> list[Shard]:
        """Shards not connected yet."""
        return [s for s in self._shards.values() if not s.available]

    async def connect_all(self) -> None:
        """Connect every shard at once; failures are logged and left to the reconnect loop."""
        results = await asyncio.gather(*(s.connect() for s in self._shards.values()))
        for shard, ok in zip(self._shards.values(), results, strict=True):
            if not ok:
                log.warning("shard %s unavailable at start-up: %s", shard.id, shard.last_error)

    async def close(self) -> None:
        """Close the pool(s), terminating connections that do not close in time."""
        await asyncio.gather(*(s.close() for s in self._shards.values()))
