"""libs/shardmap's per-call helpers for batches of ids (session 9)."""

from __future__ import annotations

from ratchet.libs.shardmap import (
    all_canonical,
    new_task_id,
    parse_task_id,
    slot_of_canonical,
    slot_of_prefix,
    slot_prefix,
)


def test_all_canonical_is_parse_task_id_on_every_id():
    ids = [new_task_id() for _ in range(50)]
    assert all_canonical(ids)
    assert all_canonical([])
    for bad in (ids[3].upper(), "", ids[3][:-1], ids[3] + "0", "x" * 36, ids[3].replace("-", "_"),
                ids[3][:14] + "4" + ids[3][15:]):  # (version 4, not 8)
        assert parse_task_id(bad) != bad
        assert not all_canonical(ids[:3] + [bad] + ids[4:])


def test_an_id_with_a_newline_does_not_pass_as_two():
    a, b, c = new_task_id(), new_task_id(), new_task_id()
    assert not all_canonical([a + "\n" + b, ""])
    assert not all_canonical([a + "\n" + b, c])
    assert not all_canonical([a + "\n", b])
    assert not all_canonical([a, "\n" + b])


def test_the_slot_prefix_gives_the_slot():
    for slot in list(range(0, 65536, 97)) + [0, 1, 2, 3, 65535, 65534]:
        for _ in range(3):
            tid = new_task_id(slot)
            assert slot_of_prefix(slot_prefix(tid)) == slot_of_canonical(tid) == slot


def test_new_task_ids_have_new_task_ids_layout_and_a_slot_per_run_of_100():
    import time
    import uuid

    from ratchet.libs.shardmap import SLOT_GROUP, new_task_ids, slot_of
    before = int(time.time() * 1000)
    ids = new_task_ids(2 * SLOT_GROUP + 7)
    after = int(time.time() * 1000)
    assert len(set(ids)) == len(ids) and all_canonical(ids)
    values = [uuid.UUID(i) for i in ids]
    assert {(v.version, v.variant) for v in values} == {(8, uuid.RFC_4122)}
    assert all(before <= v.int >> 80 <= after for v in values)  # (48-bit Unix ms)
    runs = [ids[k:k + SLOT_GROUP] for k in range(0, len(ids), SLOT_GROUP)]
    assert [len({slot_of(i) for i in run}) for run in runs] == [1, 1, 1]
    # The random bits vary in every place they sit (12 after the version, 46 at the end).
    rand12 = {(v.int >> 64) & 0xFFF for v in values}
    rand46 = {v.int & ((1 << 46) - 1) for v in values}
    assert len(rand12) > 150 and len(rand46) == len(ids)
    assert {(v.int >> 44) & 3 for v in values} == {0, 1, 2, 3}  # (the 2 bits beside the slot's)
