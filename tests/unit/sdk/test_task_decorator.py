"""@task and RetryPolicy: validation at decoration time and what they record."""

from __future__ import annotations

import random
import types

import pytest

from ratchet.errors import DiscoveryError, FatalError, TaskDefinitionError
from ratchet.retry import RetryPolicy
from ratchet.task import find_tasks, spec_of, task


def test_bare_decorator_uses_platform_defaults_and_keeps_the_function():
    @task
    def resize(ctx, payload):
        return payload

    spec = spec_of(resize)
    assert resize(None, 3) == 3  # still a plain callable
    assert spec.name == "resize"
    assert spec.describe() == {
        "name": "resize",
        "kind": "task",
        "retry": {"max_attempts": 5, "base_s": 1.0, "factor": 2.0, "cap_s": 3600.0, "jitter": True,
                  "non_retryable": [], "rules": {}},
        "timeouts": {"start_to_close_s": 600.0, "schedule_to_start_s": None, "schedule_to_close_s": None},
        "non_retryable": [],
    }


def test_arguments_are_parsed_into_seconds_and_class_names():
    class Invalid(Exception):
        pass

    @task(name="img.resize", retries=RetryPolicy(max_attempts=3, base="250ms", factor=3, cap="1h30m",
                                                   jitter=False, non_retryable=[Invalid, "KeyError"]),
          timeout=90, schedule_to_start="30s", schedule_to_close="2h")
    def handler(ctx, payload):
        return None

    d = spec_of(handler).describe()
    assert d["name"] == "img.resize"
    assert d["retry"] == {"max_attempts": 3, "base_s": 0.25, "factor": 3.0, "cap_s": 5400.0, "jitter": False,
                          "non_retryable": ["Invalid", "KeyError"], "rules": {}}
    assert d["timeouts"] == {"start_to_close_s": 90.0, "schedule_to_start_s": 30.0, "schedule_to_close_s": 7200.0}
    assert d["non_retryable"] == ["Invalid", "KeyError"]


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(timeout="ten minutes"), "timeout"),
    (dict(timeout=0), "greater than zero"),
    (dict(schedule_to_close="5x"), "schedule_to_close"),
    (dict(name="has space"), "name"),
    (dict(name=""), "name"),
    (dict(retries={"max_attempts": 3}), "RetryPolicy"),
])
def test_invalid_task_arguments_fail_at_decoration(kwargs, fragment):
    with pytest.raises(TaskDefinitionError, match=fragment):
        @task(**kwargs)
        def handler(ctx, payload):
            return None


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(max_attempts=0), "max_attempts"),
    (dict(max_attempts=101), "max_attempts"),
    (dict(max_attempts=2.5), "max_attempts"),
    (dict(backoff="linear"), "backoff"),
    (dict(base="soon"), "base"),
    (dict(factor=0.5), "factor"),
    (dict(base="2h", cap="1h"), "cap"),
    (dict(non_retryable=[42]), "non_retryable"),
])
def test_invalid_retry_policies_are_refused(kwargs, fragment):
    with pytest.raises(TaskDefinitionError, match=fragment):
        RetryPolicy(**kwargs)


def test_handler_must_take_ctx_and_payload():
    with pytest.raises(TaskDefinitionError, match=r"\(ctx, payload\)"):
        @task
        def handler(payload):
            return None


def test_fixed_backoff_and_delay_formula():
    fixed = RetryPolicy(backoff="fixed", base="5s", factor=4.0, jitter=False)
    assert fixed.factor == 1.0 and fixed.delay_s(1) == fixed.delay_s(7) == 5.0
    exp = RetryPolicy(base="1s", factor=2.0, cap="10s", jitter=False)
    assert [exp.delay_s(n) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    jittered = RetryPolicy(base="1s", factor=2.0, cap="10s")
    rng = random.Random(7)
    assert all(0.0 <= jittered.delay_s(4, rng) <= 8.0 for _ in range(200))


def test_non_retryable_matches_the_class_and_its_subclasses():
    class Base(Exception):
        pass

    class Child(Base):
        pass

    policy = RetryPolicy(non_retryable=[Base])
    assert policy.is_non_retryable(Child()) and not policy.is_non_retryable(ValueError())


def test_find_tasks_collects_specs_and_refuses_duplicate_names():
    mod = types.ModuleType("m")

    @task
    def a(ctx, p):
        return 1

    mod.a, mod.alias, mod.other = a, a, (lambda: None)
    assert [s.name for s in find_tasks(mod)] == ["a"]

    @task(name="a")
    def b(ctx, p):
        return 2

    mod.b = b
    with pytest.raises(DiscoveryError, match="declared twice"):
        find_tasks(mod)


def test_errors_carry_their_fields():
    from ratchet.errors import RetryableError

    assert RetryableError("later", retry_after="1m").retry_after_s == 60.0
    assert RetryableError("x").retry_after_s is None
    assert FatalError("bad input").message == "bad input"
