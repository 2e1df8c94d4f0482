"""Split a request's items by shard and put per-shard answers back in
request order. Pure functions: no I/O."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

from ratchet.services.dispatcher.errors import MismatchedAnswer

T = TypeVar("T")
R = TypeVar("R")


def group_by_shard(items: Sequence[T], shard_of: Callable[[T], int]) -> dict[int, list[int]]:
    """Indices of `items` per shard, each list in request order; shards in
    order of first appearance."""
    groups: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(shard_of(item), []).append(i)
    return groups


def chunked(groups: Mapping[int, Sequence[int]], size: int) -> dict[tuple[int, int], list[int]]:
    """Split each shard's indices into runs of at most `size`, keyed (shard, run number)."""
    return {(shard, n // size): list(indices[n:n + size])
            for shard, indices in groups.items() for n in range(0, len(indices), size)}


def pick(items: Sequence[T], indices: Sequence[int]) -> list[T]:
    """The items at `indices`, in that order."""
    return [items[i] for i in indices]


def merge_in_order(total: int, groups: Mapping[Hashable, Sequence[int]],
                   answers: Mapping[Hashable, Sequence[R]]) -> list[R]:
    """One answer per request item, in request order. `answers[key][k]`
    answers item `groups[key][k]` (key: a shard, or a (shard, run) pair)."""
    merged: list[R | None] = [None] * total
    for shard, indices in groups.items():
        answer = answers[shard]
        if len(answer) != len(indices):
            raise MismatchedAnswer(f"history answered {len(answer)} results for {len(indices)} items "
                                   f"on shard {shard}")
        for index, value in zip(indices, answer, strict=True):
            merged[index] = value
    missing = [i for i, v in enumerate(merged) if v is None]
    if missing:
        raise MismatchedAnswer(f"no answer for request items {missing[:10]}")
    return merged  # type: ignore[return-value]  # every slot was filled, checked just above
