"""The committer of CreateTasks: group commit per shard, and the plans of enqueue/__init__.py run.

A request goes to its shard at once when nothing of its lane is in flight there (no added
latency when idle); requests arriving meanwhile go out together, as one statement, when it
returns (libs/batching). A lane is a shard and, for uniform requests, the values they share
(enqueue.lane): the uniform statement and the COPY take those once; everything else shares the
general statement, which keeps each request whole or not at all. One statement is one
transaction: no BEGIN or COMMIT round trips, one commit (one WAL flush) for the group.

Every answer is decided from what the statement says (enqueue.outcome): a task created, or
the task id's owner, or the key's owner and whether it is expired. A request that meets a
race (another writer inserted an id or key after the statement's snapshot), an expired key
(deleted here, then taken over), a uniform write that met an existing id (the general
statement answers it per task) or a task held back by another of its own request goes again
in the next round, with what is already answered kept. A shard that is down or out of time
fails the group as it would have failed each request; any other failure, which may be one
request's fault, runs each request again alone, so no caller fails another's enqueue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ratchet.libs.batching import Batcher
from ratchet.services.history import enqueue
from ratchet.services.history.enqueue import MAX_ROUNDS, Request, Row, Writer
from ratchet.services.history.errors import Contention, ShardTimeout, ShardUnavailable
from ratchet.services.history.shards import Shard
from ratchet.services.history.store import Store, Tx

log = logging.getLogger(__name__)

# Most requests, and about the most payload bytes, one statement carries, each task counting
# for at least enqueue.ROW_BYTES (so at most ~5,000 tasks); a request larger than that still
# goes, alone.
MAX_GROUP = 500
MAX_GROUP_BYTES = 8 << 20
# Errors that fail each request the same way alone: no point in running them one by one.
_WHOLE_GROUP = (ShardUnavailable, ShardTimeout)
_CREATED = Row(created=True, due=True)

Item = tuple[Shard, Request]


def _size(item: Item) -> int:
    return item[1].size


class Committer:
    """Creates per shard, group-committed. on_due(shard): a commit made work due now (the ready
    event, after the commit: never a NOTIFY); on_timer(shard, seconds): the earliest timer a
    commit wrote may fire this soon (None: it wrote none)."""

    def __init__(self, store: Store, window_s: float, on_due: Callable[[int], None],
                 on_timer: Callable[[int, float | None], None], max_in_flight: int = 1):
        self._store = store
        self._window_s = window_s
        self._on_due = on_due
        self._on_timer = on_timer
        self._groups: Batcher[tuple, Item, None] = Batcher(
            self._flush, max_in_flight=max_in_flight, max_items=MAX_GROUP, size=_size, max_size=MAX_GROUP_BYTES)
        self.statements = 0  # statements run (writes), for tests

    @property
    def groups(self) -> int:
        """Groups committed (flushes), for tests."""
        return self._groups.flushes

    async def create(self, shard: Shard, request: Request) -> list[enqueue.CreateOut] | None:
        """The request's answers once its group committed (None: a request of columns all created
        now); raises the request's error."""
        if not request.done:
            await self._groups.submit((shard.id, enqueue.lane(request.batch)), (shard, request))
        return request.results()

    async def _flush(self, _key: tuple, items: list[Item]) -> list[None]:
        shard = items[0][0]
        requests = [r for _, r in items]
        try:
            async with shard.conn() as conn:
                await self._rounds(self._store.on(conn), requests)
        except asyncio.CancelledError:
            _fail(requests, ShardUnavailable(shard.id, "history is stopping"))
            raise
        except _WHOLE_GROUP as e:
            _fail(requests, e)
        except Exception as e:  # noqa: BLE001 - maybe one request's fault: each alone, or that one's error
            if len(requests) == 1:
                _fail(requests, e)
            else:
                log.debug("group of %d creates on shard %s runs one by one: %r", len(requests), shard.id, e)
                await asyncio.gather(*(self._alone(shard, r) for r in requests if not r.done))
        self._committed(shard.id, requests)
        return [None] * len(items)

    async def _alone(self, shard: Shard, request: Request) -> None:
        try:
            async with shard.conn() as conn:
                await self._rounds(self._store.on(conn), [request])
        except Exception as e:  # noqa: BLE001 - the request's own error, handed to its caller
            _fail([request], e)

    async def _rounds(self, db: Tx, requests: list[Request]) -> None:
        """Statements until every request is answered (at most MAX_ROUNDS)."""
        for _ in range(MAX_ROUNDS):
            rnd = enqueue.compose(requests)
            if not rnd.members and not rnd.followers:
                return
            expired = sorted({k for r in rnd.members for k in r.expired})
            if expired:
                await db.idempotency_key_expire_batch(expired)
                for r in rnd.members:
                    r.expired.clear()
            pending = [r.pending() for r in rnd.members]
            rows = await self._write(db, rnd.members, pending) if rnd.members else []
            at = {id(r): k for k, r in enumerate(rnd.members)}
            for f, lead, j in rnd.followers:
                got = rows[at[id(lead)]] if id(lead) in at else None
                enqueue.follow(f, pending[at[id(lead)]], j, got[j] if got is not None else None)
        _fail([r for r in requests if not r.done],
              Contention(f"creates on this shard were undecided after {MAX_ROUNDS} statements (a race with "
                         f"other writers of the same ids or keys)"))

    async def _write(self, db: Tx, members: list[Request], pending: list[enqueue.Batch]) -> list[list[Row] | None]:
        """One statement for the round's requests, as planned; each request's rows (None: not
        decided this round, it goes again)."""
        b = enqueue.merge(pending)
        plan = enqueue.plan(b, probe=any(r.probe for r in members))
        self.statements += 1
        if plan.writer is Writer.GENERAL:
            reqs = [k for k, p in enumerate(pending) for _ in range(len(p))] if len(pending) > 1 else [0]
            rows = await db.task_create(b, reqs, self._window_s)
            if rows is None:  # raced: nothing written; the next snapshot sees the other writer
                return [None] * len(members)
            out, k = [], 0
            for r, p in zip(members, pending, strict=True):
                mine = rows[k:k + len(p)]
                k += len(p)
                r.settle_rows(mine)
                out.append(mine)
            return out
        write = db.task_copy_uniform if plan.writer is Writer.COPY else db.task_create_uniform
        if not await write(b):  # an id exists: the general statement answers each task
            for r in members:
                r.probe = True
            return [None] * len(members)
        for r in members:
            r.written()
        return [[_CREATED] * len(p) for p in pending]

    def _committed(self, shard_id: int, requests: list[Request]) -> None:
        """After the group's commits: the ready event and the timer hint."""
        created = [r.created for r in requests if r.created is not None]
        if not created:
            return
        if any(r.due for r in requests):
            self._on_due(shard_id)
        soon = [s for s in map(enqueue.first_timer_s, created) if s is not None]
        self._on_timer(shard_id, min(soon) if soon else None)

    async def close(self) -> None:
        """Wait for groups in flight (server shutdown)."""
        await self._groups.close()


def _fail(requests: list[Request], error: BaseException) -> None:
    for r in requests:
        if not r.done:
            r.fail(error)
