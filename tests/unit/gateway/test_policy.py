"""Policy resolution: enqueue override > handler policy > platform defaults."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.services.gateway import policy
from ratchet.services.gateway.errors import InvalidArgument


def handler(**data) -> apps_pb2.Handler:
    return json_format.ParseDict({"name": "h", **data}, apps_pb2.Handler())


def test_defaults_when_nothing_is_set():
    r, t = policy.resolve(None, None, handler())
    assert json_format.MessageToDict(r) == {"maxAttempts": 5, "base": "1s", "factor": 2.0, "cap": "3600s",
                                            "jitter": True}
    assert json_format.MessageToDict(t) == {"startToClose": "600s"}


def test_handler_policy_beats_defaults_and_override_beats_handler_field_by_field():
    h = handler(retry={"max_attempts": 3, "base": "2s", "jitter": False}, timeouts={"start_to_close": "30s",
                                                                                    "schedule_to_close": "3600s"})
    override_r = tasks_pb2.RetryPolicy(max_attempts=9)
    override_t = json_format.ParseDict({"start_to_close": "5s"}, tasks_pb2.Timeouts())
    r, t = policy.resolve(override_r, override_t, h)
    assert r.max_attempts == 9 and policy.seconds(r.base) == 2 and r.jitter is False
    assert r.factor == 2.0 and policy.seconds(r.cap) == 3600
    assert policy.seconds(t.start_to_close) == 5 and policy.seconds(t.schedule_to_close) == 3600
    assert not t.HasField("schedule_to_start")


def test_explicit_false_jitter_override_is_kept():
    r, _ = policy.resolve(tasks_pb2.RetryPolicy(jitter=False), None, handler(retry={"jitter": True}))
    assert r.jitter is False


def test_inconsistent_merge_is_refused():
    with pytest.raises(InvalidArgument, match="must be >= base"):
        policy.resolve(None, None, handler(retry={"base": "7200s"}))


def test_malformed_duration_is_refused():
    d = tasks_pb2.RetryPolicy()
    d.base.seconds, d.base.nanos = 1, -5
    with pytest.raises(InvalidArgument, match="not a valid duration"):
        policy.check_retry(d, "retry")
