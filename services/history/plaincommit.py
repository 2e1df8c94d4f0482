"""Group commit of plain batch CreateTasks calls (CreateTasksRequest.columns), per shard.

A batch call of plain tasks is one statement (enqueue.create_plain) on its own
connection. Under concurrency (many producers of batch calls) each of those
paid the statement's fixed cost: history's call into asyncpg, the round trip,
Postgres' parse-bind-execute, a commit and its WAL flush. Here a call goes out
at once when its shard has no plain statement in flight (no added latency
when calls come one at a time); calls that arrive while one is in flight wait
and go out together as the next statement, over all their rows: one commit
for all of them. The single-task path does the same (groupcommit.py).

Only calls that share every value but ids and payloads (tenant, app, task
type, queue and policy: the statement's parameters) share a statement.

Isolation between callers: the statement is all or nothing. A unique
violation (an id that exists: a resent call whose answer was lost) or any
other failure that may be one call's fault runs every call of the group
again on its own, on the path that answers a call alone (creates are
idempotent by task id), so no caller fails another's enqueue. A shard that
is down or out of time fails the whole group with that error, as it would
have failed each call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from ratchet.internal.history.v1 import history_pb2
from ratchet.services.history import enqueue
from ratchet.services.history.convert import PlainIn
from ratchet.services.history.errors import ShardTimeout, ShardUnavailable
from ratchet.services.history.groupcommit import Line
from ratchet.services.history.shards import Shard
from ratchet.services.history.store import Store

log = logging.getLogger(__name__)

# Most rows, and about the most payload bytes, one grouped statement carries (a call larger
# than either still goes, alone).
MAX_GROUP_ROWS = 5000
MAX_GROUP_BYTES = 8 << 20
# Errors that fail each call the same way alone: no point in retrying them one by one.
_WHOLE_GROUP = (ShardUnavailable, ShardTimeout)

Response = history_pb2.CreateTasksResponse


class PlainGroups:
    """Coalesces plain batch creates per shard (and shared values) into shared statements.

    alone(shard, plain) runs one call by itself and answers it (create_plain, and the
    transactional path when an id exists); committed(shard, plain) runs after a grouped
    statement committed, once per group (the ready event and the timer hint)."""

    def __init__(self, store: Store, alone: Callable[[Shard, PlainIn], Awaitable[Response]],
                 committed: Callable[[Shard, PlainIn], None], max_in_flight: int = 1):
        self._store = store
        self._alone = alone
        self._committed = committed
        self._max_in_flight = max_in_flight
        self._lines: dict[tuple, Line] = {}
        self._running: set[asyncio.Task] = set()
        self.statements = 0  # grouped statements run (groups of two or more calls), for tests
        self.grouped_calls = 0  # calls answered by a grouped statement, for tests

    async def create(self, shard: Shard, plain: PlainIn) -> Response:
        """The call's response, after its group (or the call alone) committed; raises its error."""
        # (the policy by identity: equal policies are one object, convert._policy caches them;
        # two equal ones that are not only miss a group, and the queued calls keep it alive)
        key = (shard.id, plain.tenant_id, plain.app_id, plain.task_type, plain.queue, id(plain.policy))
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = Line()
        future = asyncio.get_running_loop().create_future()
        line.queued.append((plain, future))
        if line.in_flight < self._max_in_flight:
            self._next(shard, key, line)
        return await future

    def _next(self, shard: Shard, key: tuple, line: Line) -> None:
        group, rows, size = [], 0, 0
        while line.queued:
            plain, future = line.queued[0]
            if future.done():  # a caller that gave up before its group went out: nothing written
                line.queued.popleft()
                continue
            n, b = len(plain.task_ids), sum(map(len, plain.payloads))
            if group and (rows + n > MAX_GROUP_ROWS or size + b > MAX_GROUP_BYTES):
                break
            line.queued.popleft()
            group.append((plain, future))
            rows, size = rows + n, size + b
        if not group:
            if not line.in_flight:
                self._lines.pop(key, None)
            return
        line.in_flight += 1
        task = asyncio.ensure_future(self._run(shard, key, line, group))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, shard: Shard, key: tuple, line: Line, group: list) -> None:
        try:
            if len(group) == 1:
                await self._one(shard, group[0])
            else:
                await self._group(shard, group)
        finally:
            line.in_flight -= 1
            self._next(shard, key, line)

    async def _one(self, shard: Shard, entry: tuple[PlainIn, asyncio.Future]) -> None:
        plain, future = entry
        try:
            response = await self._alone(shard, plain)
        except asyncio.CancelledError:
            _settle(future, error=ShardUnavailable(shard.id, "history is stopping"))
            raise
        except Exception as e:  # noqa: BLE001 - the caller's own error, handed to the caller
            _settle(future, error=e)
            return
        _settle(future, result=response)

    async def _group(self, shard: Shard, group: list) -> None:
        first = group[0][0]
        merged = dataclasses.replace(first, task_ids=[t for p, _ in group for t in p.task_ids],
                                     payloads=[x for p, _ in group for x in p.payloads])
        self.statements += 1
        try:
            async with shard.conn() as conn:
                await enqueue.create_plain(conn, self._store, merged)
        except asyncio.CancelledError:
            for _, future in group:
                _settle(future, error=ShardUnavailable(shard.id, "history is stopping"))
            raise
        except _WHOLE_GROUP as e:
            for _, future in group:
                _settle(future, error=e)
            return
        except (enqueue.Fallback, Exception) as e:  # noqa: BLE001 - maybe one call's fault: each alone
            log.debug("group of %d plain creates on shard %s runs one by one: %r", len(group), shard.id, e)
            await asyncio.gather(*(self._one(shard, entry) for entry in group))
            return
        self.grouped_calls += len(group)
        self._committed(shard, first)
        for _, future in group:
            _settle(future, result=Response(all_created=True))

    async def close(self) -> None:
        """Wait for statements in flight (server shutdown)."""
        if self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)


def _settle(future: asyncio.Future, *, result=None, error: BaseException | None = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
