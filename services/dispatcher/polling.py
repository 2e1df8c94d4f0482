"""The long poll: lease at once if work is ready, otherwise park until a
shard signals ready work (or the fallback tick), retry, and give up empty at
max_wait. The stream closes after the first round that leased anything."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ratchet.libs.clock import Clock
from ratchet.services.dispatcher.leasing import Emit, LeaseAsk, Leaser, RoundResult
from ratchet.services.dispatcher.parking import ParkingLot
from ratchet.services.dispatcher.rotation import ShardRotation, in_order


@dataclasses.dataclass(frozen=True)
class PollSpec:
    """A validated poll request."""

    worker_id: str
    capacity: int
    app_ids: tuple[str, ...]
    max_wait_s: float


class Poller:
    """Serves long polls over the owned shards."""

    def __init__(self, leaser: Leaser, lot: ParkingLot, rotation: ShardRotation, clock: Clock):
        self._leaser = leaser
        self._lot = lot
        self._rotation = rotation
        self._clock = clock

    async def poll(self, spec: PollSpec, emit: Emit) -> int:
        """Run one long poll, handing leased tasks to `emit`; returns how many were leased."""
        if self._lot.closed:
            return 0  # shutting down: lease nothing we might not deliver
        order = self._rotation.order()
        if spec.max_wait_s <= 0:
            # A non-blocking poll: one round (its calls bounded by the RPC deadline), never parked.
            ask = LeaseAsk(spec.worker_id, spec.app_ids, self._clock.monotonic() + self._leaser.rpc_timeout_s)
            return (await self._leaser.round(ask, spec.capacity, order, emit)).leased
        ask = LeaseAsk(spec.worker_id, spec.app_ids, self._clock.monotonic() + spec.max_wait_s)
        # Park before the first try: a signal that lands while we are asking
        # history is then kept, not lost between "found nothing" and "parked".
        waiter = self._lot.park(frozenset(spec.app_ids))
        pass_on: set[int] = set()
        try:
            shards: Sequence[int] | None = order if waiter.is_head else None
            while True:
                if shards:
                    waiter.busy_since = self._clock.monotonic()
                    try:
                        result = await self._leaser.round(ask, spec.capacity, shards, emit)
                    finally:
                        waiter.busy_since = None
                    if result.leased:
                        pass_on = _still_ready(set(shards), result)
                        return result.leased
                if self._lot.closed:
                    return 0
                signalled = await waiter.wait(ask.deadline - self._clock.monotonic())
                if signalled is None:
                    return 0
                shards = in_order(self._rotation.order(), signalled)
        finally:
            self._lot.leave(waiter, pass_on)


def _still_ready(asked: set[int], result: RoundResult) -> set[int]:
    """Shards the next parked poll should try: those that said they hold
    more, and those we were told about but did not get to ask."""
    return (asked - result.drained - result.failed) | result.more
