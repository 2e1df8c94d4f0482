"""payload_json (the SDK's payload form) and plain batches checked as columns (session 9)."""

from __future__ import annotations

import random
import time

import pytest
from google.protobuf import json_format

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.rpc.errors import InvalidArgument, TooLarge
from ratchet.libs.shardmap import SlotGroups, new_task_id
from ratchet.services.gateway import validation
from ratchet.services.gateway.deployments import register

HANDLERS = {name: register(apps_pb2.Handler(name=name)) for name in ("send", "resize")}
LIMIT = 262144


def item(payload_json: str = '{"n":1}', **fields) -> tasks_pb2.EnqueueTaskRequest:
    return tasks_pb2.EnqueueTaskRequest(task_type="send", task_id=new_task_id(), payload_json=payload_json, **fields)


def batch(*items: tasks_pb2.EnqueueTaskRequest) -> tasks_pb2.EnqueueTasksRequest:
    return tasks_pb2.EnqueueTasksRequest(tasks=items)


def plain(req, handlers=HANDLERS, limit=LIMIT):
    return validation.plain_batch(req, handlers, max_payload_bytes=limit)


def check(r, index=None):
    return validation.validate_task(r, HANDLERS, max_payload_bytes=LIMIT, now_s=time.time(), index=index)


# -- payload_json on the per-task path -------------------------------------------------

def test_payload_json_is_stored_as_sent():
    t = check(item('{"b": 1, "a": [1.5, null, "\u00e9"], "big": 123456789012345678901234567890}'))
    assert t.payload_json == '{"b": 1, "a": [1.5, null, "\u00e9"], "big": 123456789012345678901234567890}'.encode()
    assert check(item("")).payload_json == b"null"  # (unset: as for `payload`)


@pytest.mark.parametrize("text, needle", [
    ("{1", "tasks[3].payload_json must be one JSON value: Expecting property name"),
    ("[1] [2]", "tasks[3].payload_json must be one JSON value: Extra data"),
    ('{"a": NaN}', "tasks[3].payload_json must be one JSON value: NaN is not JSON"),
    ("-Infinity", "tasks[3].payload_json must be one JSON value: -Infinity is not JSON"),
])
def test_payload_json_that_is_not_json_is_refused_naming_the_item(text, needle):
    with pytest.raises(InvalidArgument) as e:
        check(item(text), index=3)
    assert needle in e.value.message


def test_payload_json_with_whitespace_around_one_value_passes():
    assert check(item(' \n{"a": 1}\t')).payload_json == b' \n{"a": 1}\t'


def test_payload_and_payload_json_are_exclusive():
    r = item('{"a":1}')
    r.payload.number_value = 1
    with pytest.raises(InvalidArgument) as e:
        check(r, index=0)
    assert e.value.message.startswith("tasks[0].payload and tasks[0].payload_json are exclusive")


