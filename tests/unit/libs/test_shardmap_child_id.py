"""shardmap.child_id: the ids history mints for a fan-out's children and the gateway checks."""

from __future__ import annotations

import uuid

import pytest

from ratchet.libs import shardmap


def test_child_ids_are_deterministic_valid_ids_in_the_parents_slot_unless_spread():
    parent = shardmap.new_task_id(slot=1234)
    ids = [shardmap.child_id(parent, 3, i, False) for i in range(2000)]
    assert ids == [shardmap.child_id(parent, 3, i, False) for i in range(2000)]
    assert len(set(ids)) == 2000
    for c in ids:
        assert shardmap.parse_task_id(c) == c and uuid.UUID(c).version == 8
        assert shardmap.slot_of(c) == 1234
    assert shardmap.child_id(parent, 4, 0, False) != ids[0]
    assert shardmap.child_id(parent.upper(), 3, 0, False) == ids[0]  # any spelling of the parent
    spread = [shardmap.child_id(parent, 3, i, True) for i in range(2000)]
    assert len(set(spread)) == 2000 and not set(spread) & set(ids)
    slots = {shardmap.slot_of(c) for c in spread}
    assert len(slots) > 1500  # spread over the slot space
    shards = shardmap.ShardMap.even([1, 2, 3, 4])
    assert {shards.shard_for_task(c) for c in spread} == {1, 2, 3, 4}
    assert {c[:13] for c in ids} == {parent[:13]}  # the parent's time bits: they sort near it


def test_child_id_refuses_what_is_not_a_task_id():
    with pytest.raises(ValueError):
        shardmap.child_id("not-an-id", 0, 0, False)
    with pytest.raises(ValueError):
        shardmap.child_id(str(uuid.uuid4()), 0, 0, False)
    with pytest.raises(ValueError):
        shardmap.child_id(shardmap.new_task_id(), -1, 0, False)
