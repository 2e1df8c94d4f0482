"""Where long polls wait for work, and who of them goes next.

Polls are grouped by the apps they accept (their "class"): polls of one class
compete for the same tasks, polls of different classes may not. Within a class
they wait in arrival order. A ready signal for a shard wakes only the head of
each class, not every parked poll: one LeaseTasks call per class per signal
instead of a thundering herd. If the head leased tasks and the shard said it
holds more, the head passes the signal on to the next in line when it leaves
(a baton), so a burst is spread over the waiting polls in FIFO order. A busy
agent that polls again joins the back of the line, behind agents that have
been waiting, so it cannot starve them.

A head whose leasing round is stuck (a shard call hung for longer than
STUCK_S) no longer receives signals: the next poll in line takes them, so one
hung shard cannot freeze dispatch from the healthy ones.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Iterable

from ratchet.libs.clock import Clock, SystemClock

PollClass = frozenset[str]

# A waiter busy in one leasing round for longer than this is passed over.
STUCK_S = 0.5


class Waiter:
    """One parked poll: the shards it was signalled about, and a wake-up event."""

    __slots__ = ("_event", "_lot", "busy_since", "poll_class", "signalled")

    def __init__(self, lot: ParkingLot, poll_class: PollClass):
        self.poll_class = poll_class
        self.signalled: set[int] = set()
        # Set while the poll runs a leasing round (clock.monotonic()).
        self.busy_since: float | None = None
        self._event = asyncio.Event()
        self._lot = lot

    def _wake(self, shards: Iterable[int]) -> None:
        self.signalled.update(shards)
        self._event.set()

    async def wait(self, timeout: float) -> set[int] | None:
        """The shards signalled since the last wait (consumed), or None when
        the timeout passed or the lot closed with nothing signalled."""
        if not self.signalled and not self._lot.closed:
            try:
                await asyncio.wait_for(self._event.wait(), max(0.0, timeout))
            except TimeoutError:
                return None
        self._event.clear()
        if self._lot.closed:
            return None
        shards, self.signalled = self.signalled, set()
        return shards

    @property
    def is_head(self) -> bool:
        """True when this poll is the one signals go to: none ahead of it in
        its class, except polls stuck in a round."""
        return self._lot._head(self.poll_class) is self


class ParkingLot:
    """FIFO queues of parked polls, one per poll class."""

    def __init__(self, clock: Clock | None = None, on_demand: Callable[[bool], None] | None = None) -> None:
        self._queues: dict[PollClass, collections.deque[Waiter]] = {}
        self._clock = clock or SystemClock()
        self.closed = False
        # Called with True when a first poll parks and False when the last one leaves:
        # ready events are only worth receiving while someone waits for them.
        self.on_demand = on_demand

    def _head(self, poll_class: PollClass) -> Waiter | None:
        now = self._clock.monotonic()
        for waiter in self._queues.get(poll_class, ()):
            if waiter.busy_since is None or now - waiter.busy_since < STUCK_S:
                return waiter
        return None

    def park(self, poll_class: PollClass) -> Waiter:
        """Join the back of the class's line."""
        waiter = Waiter(self, poll_class)
        self._queues.setdefault(poll_class, collections.deque()).append(waiter)
        if self.on_demand is not None and self.parked() == 1:
            self.on_demand(True)
        return waiter

    def leave(self, waiter: Waiter, pass_on: Iterable[int] = ()) -> None:
        """Remove a waiter. Signals it did not act on, plus `pass_on` (shards
        that still hold work), go to the next head so no wake-up is lost."""
        queue = self._queues.get(waiter.poll_class)
        if queue is None:
            return
        try:
            queue.remove(waiter)
        except ValueError:
            return
        baton = set(pass_on) | waiter.signalled
        waiter.signalled = set()
        if not queue:
            del self._queues[waiter.poll_class]
            if self.on_demand is not None and not self._queues:
                self.on_demand(False)
        elif baton:
            head = self._head(waiter.poll_class)
            if head is not None:
                head._wake(baton)

    def signal(self, shards: Iterable[int]) -> None:
        """Shards may hold ready work: wake the head of every class."""
        shards = set(shards)
        if not shards:
            return
        for poll_class in self._queues:
            head = self._head(poll_class)
            if head is not None:
                head._wake(shards)

    def parked(self, poll_class: PollClass | None = None) -> int:
        """How many polls wait (in one class, or in all)."""
        if poll_class is not None:
            return len(self._queues.get(poll_class, ()))
        return sum(len(q) for q in self._queues.values())

    def close(self) -> None:
        """Shutting down: every parked poll returns empty at once."""
        self.closed = True
        for queue in self._queues.values():
            for waiter in queue:
                waiter._event.set()
