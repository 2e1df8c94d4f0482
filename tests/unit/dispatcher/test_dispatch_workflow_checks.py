"""The dispatcher's side of workflows: which Step requests it refuses before history
sees them, which SUSPENDED completions it refuses, and that a suspension is neither a
crash nor a failure to the circuit breakers (a probe that suspends ran without crashing)."""

from __future__ import annotations

import datetime as dt

import pytest

from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.clock import FakeClock
from ratchet.services.dispatcher import validation
from ratchet.services.dispatcher.breaker_gate import BreakerGate
from ratchet.services.dispatcher.breakers import CLOSED, HALF_OPEN, Breaker, BreakerKey, Settings, observe
from ratchet.services.dispatcher.errors import InvalidArgument

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
FLOW = BreakerKey("tenant-a", "app", "flow")
SETTINGS = Settings(threshold=3, window_s=60, cooldown_s=60, probe_timeout_s=60)


def good_step(**fields) -> wpb.StepRequest:
    request = wpb.StepRequest(lease=wpb.LeaseRef(shard_id=1, task_id="t1", lease_epoch=3), op=wpb.STEP_OP_BEGIN,
                              kind=wpb.STEP_KIND_STEP, position=0, name="charge")
    for name, value in fields.items():
        if name == "lease":
            request.ClearField("lease") if value is None else request.lease.CopyFrom(value)
        elif name == "children":
            request.children.extend(value)
        else:
            setattr(request, name, value)
    return request


def suspended(task_id: str, key: BreakerKey = FLOW, **fields) -> wpb.Completion:
    return wpb.Completion(shard_id=0, task_id=task_id, lease_epoch=1, outcome=wpb.COMPLETION_OUTCOME_SUSPENDED,
                          tenant_id=key.tenant_id, app_id=key.app_id, task_type=key.task_type, **fields)


def test_a_well_formed_step_passes():
    validation.step(good_step())
    validation.step(good_step(op=wpb.STEP_OP_COMMIT, kind=wpb.STEP_KIND_WAIT, position=12))


@pytest.mark.parametrize("fields, fragment", [
    ({"lease": None}, "lease must be set"),
    ({"lease": wpb.LeaseRef(shard_id=-1, task_id="t1", lease_epoch=3)}, "lease.shard_id must be >= 0"),
    ({"lease": wpb.LeaseRef(shard_id=1, task_id="", lease_epoch=3)}, "lease.task_id must not be empty"),
    ({"lease": wpb.LeaseRef(shard_id=1, task_id="t1", lease_epoch=0)}, "lease.lease_epoch must be >= 1"),
    ({"op": wpb.STEP_OP_UNSPECIFIED}, "op must be STEP_OP_BEGIN or STEP_OP_COMMIT"),
    ({"op": 9}, "op must be STEP_OP_BEGIN or STEP_OP_COMMIT, got 9"),
    ({"kind": wpb.STEP_KIND_UNSPECIFIED}, "kind must be STEP_KIND_STEP"),
    ({"position": -1}, "position must be >= 0"),
    ({"name": ""}, "name must not be empty"),
])
def test_malformed_steps_are_refused(fields, fragment):
    with pytest.raises(InvalidArgument) as info:
        validation.step(good_step(**fields))
    assert fragment in info.value.message


def fan_out(n: int = 2, kind: int = wpb.STEP_KIND_PARALLEL, **fields) -> wpb.StepRequest:
    request = good_step(kind=kind, **fields)
    request.children.extend(wpb.ChildSpec(task_type="charge", payload_json=b'{"n": 1}') for _ in range(n))
    return request


def test_well_formed_fan_outs_pass_with_their_children():
    validation.step(fan_out(2, on_failure=wpb.PARALLEL_FAILURE_FAIL_FAST))
    validation.step(fan_out(10_000))
    validation.step(fan_out(1, kind=wpb.STEP_KIND_CHILD))


def _child(task_type: str = "charge", payload: bytes = b"1") -> wpb.ChildSpec:
    return wpb.ChildSpec(task_type=task_type, payload_json=payload)


