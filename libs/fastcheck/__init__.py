"""The per-item checks of a batch enqueue, one call per batch.

A batch call of 1,000 tasks crosses two Python hops (gateway, history), and each
checks every payload is JSON and every id is canonical. In Python that is one
scanner call per payload (~0.5-1 us, most of it building the parsed value only to
drop it) and one regex over the joined ids; `_fastcheck.c` does both over the
whole list in C (~30-60 ns per item), without building anything.

Contract (the C module and the Python twin below answer alike; tests hold them to it):

- `first_bad_json(items)`: the index of the first item (str, or bytes that must be
  UTF-8) that is not exactly one JSON value with nothing around it, else -1. "Bad"
  is a filter, not a verdict: an item Python's json would take may be reported
  (nesting deeper than 128, a number of 4,000+ characters, surrounding whitespace,
  a str holding a lone surrogate), and the caller then asks its own per-item path,
  which decides and names the error. An item that path rejects is never passed.
- `all_canonical_ids(ids)`: whether every id is a str in canonical task-id form.
- `copy_rows(ids, payloads, nfields, shared)`: Postgres binary COPY data, one tuple per
  id of `nfields` fields: the id as a uuid, its payload (bytes) as is, then `shared`, the
  other fields already encoded (the same for every row); history's COPY of plain tasks
  builds its rows with it in one C call instead of asyncpg's per-field encoding per row.

`NATIVE` says whether the C module is in use; the build makes it optional so an
install without a compiler still works (test_fastcheck fails then, so CI notices).
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from collections.abc import Sequence


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON (no NaN or Infinity)")


# (C: json.loads without its wrappers)
_scan = json.JSONDecoder(parse_constant=_no_constant).scan_once  # type: ignore[attr-defined]  # set in __init__; typeshed omits it
# A task id in canonical form: lowercase, version 8, RFC 4122 variant (libs/shardmap matches
# single ids with it; _fastcheck.c's `canonical` checks the same).
CANONICAL_ID = r"[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
_CANONICAL_RUN = re.compile(f"(?:{CANONICAL_ID}\n)*")


def json_value_ok(item: str | bytes) -> bool:
    """One item, in Python: the scanner must end exactly at the item's end."""
    try:
        text = item.decode() if isinstance(item, bytes) else item
        return _scan(text, 0)[1] == len(text)
    except (UnicodeDecodeError, StopIteration, ValueError, RecursionError):
        return False


def py_first_bad_json(items: Sequence[str | bytes]) -> int:
    for i, item in enumerate(items):
        if not json_value_ok(item):
            return i
    return -1


def py_all_canonical_ids(ids: Sequence[str]) -> bool:
    """One regex match over the joined ids; the length test keeps an id with a newline in it
    from passing as two (n ids of 36 characters, each followed by one newline, are 37 * n)."""
    if not ids:
        return True
    if not all(type(v) is str for v in ids):
        return False
    joined = "\n".join(ids) + "\n"
    return len(joined) == 37 * len(ids) and _CANONICAL_RUN.fullmatch(joined) is not None


COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, header extension length
COPY_TRAILER = b"\xff\xff"


def py_copy_rows(ids: Sequence[str], payloads: Sequence[bytes], nfields: int, shared: bytes) -> bytes:
    if not 2 <= nfields <= 1600:
        raise ValueError("copy_rows: nfields must be 2..1600")
    if len(ids) != len(payloads):
        raise ValueError("copy_rows: one payload per id")
    head = struct.pack("!hi", nfields, 16)
    parts = [COPY_HEADER]
    for i, (task_id, payload) in enumerate(zip(ids, payloads, strict=True)):
        if type(payload) is not bytes:
            raise TypeError(f"copy_rows: payloads[{i}] is not bytes")
        if not py_all_canonical_ids([task_id]):
            raise ValueError(f"copy_rows: ids[{i}] is not a canonical task id")
        parts += (head, uuid.UUID(task_id).bytes, struct.pack("!i", len(payload)), payload, shared)
    parts.append(COPY_TRAILER)
    return b"".join(parts)


try:
    from ratchet.libs.fastcheck._fastcheck import all_canonical_ids, copy_rows, first_bad_json
    NATIVE = True
except ImportError:  # built without a compiler: the same answers, slower
    first_bad_json = py_first_bad_json
    all_canonical_ids = py_all_canonical_ids
    copy_rows = py_copy_rows
    NATIVE = False
