"""ListTasks across shards: page tokens bound to the filter, and the merge that
returns every task exactly once, newest first, however the shards interleave."""

from __future__ import annotations

import base64
import datetime as dt
import json
import random

import pytest
from google.protobuf import timestamp_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.rpc.errors import InvalidArgument
from ratchet.libs.shardmap import new_task_id
from ratchet.services.gateway import filters, listing

S = tasks_pb2
SHARDS = [0, 1, 2, 3]


def ts(seconds: float) -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromMicroseconds(int(seconds * 1_000_000))
    return t


def task(created: float, finished: float | None = None, task_id: str | None = None) -> tasks_pb2.Task:
    t = S.Task(task_id=task_id or new_task_id(), created_at=ts(created),
               state=S.TASK_STATE_FAILED if finished is not None else S.TASK_STATE_ENQUEUED)
    if finished is not None:
        t.finished_at.CopyFrom(ts(finished))
    return t


def test_token_round_trip_and_end():
    token = listing.encode_token("abc", {0: "", 2: "2026-11-30T02:00:00.000000Z|x"})
    assert "=" not in token and set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert listing.decode_token(token, "abc", SHARDS) == {0: "", 2: "2026-11-30T02:00:00.000000Z|x"}
    assert listing.encode_token("abc", {}) == ""


def test_token_is_bound_to_the_filter_and_the_caller():
    f1 = S.TaskFilter(states=[S.TASK_STATE_FAILED], task_type="a")
    f2 = S.TaskFilter(states=[S.TASK_STATE_FAILED], task_type="b")
    h1 = filters.filter_hash("t", "app", f1)
    assert h1 == filters.filter_hash("t", "app", S.TaskFilter(states=[S.TASK_STATE_FAILED], task_type="a"))
    assert len({h1, filters.filter_hash("t", "app", f2), filters.filter_hash("t2", "app", f1),
                filters.filter_hash("t", "app2", f1)}) == 4
    token = listing.encode_token(h1, {1: ""})
    with pytest.raises(InvalidArgument, match="page_token does not match the filter"):
        listing.decode_token(token, filters.filter_hash("t", "app", f2), SHARDS)


@pytest.mark.parametrize("token", ["%%%", "bm90IGpzb24", base64.urlsafe_b64encode(b'{"v":2}').decode(),
                                   base64.urlsafe_b64encode(json.dumps({"v": 1, "f": "h", "c": {"x": ""}}).encode())
                                   .decode(), "A" * 70000])
def test_malformed_tokens_are_400(token):
    with pytest.raises(InvalidArgument, match="page_token is not valid"):
        listing.decode_token(token, "h", SHARDS)


def test_token_naming_an_unknown_shard_is_400():
    with pytest.raises(InvalidArgument, match="names shard 9"):
        listing.decode_token(listing.encode_token("h", {9: ""}), "h", SHARDS)


def test_cursor_matches_history_format_and_sort_time():
    t = task(created=100.25, finished=200.5, task_id="0190a3b4-0000-8000-8000-000000000001")
    assert listing.cursor_of(t) == "1970-01-01T00:03:20.500000Z|0190a3b4-0000-8000-8000-000000000001"
    live = task(created=100.25, task_id="0190a3b4-0000-8000-8000-000000000001")
    assert listing.cursor_of(live).startswith("1970-01-01T00:01:40.250000Z|")


class FakeShards:
    """Per-shard pages honouring the history cursor: strictly older in (sort time, task_id)."""

    def __init__(self, tasks_by_shard: dict[int, list[tasks_pb2.Task]]):
        self.data = {s: sorted(ts_, key=listing.sort_key, reverse=True) for s, ts_ in tasks_by_shard.items()}

    def page(self, shard: int, cursor: str, size: int) -> history_pb2.ListTasksResponse:
        rows = self.data[shard]
        if cursor:
            at, _, tid = cursor.rpartition("|")
            when = dt.datetime.fromisoformat(at.replace("Z", "+00:00"))
            key = (int(when.timestamp() // 1), when.microsecond * 1000, tid)
            rows = [r for r in rows if listing.sort_key(r) < key]
        out = history_pb2.ListTasksResponse(tasks=rows[:size])
        if len(rows) > size:
            out.next_cursor = listing.cursor_of(rows[size - 1])
        return out


def page_through(shards: FakeShards, size: int) -> list[tasks_pb2.Task]:
    cursors = dict.fromkeys(shards.data, "")
    seen: list[tasks_pb2.Task] = []
    for _ in range(10_000):
        pages = {s: shards.page(s, c, size) for s, c in cursors.items()}
        got, cursors = listing.merge(pages, cursors, size)
        assert len(got) <= size
        seen += got
        if not cursors:
            return seen
        assert got, "a page that is not the last must not be empty"
    raise AssertionError("paging did not end")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("size", [1, 3, 10])
def test_merged_paging_returns_every_task_once_newest_first(seed, size):
    rng = random.Random(seed)
    by_shard: dict[int, list] = {s: [] for s in SHARDS}
    for _ in range(rng.randrange(0, 60)):
        created = rng.randrange(0, 20) / 4  # many equal times: task_id breaks the tie
        finished = created + rng.randrange(0, 8) if rng.random() < 0.5 else None
        by_shard[rng.choice(SHARDS)].append(task(created, finished))
    everything = sorted((t for ts_ in by_shard.values() for t in ts_), key=listing.sort_key, reverse=True)
    got = page_through(FakeShards(by_shard), size)
    assert [t.task_id for t in got] == [t.task_id for t in everything]


def test_a_shard_with_nothing_taken_keeps_its_cursor():
    shards = FakeShards({0: [task(10), task(9)], 1: [task(1)]})
    pages = {s: shards.page(s, "", 1) for s in (0, 1)}
    got, nxt = listing.merge(pages, {0: "", 1: ""}, 1)
    assert len(got) == 1 and nxt[1] == "" and nxt[0] == listing.cursor_of(got[0])
