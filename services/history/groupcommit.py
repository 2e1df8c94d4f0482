"""Group commit of single-task CreateTasks calls, per shard.

An enqueue is one task per call; each used to be its own transaction (BEGIN,
claim the key, insert, COMMIT: four round trips and one fsync per task).
Here a call goes out at once when its shard has no group in flight (no added
latency when idle); calls that arrive while one is in flight wait and go out
together as the next group: one transaction, one statement
(enqueue.create_group), one commit for all of them. The dispatcher's
completions do the same (services/dispatcher/completions.py).

Isolation between callers: a key conflict or a bad item only answers its own
caller. If the grouped statement cannot decide (enqueue.Fallback) or fails
for a reason that might be one request's fault, every request of the group
runs again on its own (creates are idempotent: same ids, same keys), so no
caller can fail another's enqueue. A shard that is down or out of time fails
the whole group with that error, as it would have failed each call.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Callable

from ratchet.services.history import enqueue
from ratchet.services.history.enqueue import CreateOut, NewTaskIn
from ratchet.services.history.errors import ShardTimeout, ShardUnavailable
from ratchet.services.history.shards import Shard
from ratchet.services.history.store import Store

log = logging.getLogger(__name__)

# Most calls one group carries (one statement of that many rows).
MAX_GROUP = 500
# Errors that fail each call the same way alone: no point in retrying them one by one.
_WHOLE_GROUP = (ShardUnavailable, ShardTimeout)


@dataclasses.dataclass
class Line:
    """One shard's group commit (plaincommit.py's too: one shard and kind): statements in
    flight, and the callers queued for the next one."""

    in_flight: int = 0
    queued: collections.deque = dataclasses.field(default_factory=collections.deque)


class CreateGroups:
    """Coalesces single-task creates per shard into shared transactions."""

    def __init__(self, store: Store, window_s: float, on_due: Callable[[int], None], max_in_flight: int = 1,
                 on_timer: Callable[[int, float | None], None] = lambda _shard, _s: None):
        self._store = store
        self._window_s = window_s
        self._on_due = on_due
        self._on_timer = on_timer  # (shard, seconds until the earliest timer the commit wrote)
        self._max_in_flight = max_in_flight
        self._lines: dict[int, Line] = {}
        self._running: set[asyncio.Task] = set()
        self.groups = 0  # transactions run, for tests

    async def create(self, shard: Shard, item: NewTaskIn) -> CreateOut:
        """Create one task (after its group committed); raises the caller's error."""
        line = self._lines.setdefault(shard.id, Line())
        future = asyncio.get_running_loop().create_future()
        line.queued.append((item, future))
        if line.in_flight < self._max_in_flight:
            self._next(shard, line)
        return await future

    def _next(self, shard: Shard, line: Line) -> None:
        group = []
        while line.queued and len(group) < MAX_GROUP:
            entry = line.queued.popleft()
            if not entry[1].done():  # a caller that gave up before its group went out: nothing written
                group.append(entry)
        if not group:
            return
        line.in_flight += 1
        task = asyncio.ensure_future(self._run(shard, line, group))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, shard: Shard, line: Line, group: list) -> None:
        try:
            await self._commit(shard, group)
        finally:
            line.in_flight -= 1
            if line.queued:
                self._next(shard, line)

    async def _commit(self, shard: Shard, group: list) -> None:
        items = [item for item, _ in group]
        self.groups += 1
        try:
            async with shard.conn() as conn:
                outcomes, due = await enqueue.create_group(conn, self._store, items, self._window_s)
        except asyncio.CancelledError:
            _fail(group, ShardUnavailable(shard.id, "history is stopping"))
            raise
        except _WHOLE_GROUP as e:
            _fail(group, e)
            return
        except (enqueue.Fallback, Exception) as e:  # noqa: BLE001 - maybe one request's fault: each alone
            if len(group) == 1 and not isinstance(e, enqueue.Fallback):
                _fail(group, e)
                return
            log.debug("group of %d creates on shard %s runs one by one: %r", len(group), shard.id, e)
            outcomes, due = [None] * len(group), False
        if due:
            self._on_due(shard.id)
        if any(o is not None for o in outcomes):
            self._on_timer(shard.id, enqueue.first_timer_s(items))
        alone = [(entry, i) for i, entry in enumerate(group) if outcomes[i] is None]
        for (_, future), outcome in zip(group, outcomes, strict=True):
            if outcome is not None and not future.done():
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
        if alone:
            await asyncio.gather(*(self._alone(shard, entry) for entry, _ in alone))

    async def _alone(self, shard: Shard, entry: tuple[NewTaskIn, asyncio.Future]) -> None:
        item, future = entry
        try:
            async with shard.conn() as conn:
                (result,), due = await enqueue.create_tasks(conn, self._store, [item], self._window_s)
        except Exception as e:  # noqa: BLE001 - the caller's own error, handed to the caller
            if not future.done():
                future.set_exception(e)
            return
        if due:
            self._on_due(shard.id)
        self._on_timer(shard.id, enqueue.first_timer_s([item]))
        if not future.done():
            future.set_result(result)

    async def close(self) -> None:
        """Wait for groups in flight (server shutdown)."""
        if self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)


def _fail(group: list, error: BaseException) -> None:
    for _, future in group:
        if not future.done():
            future.set_exception(error)