@pytest.mark.parametrize("request_, fragment", [
    (fan_out(0), "children must hold 1..10000 ChildSpecs for this kind, got 0"),
    (fan_out(10_001), "children must hold 1..10000 ChildSpecs for this kind, got 10001"),
    (fan_out(2, kind=wpb.STEP_KIND_CHILD), "children must hold 1..1 ChildSpecs for this kind, got 2"),
    (fan_out(1, op=wpb.STEP_OP_COMMIT), "a PARALLEL or CHILD step is only begun"),
    (fan_out(1, on_failure=7), "on_failure must be PARALLEL_FAILURE_COLLECT or _FAIL_FAST, got 7"),
    (good_step(kind=wpb.STEP_KIND_PARALLEL, children=[_child(), _child("")]),
     "children[1].task_type must name a handler"),
    (good_step(kind=wpb.STEP_KIND_CHILD, children=[_child(payload=b"x" * (256 * 1024 + 1))]),
     "children[0].payload_json is 262145 bytes, over the 262144-byte limit"),
    (good_step(children=[_child()]), "children and on_failure are for STEP_KIND_PARALLEL or _CHILD steps only"),
    (good_step(kind=wpb.STEP_KIND_SLEEP, on_failure=wpb.PARALLEL_FAILURE_COLLECT), "children and on_failure are for"),
    (good_step(kind=9), "kind must be STEP_KIND_STEP, _VERSION, _SLEEP, _WAIT, _PARALLEL, _CHILD, _ON_CANCEL or "
                        "_COMPENSATE, got 9"),
])
def test_malformed_fan_outs_are_refused(request_, fragment):
    with pytest.raises(InvalidArgument) as info:
        validation.step(request_)
    assert fragment in info.value.message


def test_compensation_steps_pass_and_an_on_cancel_is_only_begun():
    validation.step(good_step(kind=wpb.STEP_KIND_ON_CANCEL, result_json=b'{"args":[],"kwargs":{}}'))
    validation.step(good_step(kind=wpb.STEP_KIND_COMPENSATE, name="compensate:refund"))
    validation.step(good_step(kind=wpb.STEP_KIND_COMPENSATE, op=wpb.STEP_OP_COMMIT, result_json=b"null"))
    with pytest.raises(InvalidArgument, match="an ON_CANCEL step is only begun"):
        validation.step(good_step(kind=wpb.STEP_KIND_ON_CANCEL, op=wpb.STEP_OP_COMMIT))
    with pytest.raises(InvalidArgument, match="children and on_failure are for"):
        validation.step(good_step(kind=wpb.STEP_KIND_COMPENSATE, children=[_child()]))


def test_suspended_completions_are_checked_and_named_in_the_outcome_message():
    validation.completions([suspended("t1", suspend_position=2)])
    with pytest.raises(InvalidArgument, match=r"completions\[0\]\.suspend_position must be >= 0"):
        validation.completions([suspended("t1", suspend_position=-1)])
    bad_wake = suspended("t1", suspend_position=0)
    bad_wake.wake_after.seconds = -5
    with pytest.raises(InvalidArgument, match=r"completions\[0\]\.wake_after must be a non-negative duration"):
        validation.completions([bad_wake])
    with pytest.raises(InvalidArgument, match="CRASHED or SUSPENDED"):
        validation.completions([wpb.Completion(shard_id=0, task_id="t", lease_epoch=1)])


def test_a_suspension_is_no_crash_to_the_breakers():
    gate = BreakerGate("me", FakeClock())
    assert gate.outcome(suspended("t1", suspend_position=0)) is None
    # Even with breakers loaded (the gate then looks closer), a suspension of a task that is
    # not a probe is nothing to them.
    gate.replace([Breaker(FLOW, state=HALF_OPEN, version=2, opened_at=NOW, probe_at=NOW, probe_owner="me",
                          probe_task_id="probe", probe_leased_at=NOW)])
    assert gate.outcome(suspended("other", suspend_position=0)) is None


def test_a_probe_that_suspends_closes_its_breaker():
    gate = BreakerGate("me", FakeClock())
    half_open = Breaker(FLOW, state=HALF_OPEN, version=2, opened_at=NOW, probe_at=NOW, probe_owner="me",
                        probe_task_id="probe", probe_leased_at=NOW)
    gate.replace([half_open])
    outcome = gate.outcome(suspended("probe", suspend_position=1))
    assert outcome is not None and outcome.crashed is False
    assert observe(half_open, outcome, NOW, SETTINGS).state == CLOSED
