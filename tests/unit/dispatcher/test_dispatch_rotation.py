"""Shard rotation and capacity split (pure)."""

from __future__ import annotations

import collections

import pytest

from ratchet.services.dispatcher.rotation import ShardRotation, in_order, split_capacity


def test_the_first_shard_rotates_between_polls():
    rotation = ShardRotation([3, 1, 2])
    assert [rotation.order() for _ in range(4)] == [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 2, 3]]


def test_no_shard_is_favoured_over_many_polls():
    rotation = ShardRotation(range(4))
    firsts = collections.Counter(rotation.order()[0] for _ in range(400))
    assert set(firsts.values()) == {100}


def test_a_rotation_needs_shards():
    with pytest.raises(ValueError):
        ShardRotation([])


@pytest.mark.parametrize("capacity, shards, expected", [
    (10, [0, 1, 2, 3], {0: 3, 1: 3, 2: 2, 3: 2}),
    (2, [2, 3, 0, 1], {2: 1, 3: 1}),
    (1, [1, 0], {1: 1}),
    (4, [5], {5: 4}),
    (0, [0, 1], {}),
    (3, [], {}),
])
def test_capacity_is_split_evenly_earlier_shards_first(capacity, shards, expected):
    shares = split_capacity(capacity, shards)
    assert shares == expected
    assert list(shares) == [s for s in shards if s in expected]
    assert sum(shares.values()) == (capacity if shards else 0)


def test_in_order_keeps_the_rotation_order():
    assert in_order([2, 3, 0, 1], {1, 2}) == [2, 1]
    assert in_order([2, 3, 0, 1], {7}) == []
