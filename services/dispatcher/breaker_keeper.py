"""Breakers in the database: every change is one transaction that locks the
breaker's row, reads the database clock, decides with the pure state machine
(breakers.py) and writes a compare-and-set on (state, version).

The hot paths never wait for this. Completions and leases only queue
events (`observe`, `probe_leased`); the breaker loop (loops/breakers.py)
applies them in order, one writer per process, and refreshes the gate's
cache. Order matters: a probe's "leased" event is applied before its
completion's. ResetBreaker queues too and waits for its turn, so the cache
only ever changes from that one loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Sequence

from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.dispatcher import breakers as machine
from ratchet.services.dispatcher.breaker_gate import BreakerGate
from ratchet.services.dispatcher.breakers import OPEN, Breaker, BreakerKey, Outcome, Settings
from ratchet.services.dispatcher.errors import BreakersUnavailable
from ratchet.services.dispatcher.store import Store

log = logging.getLogger(__name__)

# Events waiting for the loop; beyond this (a long database outage) crashes
# are dropped and counted rather than held without bound.
MAX_QUEUE = 10_000
Decide = Callable[[Breaker, dt.datetime], "Breaker | None"]


@dataclasses.dataclass
class Event:
    """Something the breaker loop must write."""

    key: BreakerKey
    outcome: Outcome | None = None  # a crash or a probe's end
    probe_task_id: str | None = None  # the probe was leased as this task
    reset: asyncio.Future | None = None  # ResetBreaker, waiting for the result


@dataclasses.dataclass(frozen=True)
class View:
    """A breaker as ListBreakers/ResetBreaker show it."""

    breaker: Breaker
    crashes: int  # in the window, at the database's now


class BreakerKeeper:
    """Queues breaker events, applies them, and keeps the gate's cache."""

    def __init__(self, store: Store, gate: BreakerGate, settings: Settings,
                 on_change: Callable[[], None] = lambda: None):
        self.store = store
        self.gate = gate
        self.settings = settings
        self.on_change = on_change
        self.queue: asyncio.Queue[Event] = asyncio.Queue(MAX_QUEUE)
        self.dropped = 0
        gate.on_probe_leased = self.probe_leased

    # -- producers (hot paths: never block) ---------------------------------------------
    def observe(self, completions: Sequence[wpb.Completion]) -> None:
        """Queue the crashes and probe ends among completions history answered."""
        for completion in completions:
            outcome = self.gate.outcome(completion)
            if outcome is not None:
                self._put(Event(outcome.key, outcome=outcome))

    def probe_leased(self, key: BreakerKey, task_id: str) -> None:
        """The gate let `task_id` through as `key`'s probe."""
        self._put(Event(key, probe_task_id=task_id))

    def _put(self, event: Event) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped in (1, 10) or self.dropped % 1000 == 0:
                log.warning("breaker events backed up (%d queued); %d dropped so far", self.queue.qsize(),
                            self.dropped)
            if event.reset is not None:
                event.reset.set_exception(BreakersUnavailable("breaker changes are backed up; retry shortly"))

    # -- admin ------------------------------------------------------------------------
    async def reset(self, key: BreakerKey, timeout: float) -> View:
        """Close `key`'s breaker now (after the writes queued before it)."""
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._put(Event(key, reset=future))
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(future)
        except TimeoutError:
            raise BreakersUnavailable("the reset was not confirmed in time (it may still apply); "
                                      "retry: resetting is idempotent") from None

    async def list(self, tenant_id: str, app_id: str) -> list[View]:
        """The app's breakers that are not CLOSED or crashed within the window.
        A breaker whose cool-down passed shows HALF_OPEN even before the loop writes it."""
        async with self.store.tx() as tx:
            now = await tx.clock_read()
            rows = await tx.breaker_list_app(tenant_id, app_id, self.settings.window_s)
        views = [self._view(machine.advance(b, now), now) for b in rows]
        return [v for v in views if machine.visible(v.breaker, now, self.settings)]

    def _view(self, b: Breaker, now: dt.datetime) -> View:
        return View(b, machine.crashes_in_window(b, now, self.settings))

    # -- the loop's side ----------------------------------------------------------------
    async def next_event(self, timeout: float) -> Event | None:
        """The next queued event, or None after `timeout` seconds."""
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                return await self.queue.get()
        except TimeoutError:
            return None

    async def apply(self, event: Event) -> None:
        """Write one event. BreakersUnavailable means: retry it later."""
        if event.reset is not None:
            # Applied even if the caller stopped waiting: it was told the reset may still apply.
            w = await self._change(event.key, lambda b, now: machine.reset(b))
            if w.changed:
                log.info("breaker %s reset: CLOSED", _name(event.key))
                self.on_change()
            if not event.reset.done():
                event.reset.set_result(self._view(w.new or Breaker(event.key), w.now))
        elif event.probe_task_id is not None:
            owner, task_id = self.gate.owner, event.probe_task_id
            await self._change(event.key, lambda b, now: machine.probe_leased(b, owner, task_id, now))
        elif event.outcome is not None:
            await self._apply_outcome(event.outcome)

    async def drain(self, timeout: float) -> None:
        """Apply what is still queued, for at most `timeout` seconds (at shutdown)."""
        try:
            async with asyncio.timeout(timeout):
                while not self.queue.empty():
                    event = self.queue.get_nowait()
                    try:
                        await self.apply(event)
                    except Exception as err:  # noqa: BLE001 - shutting down: report and go on with the rest
                        self.fail(event, err)
        except TimeoutError:
            log.warning("%d breaker event(s) not written at shutdown", self.queue.qsize())

    def fail(self, event: Event, err: BaseException) -> None:
        """An event that cannot be applied (not a transient failure): drop it."""
        log.error("breaker event for %s dropped: %s", _name(event.key), err)
        if event.reset is not None and not event.reset.done():
            event.reset.set_exception(err)

    async def _apply_outcome(self, outcome: Outcome) -> None:
        s = self.settings
        w = await self._change(outcome.key, lambda b, now: machine.observe(b, outcome, now, s),
                               create=outcome.crashed)
        if not w.changed or w.old is None or w.new is None:
            return
        if w.new.state == OPEN and w.new.opened_at != w.old.opened_at:
            log.warning("breaker %s OPEN: %s", _name(outcome.key), w.new.reason)
        elif w.new.state == machine.CLOSED and w.old.state != machine.CLOSED:
            log.info("breaker %s CLOSED: probe task %s completed", _name(outcome.key), outcome.task_id)
            self.on_change()

    async def refresh(self) -> None:
        """Turn due OPEN breakers HALF_OPEN, claim free probes for this
        process, and reload the gate's cache from the table."""
        async with self.store.tx() as tx:
            now = await tx.clock_read()
            rows = await tx.breaker_list_not_closed()
        woke = False
        final = []
        for b in rows:
            if machine.advance(b, now) != b:
                w = await self._change(b.key, lambda r, t: machine.advance(r, t))
                if w.changed:
                    log.info("breaker %s HALF_OPEN: cool-down over, one probe may run", _name(b.key))
                b, now = w.new, w.now
            if b is not None and machine.probe_free(b, now, self.settings) and not self.gate.has_token(b.key):
                b = await self._claim(b.key)
                woke = woke or (b is not None and self.gate.has_token(b.key))
            if b is not None:
                final.append(b)
        self.gate.replace(final)
        if woke:
            self.on_change()

    async def _claim(self, key: BreakerKey) -> Breaker | None:
        owner, s = self.gate.owner, self.settings
        w = await self._change(key, lambda b, now: machine.claim_probe(b, owner, now, s))
        if w.changed:
            # Lapse here before the claim lapses in the database, so no other
            # process can hold a live claim while this one still uses it.
            margin = min(1.0, s.probe_timeout_s / 4)
            self.gate.grant(key, s.probe_timeout_s - margin)
        return w.new

    async def _change(self, key: BreakerKey, decide: Decide, create: bool = False) -> Written:
        """Lock, decide with the database's now, compare-and-set."""
        async with self.store.tx() as tx:
            old = await tx.breaker_lock(key, create)
            now = await tx.clock_read()
            if old is None:
                return Written(None, None, now)
            new = decide(old, now)
            if new is None or new == old:
                return Written(old, old, now)
            row = await tx.breaker_update(old, new)
        self.gate.put(row)
        return Written(old, row, now)


@dataclasses.dataclass(frozen=True)
class Written:
    """What _change did: the row before and after (the same object when
    nothing changed; None when there is no row) and the database's now."""

    old: Breaker | None
    new: Breaker | None
    now: dt.datetime

    @property
    def changed(self) -> bool:
        return self.new is not self.old


def _name(key: BreakerKey) -> str:
    return f"{key.tenant_id}/{key.app_id}/{key.task_type}"
