"""Edge validation of enqueue requests: each rule, and that the message names the field."""

from __future__ import annotations

import math
import time

import pytest
from google.protobuf import json_format, struct_pb2

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.rpc.errors import InvalidArgument, TooLarge
from ratchet.services.gateway import validation
from ratchet.services.gateway.deployments import register

HANDLERS = {name: register(apps_pb2.Handler(name=name)) for name in ("send", "resize")}
NOW = time.time()


def req(**fields) -> tasks_pb2.EnqueueTaskRequest:
    data = {"task_type": "send", **fields}
    return json_format.ParseDict(data, tasks_pb2.EnqueueTaskRequest())


def check(r, handlers=HANDLERS, limit=262144, index=None):
    return validation.validate_task(r, handlers, max_payload_bytes=limit, now_s=NOW, index=index)


def test_valid_minimal_request_gets_defaults():
    t = check(req(payload={"b": 1, "a": [1.5, None, "x"]}))
    assert t.queue == "default"
    assert t.payload_json == b'{"a":[1.5,null,"x"],"b":1}'
    assert t.retry.max_attempts == 5 and t.retry.factor == 2.0 and t.retry.jitter
    assert t.timeouts.start_to_close.seconds == 600
    assert not t.timeouts.HasField("schedule_to_start")
    assert t.fingerprint == ""  # unkeyed: nothing will ever compare it
    assert check(req(payload={"b": 1}, idempotency_key="k")).fingerprint.startswith("sha256:")


def test_unset_payload_is_json_null():
    assert check(req()).payload_json == b"null"


@pytest.mark.parametrize("fields, needle", [
    ({"task_type": "nope"}, "registered types: resize, send"),
    ({"task_type": ""}, "task_type is required"),
    ({"queue": "bad queue"}, "queue must be 1..64"),
    ({"queue": "q" * 65}, "queue must be 1..64"),
    ({"idempotency_key": "k" * 201}, "idempotency_key must be 1..200"),
    ({"idempotency_key": "caf\u00e9"}, "printable ASCII"),
    ({"idempotency_key": "tab\there"}, "printable ASCII"),
    ({"delay": "10s", "run_at": "2030-01-01T00:00:00Z"}, "exclusive"),
    ({"delay": "-1s"}, "delay must be >= 0"),
    ({"delay": f"{366 * 86400}s"}, "at most 365 days"),
    ({"run_at": "2300-01-01T00:00:00Z"}, "run_at must be at most 365 days"),
    ({"retry": {"max_attempts": 0}}, "retry.max_attempts must be 1..100"),
    ({"retry": {"max_attempts": 101}}, "retry.max_attempts must be 1..100"),
    ({"retry": {"factor": 0.5}}, "retry.factor must be 1.0..10.0"),
    ({"retry": {"factor": 11}}, "retry.factor must be 1.0..10.0"),
    ({"retry": {"base": "0s"}}, "retry.base must be > 0"),
    ({"retry": {"cap": "0s"}}, "retry.cap must be > 0"),
    ({"retry": {"base": "10s", "cap": "5s"}}, "retry.cap (5.0s) must be >= retry.base"),
    ({"retry": {"base": "7200s"}}, "cap (3600.0s) must be >= base (7200.0s)"),
    ({"timeouts": {"start_to_close": "0s"}}, "timeouts.start_to_close must be > 0"),
    ({"timeouts": {"schedule_to_close": "-5s"}}, "timeouts.schedule_to_close must be > 0"),
])
def test_bad_input_is_refused_naming_the_field(fields, needle):
    with pytest.raises(InvalidArgument) as e:
        check(req(**fields))
    assert needle in e.value.message
    assert e.value.http_status == 400


def test_no_deployment_says_deploy_first():
    with pytest.raises(InvalidArgument, match="deploy the app first"):
        check(req(), handlers=None)


def test_batch_items_are_named_by_index():
    with pytest.raises(InvalidArgument, match=r"tasks\[7\]\.queue"):
        check(req(queue="no spaces"), index=7)


def test_payload_over_limit_is_413_and_exactly_at_limit_passes():
    limit = 262144
    at_limit = "x" * (limit - 2)  # two quote characters
    assert len(check(req(payload=at_limit)).payload_json) == limit
    with pytest.raises(TooLarge) as e:
        check(req(payload=at_limit + "x"))
    assert e.value.http_status == 413 and "262145 bytes" in e.value.message
    assert e.value.code.name == "RESOURCE_EXHAUSTED"


def test_nan_payload_is_refused():
    r = tasks_pb2.EnqueueTaskRequest(task_type="send")
    r.payload.number_value = float("nan")
    with pytest.raises(InvalidArgument, match="NaN"):
        check(r)


