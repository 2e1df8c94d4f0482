"""The breakers on the hot path (breaker_gate.py): type limits per LeaseTasks
call, the single probe token, and which completions the breakers hear about."""

from __future__ import annotations

import dataclasses
import datetime as dt

from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs.clock import FakeClock
from ratchet.services.dispatcher.auth import is_loopback
from ratchet.services.dispatcher.breaker_gate import MAX_LIMITS, BreakerGate
from ratchet.services.dispatcher.breakers import CLOSED, HALF_OPEN, OPEN, Breaker, BreakerKey

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
POISON = BreakerKey("tenant-a", "app", "poison")
OTHER = BreakerKey("tenant-b", "app-b", "flaky")


def row(key: BreakerKey, state: str, version: int = 2, **kw) -> Breaker:
    opened = {"opened_at": NOW, "probe_at": NOW} if state != CLOSED else {}
    return Breaker(key, state=state, version=version, **opened, **kw)


def limits(gate: BreakerGate, apps=()):
    lims, probes = gate.limits(apps)
    return {(lim.tenant_id, lim.app_id, lim.task_type): lim.max_tasks for lim in lims}, probes


def leased(key: BreakerKey, task_id: str) -> wpb.LeasedTask:
    return wpb.LeasedTask(task_id=task_id, tenant_id=key.tenant_id, app_id=key.app_id, task_type=key.task_type)


def completion(key: BreakerKey, task_id: str, outcome=wpb.COMPLETION_OUTCOME_SUCCEEDED) -> wpb.Completion:
    return wpb.Completion(task_id=task_id, lease_epoch=1, outcome=outcome, tenant_id=key.tenant_id,
                          app_id=key.app_id, task_type=key.task_type)


def test_no_breakers_no_limits():
    gate = BreakerGate("me", FakeClock())
    assert gate.limits(()) == ([], ())


def test_open_and_half_open_types_are_paused_and_closed_ones_dropped():
    gate = BreakerGate("me", FakeClock())
    gate.replace([row(POISON, OPEN), row(OTHER, HALF_OPEN)])
    got, probes = limits(gate)
    assert got == {("tenant-a", "app", "poison"): 0, ("tenant-b", "app-b", "flaky"): 0} and probes == ()
    assert limits(gate, ["app-b"])[0] == {("tenant-b", "app-b", "flaky"): 0}  # only the poll's apps
    gate.put(row(POISON, CLOSED, version=3))
    assert limits(gate)[0] == {("tenant-b", "app-b", "flaky"): 0}


def test_an_older_read_never_overwrites_a_newer_row():
    gate = BreakerGate("me", FakeClock())
    gate.put(row(POISON, OPEN, version=5))
    gate.put(row(POISON, CLOSED, version=4))
    assert POISON in gate.breakers


def test_one_probe_token_one_call_at_a_time_and_it_returns_if_unused():
    clock = FakeClock()
    reported = []
    gate = BreakerGate("me", clock, lambda key, task: reported.append((key, task)))
    gate.replace([row(POISON, HALF_OPEN, probe_owner="me", probe_leased_at=NOW)])
    gate.grant(POISON, valid_s=10)
    first, probes = limits(gate)
    assert first[("tenant-a", "app", "poison")] == 1 and probes == (POISON,)
    second, none = limits(gate)  # a concurrent call to another shard
    assert second[("tenant-a", "app", "poison")] == 0 and none == ()
    gate.settle(probes, [leased(OTHER, "x")])  # no task of the type on that shard
    third, probes = limits(gate)
    assert third[("tenant-a", "app", "poison")] == 1
    gate.settle(probes, [leased(POISON, "probe-1"), leased(POISON, "never")])
    assert reported == [(POISON, "probe-1")]
    assert limits(gate)[0][("tenant-a", "app", "poison")] == 0  # the token is spent


def test_a_failed_call_returns_the_token_and_an_old_token_lapses():
    clock = FakeClock()
    gate = BreakerGate("me", clock)
    gate.replace([row(POISON, HALF_OPEN, probe_owner="me", probe_leased_at=NOW)])
    gate.grant(POISON, valid_s=10)
    _, probes = limits(gate)
    gate.release(probes)
    assert limits(gate)[1] == (POISON,)
    gate.release((POISON,))
    clock.advance(11)
    assert limits(gate)[1] == () and not gate.has_token(POISON)


def test_a_token_is_dropped_when_the_claim_is_no_longer_ours():
    gate = BreakerGate("me", FakeClock())
    gate.replace([row(POISON, HALF_OPEN, probe_owner="me", probe_leased_at=NOW)])
    gate.grant(POISON, valid_s=10)
    gate.replace([row(POISON, HALF_OPEN, version=3, probe_owner="someone-else", probe_leased_at=NOW)])
    assert not gate.has_token(POISON) and limits(gate)[1] == ()


def test_completions_the_breakers_hear_about():
    gate = BreakerGate("me", FakeClock())
    ok = completion(POISON, "t1")
    crashed = completion(POISON, "t2", wpb.COMPLETION_OUTCOME_CRASHED)
    crashed.error.error_class, crashed.error.message = "SandboxCrashed", "signal 9"
    assert gate.outcome(ok) is None  # the common case: no breaker, no crash
    got = gate.outcome(crashed)
    assert (got.key, got.task_id, got.crashed, got.error_class, got.message) == \
        (POISON, "t2", True, "SandboxCrashed", "signal 9")
    unnamed = wpb.Completion(task_id="t3", outcome=wpb.COMPLETION_OUTCOME_CRASHED)
    assert gate.outcome(unnamed) is None  # an agent that does not say the type cannot be counted
    too_long = completion(BreakerKey("tenant-a", "app", "x" * 201), "t4", wpb.COMPLETION_OUTCOME_CRASHED)
    assert gate.outcome(too_long) is None  # history would refuse it as a type limit
    # The probe's completion, known locally before the row says so, and from the row.
    gate.replace([row(POISON, HALF_OPEN, probe_owner="me", probe_leased_at=NOW)])
    gate.grant(POISON, 10)
    _, probes = gate.limits(())
    gate.settle(probes, [leased(POISON, "probe")])
    assert gate.outcome(completion(POISON, "probe")).crashed is False
    assert gate.outcome(completion(POISON, "not-the-probe")) is None
    gate.replace([row(OTHER, HALF_OPEN, probe_owner="d2", probe_task_id="theirs", probe_leased_at=NOW)])
    assert gate.outcome(completion(OTHER, "theirs")) is not None


def test_limits_are_capped_at_what_history_accepts():
    gate = BreakerGate("me", FakeClock())
    gate.replace([row(BreakerKey("t", "a", f"type-{i}"), OPEN) for i in range(MAX_LIMITS + 5)])
    assert len(gate.limits(())[0]) == MAX_LIMITS


def test_loopback_peers():
    assert is_loopback("ipv4:127.0.0.1:5000") and is_loopback("ipv6:[::1]:5000")
    assert is_loopback("ipv6:[::ffff:127.0.0.1]:5000")
    for peer in ("ipv4:10.0.0.7:5000", "ipv6:[2001:db8::1]:5000", "unix:/tmp/s", "", None, "ipv4:garbage"):
        assert not is_loopback(peer)


def test_rows_are_frozen():
    b = row(POISON, OPEN)
    assert dataclasses.replace(b, state=CLOSED).state == CLOSED and b.state == OPEN
