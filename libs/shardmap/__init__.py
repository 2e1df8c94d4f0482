"""Routing of tasks to shards through 65,536 hash slots.

Every task id embeds the 16-bit slot it was routed by, so any service can find
a task's shard from its id alone, whatever the routing key was:

* unkeyed enqueue: slot = hash(task_id's random bits)      (design: hash(task_id))
* keyed enqueue:   slot = hash(tenant_id, idempotency_key)  (follow-up Q1)

The shard map assigns contiguous slot ranges to shards. Resharding splits a
range (virtual-node style) without changing any task id.
"""

from __future__ import annotations

import dataclasses
import hashlib
import operator
import os
import re
import time
import uuid

from ratchet.libs.fastcheck import CANONICAL_ID, all_canonical_ids

SLOTS = 65536


def slot_for_key(tenant_id: str, idempotency_key: str) -> int:
    """The slot of a keyed enqueue: stable across retries of the same key."""
    digest = hashlib.blake2b(f"{tenant_id}\x00{idempotency_key}".encode(), digest_size=2).digest()
    return int.from_bytes(digest, "big")


# The new ids of one batch call take one random slot per run of this many (issue 5): a call of
# 100 is then one shard's request and one statement instead of four of ~25 rows, and a call of
# 1,000 still spreads over the shards (ten slots), so a preloaded backlog stays even.
SLOT_GROUP = 100


def new_slot() -> int:
    """A random slot."""
    return int.from_bytes(os.urandom(2), "big")


class SlotGroups:
    """Slots for the ids one batch call mints: the same random slot for each run of SLOT_GROUP."""

    __slots__ = ("_left", "_slot")

    def __init__(self) -> None:
        self._left, self._slot = 0, 0

    def next(self) -> int:
        if not self._left:
            self._left, self._slot = SLOT_GROUP, new_slot()
        self._left -= 1
        return self._slot


def new_task_id(slot: int | None = None, *, now_ms: int | None = None) -> str:
    """A time-ordered UUID (version 8) carrying the routing slot.

    Layout: 48-bit Unix ms | version 8 | 12 random bits | variant 0b10 |
    16-bit slot | 46 random bits. Time order keeps primary-key inserts local.
    """
    rand = int.from_bytes(os.urandom(8), "big")
    if slot is None:
        slot = int.from_bytes(hashlib.blake2b(rand.to_bytes(8, "big"), digest_size=2).digest(), "big")
    if not 0 <= slot < SLOTS:
        raise ValueError(f"slot {slot} out of range 0..{SLOTS - 1}")
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x8 << 76
    value |= (rand >> 52) << 64  # 12 random bits
    value |= 0b10 << 62
    value |= slot << 46
    value |= rand & ((1 << 46) - 1)
    h = f"{value:032x}"  # str(uuid.UUID(int=value)) without building the object (findings.md: ids)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_HEX = "0123456789abcdef"


# Where each of the 15 random hex digits new_task_ids draws per id sits in the id: 3 after
# the version digit, the one that starts the last group (its top 2 bits are then the slot's),
# and the 11 after it.
_RANDOM_AT = (15, 16, 17, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35)
# digit -> the last group's first digit, per slot & 3 (the digit's low 2 bits kept)
_LEAD = [bytes.maketrans(_HEX.encode(), bytes(_HEX.encode()[(hi << 2) | (i & 3)] for i in range(16)))
         for hi in range(4)]


def new_task_ids(n: int) -> list[str]:
    """n new_task_id()s for one batch call, their slots as SlotGroups gives them (one random
    slot per run of SLOT_GROUP): one random read and one clock read for all of them, written
    into one buffer of n ids a column at a time (extended-slice assignments: a few dozen C
    steps per call instead of several Python steps per id). Per id, the random bits
    are the 3 hex digits after the version, the low 2 bits of the digit that starts the last
    group (its high 2 are the slot's low 2) and the 11 digits after it; the fourth group is
    the variant and the slot's high 14 bits, the same for a run."""
    if n <= 0:
        return []
    digits = os.urandom(8 * n).hex().encode()  # 16 digits per id (15 used)
    ms = int(time.time() * 1000) & ((1 << 48) - 1)
    row = f"{ms >> 16:08x}-{ms & 0xFFFF:04x}-8000-8000-000000000000\n".encode()
    buf = bytearray(row * n)
    for q, at in enumerate(_RANDOM_AT):
        if at != 24:
            buf[at::37] = digits[q::16]
    for k in range(0, n, SLOT_GROUP):
        m = min(SLOT_GROUP, n - k)
        slot = new_slot()
        a, b = 37 * k, 37 * (k + m)
        for i, c in enumerate(b"%04x" % (0x8000 | (slot >> 2))):
            buf[a + 19 + i:b:37] = bytes((c,)) * m
        buf[a + 24:b:37] = digits[16 * k + 3:16 * (k + m):16].translate(_LEAD[slot & 3])
    return buf[:-1].decode("ascii").split("\n")


