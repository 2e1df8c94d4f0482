"""Forced interleavings with gates held inside the history service.

Each test needs a `gates.reach("...")` line in services/history; until that
line exists the test is skipped (naming the line), because an armed gate that
is never reached would fail it. See docs/reliability.md for where each gate goes.
"""

from __future__ import annotations

import os
import pathlib
import tempfile
import threading
import time

import pytest

from ratchet.client import DeadlineExceeded, RatchetError, Unavailable
from tests.fault.harness.platform import FaultPlatform
from tests.fault.harness.scenario import FAST_OVERRIDES, deploy_app

ROOT = pathlib.Path(__file__).resolve().parents[2]


def gate_in_history(name: str) -> bool:
    needle = f'reach("{name}")'
    return any(needle in p.read_text() for p in (ROOT / "services" / "history").rglob("*.py"))


def needs_gate(name: str):
    return pytest.mark.skipif(not gate_in_history(name),
                              reason=f'services/history has no `await gates.reach("{name}")` yet')


@pytest.fixture
def gated_platform(gates):
    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-gated-"))
    os.chmod(root, 0o755)
    ledger = root / "ledger.jsonl"
    ledger.touch()
    os.chmod(ledger, 0o666)
    platform = FaultPlatform(root / "platform", shards=1, overrides=FAST_OVERRIDES, env=gates.env)
    platform.start()
    deploy_app(platform)
    try:
        yield platform, str(ledger)
    finally:
        gates.release_all()
        platform.stop()


@needs_gate("history.enqueue.after_commit")
@pytest.mark.timeout(120, method="thread")
def test_enqueue_committed_but_unanswered_is_deduplicated_on_retry(gated_platform, gates):
    """The enqueue commits, history dies before answering: the client sees an error, its retry with
    the same key gets the original task, and that one task runs once to SUCCEEDED."""
    platform, ledger = gated_platform
    gate = gates.arm("history.enqueue.after_commit")
    payload = {"op": "gated-1", "ledger": ledger, "mode": "ok"}
    errors: list[Exception] = []

    def first_try():
        with platform.client(timeout=10, max_retries=0) as c:
            try:
                c.enqueue("work", payload, idempotency_key="gated-key-1")
            except RatchetError as e:
                errors.append(e)

    t = threading.Thread(target=first_try)
    t.start()
    gate.wait_reached(timeout=30)
    gate.release(action="crash")
    t.join(30)
    assert errors and isinstance(errors[0], (Unavailable, DeadlineExceeded, RatchetError))
    gate.disarm()
    platform.ensure_serving("history")
    with platform.client(timeout=10) as c:
        task_id = c.enqueue("work", payload, idempotency_key="gated-key-1")
        info = c.wait(task_id, timeout=60)
    assert info.state == "SUCCEEDED"
    runs = [line for line in pathlib.Path(ledger).read_text().splitlines() if '"phase": "start"' in line]
    assert len(runs) == 1, "one key, one task, one execution"


@needs_gate("history.complete.before_commit")
@pytest.mark.timeout(120, method="thread")
def test_history_dies_before_committing_a_completion(gated_platform, gates):
    """History crashes holding an uncommitted completion: nothing is lost, the task still ends
    SUCCEEDED, and any second execution is explained by the lost completion."""
    platform, ledger = gated_platform
    gate = gates.arm("history.complete.before_commit")
    with platform.client(timeout=10) as c:
        task_id = c.enqueue("work", {"op": "gated-2", "ledger": ledger, "mode": "ok"})
        gate.wait_reached(timeout=30)
        gate.release(action="crash")
        gate.disarm()
        platform.ensure_serving("history")
        info = c.wait(task_id, timeout=60)
    assert info.state == "SUCCEEDED"
    assert all(a.outcome in ("SUCCEEDED", "LEASE_EXPIRED") for a in info.attempts), info.attempts


@needs_gate("history.lease.before_commit")
@pytest.mark.timeout(120, method="thread")
def test_history_dies_before_committing_a_lease(gated_platform, gates):
    """History crashes with a lease written but not committed: the lease never existed (no attempt
    charged, no epoch used), and the task is leased again and succeeds on attempt 1."""
    platform, ledger = gated_platform
    gate = gates.arm("history.lease.before_commit")
    with platform.client(timeout=10) as c:
        task_id = c.enqueue("work", {"op": "gated-3", "ledger": ledger, "mode": "ok"})
        gate.wait_reached(timeout=30)
        gate.release(action="crash")
        gate.disarm()
        platform.ensure_serving("history")
        info = c.wait(task_id, timeout=60)
    assert info.state == "SUCCEEDED"
    assert [(a.attempt, a.lease_epoch, a.outcome) for a in info.attempts] == [(1, 1, "SUCCEEDED")]
    assert info.result["lease_epoch"] == 1


@needs_gate("history.complete.received")
@pytest.mark.timeout(150, method="thread")
def test_stale_completion_is_rejected(gates):
    """The forced interleaving behind P3: a completion is held in history before it takes any lock;
    meanwhile the host agent is paused, the lease expires and the task is leased again (epoch 2).
    Released, the epoch-1 completion must be rejected: the task ends with lease 2's result."""
    import signal

    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-gated-"))
    os.chmod(root, 0o755)
    ledger = root / "ledger.jsonl"
    ledger.touch()
    os.chmod(ledger, 0o666)
    overrides = {k: dict(v) for k, v in FAST_OVERRIDES.items()}
    overrides["dispatcher"]["rpc_timeout_s"] = 30  # the held completion call must outlive the hold
    platform = FaultPlatform(root / "platform", shards=1, overrides=overrides, env=gates.env)
    platform.start()
    try:
        deploy_app(platform)
        gate = gates.arm("history.complete.received")
        with platform.client(timeout=10) as c:
            task_id = c.enqueue("work", {"op": "gated-4", "ledger": str(ledger), "mode": "ok"})
            gate.wait_reached(timeout=30)
            gate.disarm()
            agent = platform.service_pid("hostagent")
            os.kill(agent, signal.SIGSTOP)  # no heartbeat: the lease expires on the shard clock
            try:
                deadline = time.monotonic() + 30
                while c.get(task_id).attempt < 1 or c.get(task_id).state == "LEASED":
                    assert time.monotonic() < deadline, "the lease never expired"
                    time.sleep(0.2)
            finally:
                os.kill(agent, signal.SIGCONT)
            while c.get(task_id).attempt < 2:  # leased again, epoch 2
                assert time.monotonic() < deadline + 30
                time.sleep(0.1)
            gate.release()  # the stale epoch-1 completion goes on
            info = c.wait(task_id, timeout=60)
        assert info.state == "SUCCEEDED" and info.result["lease_epoch"] == 2, info
    finally:
        gates.release_all()
        platform.stop()
