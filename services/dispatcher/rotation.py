"""Which shard a poll asks first, and how a poll's capacity is split over the
shards it asks at once. Pure functions and one counter: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class ShardRotation:
    """Hands each poll the owned shards in an order whose first shard rotates,
    so no shard is favoured when capacity runs out before the last one."""

    def __init__(self, shard_ids: Iterable[int]):
        self._shards = sorted(set(shard_ids))
        if not self._shards:
            raise ValueError("a rotation needs at least one shard")
        self._next = 0

    @property
    def shards(self) -> list[int]:
        """The owned shards, sorted."""
        return list(self._shards)

    def order(self) -> list[int]:
        """All shards, starting one further along than the previous call."""
        start = self._next % len(self._shards)
        self._next = (self._next + 1) % len(self._shards)
        return self._shards[start:] + self._shards[:start]


def in_order(order: Sequence[int], subset: Iterable[int]) -> list[int]:
    """The shards of `subset` that appear in `order`, in that order."""
    wanted = set(subset)
    return [s for s in order if s in wanted]


def split_capacity(capacity: int, shards: Sequence[int]) -> dict[int, int]:
    """Share `capacity` over `shards` as evenly as possible, earlier shards
    taking the remainder; shards that would get nothing are left out (with
    capacity 2 over 4 shards only the first two are asked)."""
    if capacity <= 0 or not shards:
        return {}
    base, extra = divmod(capacity, len(shards))
    shares = {}
    for i, shard in enumerate(shards):
        n = base + (1 if i < extra else 0)
        if n > 0:
            shares[shard] = n
    return shares