def child_id(parent_id: str, position: int, index: int, spread: bool) -> str:
    """The id of child `index` of the fan-out at `position` of run `parent_id`: the same for
    every BEGIN of that fan-out (history mints it, the gateway checks it), so a repeated BEGIN
    and a resent StartChildren name the same children. A valid task id (version 8): the
    parent's 48 time bits (children sort near their parent), 58 bits of a hash of (parent,
    position, index), and the slot: the parent's when spread is False (the children live on
    the parent's shard), else one from the same hash (a large fan-out spreads over the shards).
    Raises ValueError for a parent that is not a task id."""
    parent = parse_task_id(parent_id)
    if parent is None:
        raise ValueError(f"not a Ratchet task id: {parent_id!r}")
    if position < 0 or index < 0:
        raise ValueError("position and index must be 0 or more")
    digest = hashlib.blake2b(f"{parent}\x00{position}\x00{index}".encode(), digest_size=10).digest()
    h = int.from_bytes(digest, "big")  # 80 bits: 12 + 46 random, 16 for a spread slot
    slot = (h >> 64) & 0xFFFF if spread else slot_of_canonical(parent)
    ms = int(parent[:8] + parent[9:13], 16)
    value = ms << 80
    value |= 0x8 << 76
    value |= ((h >> 46) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= slot << 46
    value |= h & ((1 << 46) - 1)
    x = f"{value:032x}"
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


# A task id in canonical form (lowercase, version 8, RFC 4122 variant): what every id this
# platform mints and stores looks like. Matching it is far cheaper than uuid.UUID + str, and
# both run per task on the enqueue path (gateway and history); other spellings parse below.
_CANONICAL = re.compile(CANONICAL_ID)


def all_canonical(task_ids: list[str]) -> bool:
    """Whether every id is a task id in canonical form (parse_task_id would return it as is):
    one call per batch, in C where libs/fastcheck is built (a regex over the joined ids if not)."""
    return all_canonical_ids(task_ids)


# The characters of a canonical id its slot is read from (slot_of_canonical's): ids with the
# same prefix share a slot. An itemgetter, so map(slot_prefix, ids) runs in C per id.
slot_prefix = operator.itemgetter(slice(19, 25))


def slot_of_prefix(prefix: str) -> int:
    """The slot of every canonical id with this slot_prefix (slot_of_canonical's bits 46..61:
    the 16 bits of the prefix's first group, then the top two of its last character)."""
    return ((int(prefix[:4], 16) << 2) | (int(prefix[5], 16) >> 2)) & 0xFFFF


def slot_of(task_id: str) -> int:
    """The slot embedded in a task id. Raises ValueError for malformed ids."""
    if type(task_id) is str and _CANONICAL.fullmatch(task_id):
        # Bits 46..61 of the 128-bit value: the top of the last 64 bits (groups 4 and 5).
        return (int(task_id[19:23] + task_id[24:], 16) >> 46) & 0xFFFF
    value = uuid.UUID(task_id)
    if value.version != 8 or value.variant != uuid.RFC_4122:
        raise ValueError("not a Ratchet task id")
    return (value.int >> 46) & 0xFFFF


def slot_of_canonical(task_id: str) -> int:
    """slot_of for an id already in canonical form (parse_task_id's or new_task_id's output),
    without matching it again (per task of a batch call)."""
    return (int(task_id[19:23] + task_id[24:], 16) >> 46) & 0xFFFF


def parse_task_id(task_id: str) -> str | None:
    """The canonical form of a task id, or None when it is not one."""
    if type(task_id) is str and _CANONICAL.fullmatch(task_id):
        return task_id
    try:
        value = uuid.UUID(task_id)
    except (ValueError, AttributeError, TypeError):
        return None
    if value.version != 8 or value.variant != uuid.RFC_4122:
        return None
    return str(value)


@dataclasses.dataclass(frozen=True)
class SlotRange:
    """Slots lo..hi inclusive belong to shard_id."""

    lo: int
    hi: int
    shard_id: int


class ShardMap:
    """Maps slots to shard ids. Immutable; a new map replaces an old one."""

    def __init__(self, ranges: list[SlotRange]):
        ranges = sorted(ranges, key=lambda r: r.lo)
        expected = 0
        for r in ranges:
            if r.lo != expected or r.hi < r.lo:
                raise ValueError(f"shard map must cover slots 0..{SLOTS - 1} without gaps; bad range {r}")
            expected = r.hi + 1
        if expected != SLOTS:
            raise ValueError(f"shard map must cover slots 0..{SLOTS - 1}; it ends at {expected - 1}")
        self.ranges = ranges
        self._table = bytearray()
        # A dense table (64 KiB per 256 shards max) keeps lookups O(1).
        table = [0] * SLOTS
        for r in ranges:
            for s in range(r.lo, r.hi + 1):
                table[s] = r.shard_id
        self._lookup = table

    @classmethod
    def even(cls, shard_ids: list[int]) -> ShardMap:
        """Split the slot space evenly over the given shards."""
        if not shard_ids:
            raise ValueError("at least one shard is required")
        n = len(shard_ids)
        ranges = []
        for i, sid in enumerate(shard_ids):
            lo = i * SLOTS // n
            hi = (i + 1) * SLOTS // n - 1
            ranges.append(SlotRange(lo, hi, sid))
        return cls(ranges)

    @property
    def shard_ids(self) -> list[int]:
        return sorted({r.shard_id for r in self.ranges})

    def shard_for_slot(self, slot: int) -> int:
        return self._lookup[slot]

    def shard_for_task(self, task_id: str) -> int:
        return self._lookup[slot_of(task_id)]

    def to_json(self) -> list[dict]:
        return [dataclasses.asdict(r) for r in self.ranges]

    @classmethod
    def from_json(cls, data: list[dict]) -> ShardMap:
        return cls([SlotRange(int(d["lo"]), int(d["hi"]), int(d["shard_id"])) for d in data])
