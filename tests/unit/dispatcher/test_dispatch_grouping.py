"""Grouping by shard and merging back in request order (pure)."""

from __future__ import annotations

import pytest

from ratchet.services.dispatcher.errors import MismatchedAnswer
from ratchet.services.dispatcher.grouping import group_by_shard, merge_in_order, pick


def test_group_keeps_request_order_within_each_shard():
    items = [("a", 2), ("b", 0), ("c", 2), ("d", 1), ("e", 0)]
    groups = group_by_shard(items, lambda x: x[1])
    assert groups == {2: [0, 2], 0: [1, 4], 1: [3]}
    assert list(groups) == [2, 0, 1]
    assert pick(items, groups[0]) == [("b", 0), ("e", 0)]


def test_merge_puts_answers_back_in_request_order():
    items = ["a", "b", "c", "d"]
    groups = group_by_shard(items, lambda x: 0 if x in "ac" else 1)
    answers = {shard: [f"ok-{x}" for x in pick(items, idx)] for shard, idx in groups.items()}
    assert merge_in_order(4, groups, answers) == ["ok-a", "ok-b", "ok-c", "ok-d"]


def test_a_short_answer_is_an_error_not_a_silent_gap():
    groups = {0: [0, 1]}
    with pytest.raises(MismatchedAnswer, match="2 items"):
        merge_in_order(2, groups, {0: ["only one"]})


def test_chunks_split_big_shards_and_merge_back():
    from ratchet.services.dispatcher.grouping import chunked
    items = [i % 2 for i in range(7)]  # shard 0 at even indexes, shard 1 at odd ones
    groups = chunked(group_by_shard(items, lambda s: s), 2)
    assert groups == {(0, 0): [0, 2], (0, 1): [4, 6], (1, 0): [1, 3], (1, 1): [5]}
    answers = {key: [f"r{i}" for i in idx] for key, idx in groups.items()}
    assert merge_in_order(7, groups, answers) == [f"r{i}" for i in range(7)]
