"""The SDK's enqueue_batch requests (session 9): payload_json, ids minted in one go."""

from __future__ import annotations

import json

import pytest

from ratchet.client import InvalidArgument, batch_request, enqueue_request
from ratchet.libs.shardmap import all_canonical, slot_of


def _items(tasks: list[dict]) -> list:
    return list(batch_request(tasks).tasks)


def _fields(req) -> dict:
    return {f.name: v for f, v in req.ListFields() if f.name != "task_id"}


@pytest.mark.parametrize("item", [
    {"task_type": "send"},
    {"task_type": "send", "payload": None},
    {"task_type": "send", "payload": {"b": [1, 2.5, (3, 4)], "a": "\u00e9", 7: True}},
    {"task_type": "send", "payload": "x", "queue": "q1"},
    {"task_type": "send", "payload": 1, "delay": "5s", "retry": {"max_attempts": 2}},
    {"task_type": "send", "payload": [1], "idempotency_key": "k-1"},
])
def test_each_item_is_the_request_enqueue_sends(item):
    (got,) = _items([item])
    assert _fields(got) == _fields(enqueue_request(**item))
    assert bool(got.task_id) == ("idempotency_key" not in item)


def test_payloads_go_as_compact_json_text():
    (req,) = _items([{"task_type": "send", "payload": {"b": [1, 2.5], "a": "\u00e9", "n": 2 ** 70}}])
    assert req.payload_json == '{"b":[1,2.5],"a":"\u00e9","n":1180591620717411303424}'
    assert not req.HasField("payload")
    assert json.loads(req.payload_json)["n"] == 2 ** 70  # (every digit: a Value would round it)


def test_ids_are_canonical_unique_and_share_a_slot_per_hundred_unkeyed_items():
    items = [{"task_type": "send", "payload": i} for i in range(250)]
    items[10] = {"task_type": "send", "idempotency_key": "k"}
    reqs = _items(items)
    ids = [r.task_id for r in reqs if r.task_id]
    assert len(ids) == 249 and len(set(ids)) == 249 and all_canonical(ids)
    assert [len({slot_of(i) for i in ids[k:k + 100]}) for k in (0, 100, 200)] == [1, 1, 1]


@pytest.mark.parametrize("bad, needle", [
    ({"task_type": "send", "payload": float("nan")}, "tasks[1].payload must be JSON-serializable"),
    ({"task_type": "send", "payload": {1: object()}}, "tasks[1].payload must be JSON-serializable"),
    ({"task_type": 5, "payload": 1}, "tasks[1]: "),
    ({"task_type": "send", "nope": 1}, "tasks[1]: got an unexpected keyword argument 'nope'"),
    ({"task_type": "send", "delay": "zz"}, "tasks[1].delay"),
    ({"payload": 1}, "tasks[1] must be a dict with a task_type"),
])
def test_a_bad_item_is_named(bad, needle):
    with pytest.raises(InvalidArgument) as e:
        _items([{"task_type": "send"}, bad])
    assert needle in str(e.value)


def test_columns_when_every_item_is_one_type_and_queue_with_a_payload():
    tasks = [{"task_type": "send", "payload": {"i": i}, "queue": "q1"} for i in range(250)] + \
        [{"task_type": "send", "queue": "q1"}]
    req = batch_request(tasks, columns=True)
    assert req.HasField("columns") and not req.tasks
    cols = req.columns
    assert (cols.task_type, cols.queue) == ("send", "q1")
    assert all_canonical(list(cols.task_ids)) and len(set(cols.task_ids)) == 251
    assert len({slot_of(t) for t in cols.task_ids}) == 3  # a slot per run of 100, as items get
    assert [json.loads(p) for p in cols.payloads_json[:3]] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert cols.payloads_json[250] == ""  # no payload: null
    # The same payload text as the item form carries.
    same = batch_request(tasks[:1]).tasks[0]
    assert (same.task_type, same.queue, same.payload_json) == ("send", "q1", cols.payloads_json[0])


@pytest.mark.parametrize("tasks", [
    [{"task_type": "send"}, {"task_type": "other"}],
    [{"task_type": "send", "queue": "a"}, {"task_type": "send", "queue": "b"}],
    [{"task_type": "send"}, {"task_type": "send", "idempotency_key": "k"}],
    [{"task_type": "send"}, {"task_type": "send", "delay": "5s"}],
])
def test_items_when_the_tasks_differ_in_more_than_their_payload(tasks):
    req = batch_request(tasks, columns=True)
    assert not req.HasField("columns") and len(req.tasks) == len(tasks)


def test_a_bad_item_is_named_by_its_index_with_columns_asked():
    with pytest.raises(InvalidArgument, match=r"tasks\[1\] must be a dict"):
        batch_request([{"task_type": "send"}, "not a dict"], columns=True)
    with pytest.raises(InvalidArgument, match=r"tasks\[1\]\.payload"):
        batch_request([{"task_type": "send", "payload": 1}, {"task_type": "send", "payload": object()}],
                      columns=True)
