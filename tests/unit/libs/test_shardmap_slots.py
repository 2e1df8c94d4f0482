"""libs/shardmap: the slot read from a canonical id without matching it (the batch path's)
agrees with slot_of for every slot."""

from __future__ import annotations

import random

from ratchet.libs.shardmap import SLOTS, new_task_id, parse_task_id, slot_of, slot_of_canonical


def test_the_canonical_slot_is_slot_of_for_minted_and_parsed_ids():
    rng = random.Random(8)
    for slot in [0, 1, SLOTS - 1] + [rng.randrange(SLOTS) for _ in range(2000)]:
        task_id = new_task_id(slot)
        assert slot_of_canonical(task_id) == slot_of(task_id) == slot
        upper = parse_task_id(task_id.upper())  # another spelling, made canonical first
        assert upper == task_id and slot_of_canonical(upper) == slot
