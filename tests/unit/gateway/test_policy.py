"""Policy resolution: enqueue override > handler policy > platform defaults."""

from __future__ import annotations

import pytest
from google.protobuf import json_format

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.rpc.errors import InvalidArgument
from ratchet.services.gateway import policy


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


def rules_policy(data: dict) -> tasks_pb2.RetryPolicy:
    return json_format.ParseDict(data, tasks_pb2.RetryPolicy())


@pytest.mark.parametrize("data, needle", [
    ({"non_retryable": ["not a class"]}, "retry.non_retryable[0] holds 'not a class'"),
    ({"rules": {"9Bad": {}}}, "retry.rules key holds '9Bad'"),
    ({"rules": {"E": {"max_attempts": 0}}}, "retry.rules['E'].max_attempts must be 1..100"),
    ({"rules": {"E": {"factor": 11}}}, "retry.rules['E'].factor must be 1.0..10.0"),
    ({"rules": {"E": {"base": "0s"}}}, "retry.rules['E'].base must be > 0"),
    ({"rules": {"E": {"base": "5s", "cap": "1s"}}}, "retry.rules['E'].cap (1.0s) must be >="),
    ({"rules": {"E": {"non_retryable": True, "max_attempts": 3}}}, "its max_attempts would never apply"),
    ({"non_retryable": ["E"], "rules": {"E": {"max_attempts": 3}}}, "E is both in non_retryable and in rules"),
    ({"non_retryable": [f"E{i}" for i in range(101)]}, "at most 100"),
])
def test_bad_rules_are_refused(data, needle):
    with pytest.raises(InvalidArgument) as e:
        policy.check_retry(rules_policy(data), "retry")
    assert needle in e.value.message


def test_rules_and_non_retryable_travel_resolved():
    h = handler(non_retryable=["OldStyle"], retry={"non_retryable": ["KeyError"],
                                                   "rules": {"TimeoutError": {"max_attempts": 10, "base": "5s"},
                                                             "ValueError": {"non_retryable": True}}})
    r, _ = policy.resolve(None, None, h)
    assert list(r.non_retryable) == ["OldStyle", "KeyError"]
    assert set(r.rules) == {"TimeoutError", "ValueError"} and r.rules["TimeoutError"].max_attempts == 10
    assert r.rules["ValueError"].non_retryable and not r.rules["TimeoutError"].HasField("factor")


def test_enqueue_rules_or_non_retryable_replace_the_handlers_as_wholes():
    h = handler(retry={"non_retryable": ["KeyError", "IOError"], "rules": {"TimeoutError": {"max_attempts": 10}}})
    r, _ = policy.resolve(rules_policy({"rules": {"KeyError": {"max_attempts": 2}}}), None, h)
    # The enqueue's rules replace the handler's; a class it rules leaves the inherited non_retryable.
    assert set(r.rules) == {"KeyError"} and list(r.non_retryable) == ["IOError"]
    r, _ = policy.resolve(rules_policy({"non_retryable": ["TimeoutError"]}), None, h)
    assert list(r.non_retryable) == ["TimeoutError"] and not r.rules
    r, _ = policy.resolve(rules_policy({"max_attempts": 2}), None, h)
    assert list(r.non_retryable) == ["KeyError", "IOError"] and set(r.rules) == {"TimeoutError"}


def test_a_rule_must_stay_consistent_once_it_inherits_the_policy():
    with pytest.raises(InvalidArgument, match=r"rules\['E'\]: cap \(3600s\) would be smaller than base \(7200s\)"):
        policy.resolve(rules_policy({"rules": {"E": {"base": "7200s"}}}), None, handler())
    r, _ = policy.resolve(rules_policy({"rules": {"E": {"base": "7200s", "cap": "7200s"}}}), None, handler())
    assert r.rules["E"].base.seconds == 7200
