"""Per-shard bookkeeping: the round-robin tenant cursor history hands back,
one lease call in flight at a time, and a back-off for a shard whose calls
fail so it does not slow polls down while it is sick."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable

from ratchet.libs.clock import Clock

# A failing shard is skipped by polls for this long, doubling per failure.
BACKOFF_BASE_S = 0.25
BACKOFF_MAX_S = 2.0
# A lease call in flight for longer than this marks the shard slow: other
# polls skip it rather than queue behind it (a hung shard must not stall them).
SLOW_CALL_S = 0.5
# Deadline of a lease call to a shard whose last call failed (a probe).
PROBE_TIMEOUT_S = 1.0


@dataclasses.dataclass
class ShardState:
    """What the dispatcher remembers about one shard."""

    shard_id: int
    # Tenant after which the next LeaseTasks starts; survives across polls so
    # round-robin over tenants is fair over time, not just within one call.
    tenant_cursor: str = ""
    failures: int = 0
    retry_at: float = 0.0
    busy_since: float | None = None
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)


class ShardBook:
    """The ShardState of every owned shard."""

    def __init__(self, shard_ids: Iterable[int], clock: Clock):
        self._clock = clock
        self._states = {sid: ShardState(sid) for sid in shard_ids}

    def __getitem__(self, shard_id: int) -> ShardState:
        return self._states[shard_id]

    def __contains__(self, shard_id: int) -> bool:
        return shard_id in self._states

    def available(self, shard_id: int) -> bool:
        """False while the shard is backing off after a failure or a lease call is hung on it."""
        state = self._states[shard_id]
        now = self._clock.monotonic()
        if now < state.retry_at:
            return False
        return state.busy_since is None or now - state.busy_since < SLOW_CALL_S

    def succeeded(self, shard_id: int) -> None:
        """History answered for this shard: forget earlier failures."""
        state = self._states[shard_id]
        state.failures = 0
        state.retry_at = 0.0

    def failed(self, shard_id: int) -> float:
        """A call failed transiently: skip the shard for a growing while. Returns the back-off."""
        state = self._states[shard_id]
        backoff = min(BACKOFF_MAX_S, BACKOFF_BASE_S * (2 ** state.failures))
        state.failures += 1
        state.retry_at = self._clock.monotonic() + backoff
        return backoff

    def advance_cursor(self, shard_id: int, cursor: str) -> None:
        """Remember where round-robin stopped. An empty cursor (nothing leased)
        keeps the old position rather than restarting at the first tenant."""
        if cursor:
            self._states[shard_id].tenant_cursor = cursor