def test_fingerprint_ignores_key_and_default_queue_but_not_content():
    a = check(req(payload={"x": 1}, idempotency_key="k1"))
    b = check(req(payload={"x": 1}, queue="default", idempotency_key="k2"))
    c = check(req(payload={"x": 2}, idempotency_key="k1"))
    d = check(req(payload={"x": 1}, delay="5s", idempotency_key="k3"))
    assert a.fingerprint == b.fingerprint
    assert len({a.fingerprint, c.fingerprint, d.fingerprint}) == 3


def test_batch_size_limits():
    validation.check_batch_size(1)
    validation.check_batch_size(1000)
    with pytest.raises(InvalidArgument, match="at most 1000"):
        validation.check_batch_size(1001)
    with pytest.raises(InvalidArgument, match="empty"):
        validation.check_batch_size(0)


def test_duplicate_keys_in_one_batch_are_refused():
    items = [check(req(idempotency_key=k), index=i) for i, k in enumerate(["a", "b", "a"])]
    with pytest.raises(InvalidArgument, match=r"tasks\[0\] and tasks\[2\] share"):
        validation.check_unique_keys(items)


def _random_value(rng, depth=0):
    kinds = ["int", "float", "big", "str", "bool", "null"] + (["dict", "list"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.randint(-10**6, 10**6)
    if kind == "float":
        return rng.choice([0.5, -1.25, 1e-7, 3.141592653589793, 1e21, -0.0, 2.0 ** 60])
    if kind == "big":
        return rng.choice([2 ** 53 + 1, -(2 ** 63), 10 ** 17])
    if kind == "str":
        return rng.choice(["", "a", "ünïcødé ✓", "quote\"back\\slash", "line\nbreak", "\u2028"])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "dict":
        return {rng.choice(["a", "b", "z", "é", "key with space", "1"]) + str(i): _random_value(rng, depth + 1)
                for i in range(rng.randint(0, 4))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def test_fast_fingerprint_is_byte_for_byte_the_general_one():
    """Stored fingerprints are compared for 24 h, across upgrades: the fast path must render
    exactly what MessageToDict rendered, for every payload shape."""
    import random
    rng = random.Random(5)
    for i in range(2000):
        r = tasks_pb2.EnqueueTaskRequest(task_type=rng.choice(["send", "resize", ""]),
                                         queue=rng.choice(["", "default", "emails"]), idempotency_key=f"k{i}")
        if rng.random() < 0.9:
            r.payload.CopyFrom(json_format.ParseDict(_random_value(rng), struct_pb2.Value()))
        elif rng.random() < 0.5:
            r.payload.SetInParent()  # an empty Value: null
        queue = r.queue or "default"
        assert validation.fingerprint(r, queue) == validation.fingerprint_general(r, queue), r
    # Requests with other fields take the general path (and still differ from the plain one).
    plain = req(payload={"x": 1}, idempotency_key="k")
    delayed = req(payload={"x": 1}, idempotency_key="k", delay="5s")
    assert validation.fingerprint(delayed, "default") == validation.fingerprint_general(delayed, "default")
    assert validation.fingerprint(plain, "default") != validation.fingerprint(delayed, "default")


def _plain(v: struct_pb2.Value, where: str = "payload"):
    """A Value as plain JSON data; integral numbers become ints (so 1.0 prints as 1)."""
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "number_value":
        n = v.number_value
        if math.isnan(n) or math.isinf(n):
            raise ValueError(f"{where} holds NaN or Infinity, which JSON cannot carry")
        return int(n) if n.is_integer() and abs(n) < 2 ** 53 else n
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return {k: _plain(x, f"{where}.{k}") for k, x in v.struct_value.fields.items()}
    return [_plain(x, f"{where}[{i}]") for i, x in enumerate(v.list_value.values)]


def test_payload_rendering_is_byte_for_byte_the_dumped_dict():
    """The stored payload is rendered straight from the Value; it must be exactly what
    canonical_json of the plain data wrote (what it was until the direct rendering) (sorted keys,
    integral numbers as ints, raw unicode), for every payload shape, and refuse NaN the same way."""
    import random
    rng = random.Random(7)
    for _ in range(2000):
        v = json_format.ParseDict(_random_value(rng), struct_pb2.Value())
        assert validation.payload_json(v).encode() == validation.canonical_json(_plain(v)), v
    assert validation.payload_json(struct_pb2.Value()) == "null"
    nan = struct_pb2.Value()
    nan.struct_value.fields["a"].list_value.values.add().number_value = float("nan")
    with pytest.raises(InvalidArgument, match=r"payload\.a\[0\] holds NaN"):
        validation.payload_json(nan)