def test_payload_json_over_the_limit_is_too_large():
    with pytest.raises(TooLarge):
        check(item('"' + "\u00e9" * (LIMIT // 2) + '"'))  # (counted in UTF-8 bytes, not characters)


@pytest.mark.parametrize("extra", [{}, {"delay": "5s"}, {"queue": "q1"}])
def test_a_keys_fingerprint_reads_both_payload_forms_alike(extra):
    """A retry may switch forms (an SDK upgrade between two sends of one key)."""
    data = {"b": [1, 2.5, True, None, {"c": "x"}], "a": 3}
    as_value = json_format.ParseDict({"task_type": "send", "idempotency_key": "k", "payload": data, **extra},
                                     tasks_pb2.EnqueueTaskRequest())
    as_text = json_format.ParseDict({"task_type": "send", "idempotency_key": "k", **extra},
                                    tasks_pb2.EnqueueTaskRequest())
    as_text.payload_json = '{"a": 3, "b": [1, 2.5, true, null, {"c": "x"}]}'
    assert check(as_value).fingerprint == check(as_text).fingerprint
    as_text.payload_json = '{"a": 4, "b": [1, 2.5, true, null, {"c": "x"}]}'
    assert check(as_value).fingerprint != check(as_text).fingerprint


# -- plain batches ------------------------------------------------------------------

def test_an_sdk_batch_is_plain_with_its_columns():
    slots = SlotGroups()
    items = [tasks_pb2.EnqueueTaskRequest(task_type="send", task_id=new_task_id(slots.next()),
                                          payload_json=f'{{"n":{i}}}') for i in range(100)]
    items[7].payload_json = ""
    p = plain(batch(*items))
    assert p is not None
    assert (p.task_type, p.queue, p.handler.handler.name) == ("send", "default", "send")
    assert p.task_ids == [t.task_id for t in items]
    assert p.payloads[:3] == [b'{"n":0}', b'{"n":1}', b'{"n":2}'] and p.payloads[7] == b"null"
    assert p.sizes[7] == 0 and p.sizes[8] == len(b'{"n":8}')
    q = [item(queue="q1") for _ in range(3)]
    assert plain(batch(*q)).queue == "q1"


def _other_field(name: str) -> tasks_pb2.EnqueueTaskRequest:
    r = item()
    if name == "delay":
        r.delay.seconds = 0  # (set, even at zero: HasField)
    elif name == "run_at":
        r.run_at.seconds = 2_000_000_000
    elif name == "retry":
        r.retry.SetInParent()
    elif name == "timeouts":
        r.timeouts.start_to_close.seconds = 5
    elif name == "payload":
        r.ClearField("payload_json")
        r.payload.number_value = 1
    elif name == "idempotency_key":
        r.ClearField("task_id")
        r.idempotency_key = "k"
    elif name == "no_task_id":
        r.ClearField("task_id")
    elif name == "upper_case_id":
        r.task_id = r.task_id.upper()
    elif name == "other_type":
        r.task_type = "resize"
    elif name == "other_queue_same_length":
        r.queue = "q2"
    elif name == "a_queue_among_none":
        r.queue = "q"
    elif name == "unknown_type":
        r.task_type = "nope"
    elif name == "bad_json":
        r.payload_json = "{1"
    elif name == "nan":
        r.payload_json = "NaN"
    elif name == "whitespace":
        r.payload_json = " 1"
    elif name == "too_large":
        r.payload_json = '"' + "x" * LIMIT + '"'
    return r


@pytest.mark.parametrize("name", ["delay", "run_at", "retry", "timeouts", "payload", "idempotency_key",
                                  "no_task_id", "upper_case_id", "other_type", "other_queue_same_length",
                                  "a_queue_among_none", "unknown_type", "bad_json", "nan", "whitespace",
                                  "too_large"])
def test_any_item_that_is_not_plain_sends_the_batch_the_per_task_way(name):
    first = [item(queue="q1"), item(queue="q1")] if name == "other_queue_same_length" else [item(), item()]
    odd = _other_field(name)
    if name == "other_queue_same_length":
        odd.queue = "q2"
    assert plain(batch(*first)) is not None
    assert plain(batch(*first, odd)) is None
    assert plain(batch(odd, *first)) is None


def test_a_repeated_id_an_unknown_field_or_no_deployment_is_not_plain():
    a = item()
    assert plain(batch(a, item(), tasks_pb2.EnqueueTaskRequest.FromString(a.SerializeToString()))) is None
    b = batch(item(), item())
    assert plain(b, handlers=None) is None
    unknown = tasks_pb2.EnqueueTaskRequest.FromString(item().SerializeToString() + b"\xa8\x06\x01")  # field 101
    assert plain(batch(item(), unknown)) is None
    assert plain(batch(item())) is None  # (one task: the single path's shape)


def test_the_size_formula_is_the_serialized_size():
    """_plain_size against ByteSize over generated plain requests: every length class of the
    payloads (one-byte and longer varints, UTF-8 of several bytes) and of the type and queue."""
    rng = random.Random(9)
    alphabet = ["a", "\u00e9", "\u20ac", "\U0001f600", '"']
    for case in range(300):
        n = rng.randint(1, 40)
        task_type = rng.choice(["s", "send", "t" * 100, "u" * 200])
        queue = rng.choice(["", "q", "x" * 64])
        items = []
        for _ in range(n):
            k = rng.choice([0, 1, 20, 60, 120, 130, 300, 20000])
            text = "".join(rng.choice(alphabet) for _ in range(k)) if k else ""
            items.append(tasks_pb2.EnqueueTaskRequest(task_type=task_type, queue=queue, task_id=new_task_id(),
                                                      payload_json=text))
        sizes = [len(t.payload_json.encode()) for t in items]
        assert validation._plain_size(len(task_type.encode()), len(queue.encode()), sizes) == \
            batch(*items).ByteSize(), case


def test_plain_and_per_task_paths_agree_on_what_they_accept():
    """Whatever plain_batch takes, validate_task takes with the same payload bytes and type."""
    slots = SlotGroups()
    texts = ['{"n":1}', "", "[1,2]", '"\u00e9"', "null", "123456789012345678901234567890", '{"a":{"b":[true]}}']
    items = [tasks_pb2.EnqueueTaskRequest(task_type="send", task_id=new_task_id(slots.next()), payload_json=x)
             for x in texts]
    p = plain(batch(*items))
    assert p is not None
    per_task = [check(r, index=i) for i, r in enumerate(items)]
    assert p.payloads == [t.payload_json for t in per_task]
    assert p.task_ids == [t.task_id for t in per_task]
