"""Timer loop: fire each shard's due timers (delays, retry backoff, lease checks, timeouts)
where the rows and the clock are, and announce the ready work a firing makes on WatchReady
like any enqueue commit. timers/firing.py claims them (FOR UPDATE SKIP LOCKED, the shard
clock) and applies them; this loop decides when to ask.

When: at once after a full batch; else when the earliest pending timer is due by the
shard's clock (timer_next_in, read by every firing), or sooner when a commit of this
process wrote a timer due before that (`due`, from ReadyHub.timer_due: in-process, no
RPC), and at least every `idle_s`, which bounds how late a timer written by another
history process is found.

One loop per shard this process owns. Today a history process owns every shard of its
config; when several processes serve one shard (scale-out), only the shard's owner should
fire its timers, and a per-shard loop is what that ownership will start and stop. Two
firers on one shard are safe meanwhile, only wasteful: a claim skips the rows another
holds.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random

from ratchet.libs.rpc.errors import ServiceError
from ratchet.services.history.decide import Rand
from ratchet.services.history.ready import ReadyHub
from ratchet.services.history.shards import Shard, ShardSet
from ratchet.services.history.store import Store
from ratchet.services.history.timers import firing

log = logging.getLogger(__name__)

MAX_TIMERS = 500  # timers claimed by one firing (one transaction)
# Longest sleep: how late a timer another history process wrote may fire (as the dispatcher's
# timer_idle_s was while it fired timers), and an idle shard's one read per IDLE_S.
IDLE_S = 2.0
# Never fire again sooner than this after a partial batch, even when a timer is due now
# (another firer or a writer may hold its row): no hot loop.
MIN_SLEEP_S = 0.005
# One firing's bound (its statements have the shard's statement_timeout too).
ROUND_TIMEOUT_S = 30.0
BACKOFF_BASE_S = 0.1
BACKOFF_MAX_S = 5.0


class TimerLoop:
    """The firing loops of every shard of a ShardSet; `due()` is how commits wake them."""

    def __init__(self, shards: ShardSet, store: Store, hub: ReadyHub, grace_s: float,
                 rand: Rand = random.random, *, idle_s: float = IDLE_S, max_timers: int = MAX_TIMERS,
                 round_timeout_s: float = ROUND_TIMEOUT_S):
        self._shards = shards
        self._store = store
        self._hub = hub
        self._grace_s = grace_s
        self._rand = rand
        self._idle_s = idle_s
        self._max_timers = max_timers
        self._round_timeout_s = round_timeout_s
        ids = shards.ids
        # Per shard, on the event loop's clock: the earliest due time a commit announced since
        # the current firing started (its reads see what committed before), when the sleeping
        # loop wakes anyway, and the event that cuts the sleep short.
        self._hinted = dict.fromkeys(ids, math.inf)
        self._wakes_at = dict.fromkeys(ids, -math.inf)
        self._wake = {sid: asyncio.Event() for sid in ids}

    def due(self, shard_id: int, seconds: float) -> None:
        """A commit wrote a timer on shard_id due in `seconds`: fire by then."""
        hinted = self._hinted.get(shard_id)
        if hinted is None:
            return  # not a shard of ours
        at = asyncio.get_running_loop().time() + max(0.0, seconds)
        if at < hinted:
            self._hinted[shard_id] = at
            if at < self._wakes_at[shard_id]:
                self._wake[shard_id].set()

    def wake_all(self) -> None:
        """Fire every shard now (a shard connected late: what is due there waits for no one)."""
        for sid in self._hinted:
            self.due(sid, 0.0)

    async def fire(self, shard: Shard) -> firing.FireOut:
        """One firing on the shard: claim and apply up to max_timers due timers, then tell the
        WatchReady streams if work became ready."""
        async with shard.conn() as conn:
            # Looked up on the module at each call: a mutant history (tests/fault/mutants) wraps it.
            out = await firing.fire_timers(conn, self._store, max_timers=self._max_timers,
                                           grace_s=self._grace_s, rand=self._rand)
        if out.ready:
            self._hub.publish(shard.id)  # after commit, like an enqueue
        return out

    async def run(self) -> None:
        """Run a loop per shard until cancelled (a firing in flight then rolls back, its timers
        stay due). One shard's loop that crashes ends the others too, so a restart of run()
        never leaves two loops on a shard nor one running past a stop."""
        async with asyncio.TaskGroup() as group:
            for shard in self._shards:
                group.create_task(self._run_shard(shard))

    async def _run_shard(self, shard: Shard) -> None:
        sid, failures = shard.id, 0
        while True:
            if not shard.available:  # the connect loop brings it; wake_all() then
                self._hinted[sid] = math.inf
                await self._sleep(sid, self._idle_s)
                continue
            self._hinted[sid] = math.inf  # what committed before this firing, its reads see
            self._wakes_at[sid] = -math.inf  # (a hint meanwhile is kept for the sleep after it)
            try:
                async with asyncio.timeout(self._round_timeout_s):
                    out = await self.fire(shard)
            except (ServiceError, OSError, TimeoutError) as e:
                failures += 1
                self._log_failure(sid, failures, e)
                await asyncio.sleep(self._backoff(failures))
                continue
            except Exception:  # a bug must not stop the shard's timers for good
                failures += 1
                log.exception("timers on shard %s: firing failed", sid)
                await asyncio.sleep(self._backoff(failures))
                continue
            if failures:
                log.info("timers on shard %s fire again after %d failure(s)", sid, failures)
                failures = 0
            if out.fired >= self._max_timers:
                continue  # a full batch: more are probably due
            delay = self._idle_s if out.next_in_s is None else min(self._idle_s, out.next_in_s)
            await self._sleep(sid, max(MIN_SLEEP_S, delay))

    async def _sleep(self, sid: int, delay: float) -> None:
        """Sleep `delay`, cut short by a commit's timer due sooner."""
        loop = asyncio.get_running_loop()
        until = loop.time() + delay
        wake = self._wake[sid]
        while True:
            wake.clear()  # every hint so far is in _hinted
            at = min(until, self._hinted[sid])
            self._wakes_at[sid] = at
            left = at - loop.time()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(wake.wait(), left)
            except TimeoutError:
                return

    @staticmethod
    def _backoff(failures: int) -> float:
        return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (failures - 1))

    @staticmethod
    def _log_failure(sid: int, failures: int, e: BaseException) -> None:
        level = logging.WARNING if failures in (1, 10) or failures % 100 == 0 else logging.DEBUG
        log.log(level, "timers on shard %s: firing failed %d time(s) in a row: %s", sid, failures,
                f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
