"""Failures and cancellation end to end: killed sandboxes and host agents,
paused workers completing late, cancel in every state, server timeouts."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.e2e.conftest import sandbox_running, wait_for

pytestmark = pytest.mark.timeout(120)


def _running(platform, client, tid):
    """Wait until tid runs in a sandbox; return the sandbox record."""
    return wait_for(lambda: sandbox_running(platform, tid), timeout=20, what=f"{tid} running in a sandbox")


def test_sandbox_sigkill_mid_task_fails_attempt_at_once_then_succeeds(platform, client):
    tid = client.enqueue("sleepy", {"seconds": 60, "fast_retry": True})
    sb = _running(platform, client, tid)
    os.kill(sb.pid, signal.SIGKILL)
    info = client.wait(tid, timeout=30)
    assert info.state == "SUCCEEDED" and info.result["attempt"] == 2
    first = info.attempts[0]
    assert first.outcome == "CRASHED" and first.error.error_class == "SandboxCrashed"
    assert "SIGKILL" in first.error.message or "signal 9" in first.error.message
    # Failed at once, not after a lease expiry.
    assert (first.finished_at - first.started_at).total_seconds() < 60


def test_host_agent_killed_mid_task_lease_expires_then_succeeds(platform, client):
    tid = client.enqueue("sleepy", {"seconds": 60, "fast_retry": True})
    _running(platform, client, tid)
    old = platform.service_pid("hostagent")
    platform.kill("hostagent")
    info = client.wait(tid, timeout=60)
    assert info.state == "SUCCEEDED" and info.result["attempt"] == 2
    assert info.attempts[0].outcome == "LEASE_EXPIRED"
    assert info.attempts[0].error.error_class == "LeaseExpired"
    assert platform.service_pid("hostagent") not in (None, old)  # the supervisor restarted it


def test_paused_worker_completing_after_lease_expiry_is_rejected(platform, client):
    # Room for retries: a frozen agent's open poll can swallow a few more
    # leases before anyone notices (each expires in turn; see the note below).
    tid = client.enqueue("sleepy", {"seconds": 0.5}, retry={"max_attempts": 10, "base": "100ms", "cap": "200ms"})
    _running(platform, client, tid)
    platform.pause("hostagent")
    try:
        # The sandbox finishes while its agent is frozen; the lease expires.
        wait_for(lambda: client.get(tid).state in ("RETRY_WAIT", "ENQUEUED"), timeout=20,
                 what="the frozen worker's lease to expire")
    finally:
        platform.resume("hostagent")
    info = client.wait(tid, timeout=30)
    # The late completion of attempt 1 changed nothing: the last attempt's
    # result stands. (The frozen agent may also have been handed attempt 2
    # through a poll it had open before it froze; that lease expires too.)
    timeline = [(a.attempt, a.outcome, a.error and a.error.error_class) for a in info.attempts]
    assert info.state == "SUCCEEDED" and info.result["attempt"] == info.attempt >= 2, timeline
    assert [a.outcome for a in info.attempts[:-1]] == ["LEASE_EXPIRED"] * (info.attempt - 1)
    assert info.attempts[-1].outcome == "SUCCEEDED"
    assert [a.lease_epoch for a in info.attempts] == sorted({a.lease_epoch for a in info.attempts})


def test_cancel_enqueued_is_immediate(client):
    tid = client.enqueue("echo", {"never": "runs"}, delay="60s")
    assert client.cancel(tid) == "CANCELED"
    info = client.get(tid)
    assert info.state == "CANCELED" and info.attempts == [] and info.finished_at


def test_cancel_in_retry_wait_is_immediate(client):
    tid = client.enqueue("always_fail", {}, retry={"max_attempts": 5, "base": "30s", "cap": "30s", "jitter": False})
    wait_for(lambda: client.get(tid).state == "RETRY_WAIT", timeout=20, what="RETRY_WAIT")
    assert client.cancel(tid) == "CANCELED"
    time.sleep(0.3)
    info = client.get(tid)
    assert info.state == "CANCELED" and info.attempt == 1


def test_cancel_leased_cooperative_handler_returns_canceled(platform, client):
    tid = client.enqueue("sleepy", {"seconds": 60, "honour_cancel": True})
    _running(platform, client, tid)
    assert client.cancel(tid) == "LEASED"
    assert client.get(tid).cancel_requested
    info = client.wait(tid, timeout=20)
    assert info.state == "CANCELED"
    assert info.attempts[-1].outcome == "CANCELED"


def test_cancel_leased_ignored_sandbox_killed_after_grace(platform, client):
    tid = client.enqueue("sleepy", {"seconds": 60, "honour_cancel": False})
    sb = _running(platform, client, tid)
    started = time.monotonic()
    client.cancel(tid)
    info = client.wait(tid, timeout=30)
    assert info.state == "CANCELED"
    assert time.monotonic() - started >= 1.5  # the 2 s grace period ran
    wait_for(lambda: not _alive(sb.pid), timeout=10, what="the sandbox to be killed")


def test_cancel_terminal_changes_nothing(client):
    tid = client.enqueue("echo", {})
    assert client.wait(tid, timeout=30).state == "SUCCEEDED"
    assert client.cancel(tid) == "SUCCEEDED"
    assert client.get(tid).state == "SUCCEEDED"


def test_start_to_close_timeout_cancels_then_kills_and_counts_as_failure(platform, client):
    tid = client.enqueue("sleepy", {"seconds": 60, "honour_cancel": False},
                         timeouts={"start_to_close": "1s"}, retry={"max_attempts": 1})
    info = client.wait(tid, timeout=30)
    assert info.state == "FAILED"
    assert info.attempts[0].outcome == "TIMED_OUT"
    assert info.error.error_class == "StartToCloseTimeout"


def test_schedule_to_start_expires_a_task_nobody_started(platform, client):
    # No worker at all (a paused one could still hold an open poll and lease it).
    platform.stop_service("hostagent")
    try:
        tid = client.enqueue("echo", {"late": True}, timeouts={"schedule_to_start": "500ms"})
        wait_for(lambda: client.get(tid).state == "EXPIRED", timeout=20, what="EXPIRED")
    finally:
        platform.start_service("hostagent")
    info = client.get(tid)
    assert info.error.error_class == "ScheduleToStartTimeout" and info.attempts == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
