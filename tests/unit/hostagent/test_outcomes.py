"""Done frames from a sandbox become completions; bad ones never pass through."""

from __future__ import annotations

from ratchet.internal.worker.v1 import worker_pb2
from ratchet.services.hostagent import outcomes
from ratchet.services.hostagent.sandboxes import RunEnd, describe_exit, sandbox_env

TASK = worker_pb2.LeasedTask(shard_id=2, task_id="t1", lease_epoch=9, attempt=3)


def test_succeeded_done_carries_result_and_lease():
    c = outcomes.from_done(TASK, {"type": "done", "outcome": "succeeded", "result": '{"a":1}', "error": None,
                                  "fatal": False, "retry_after_s": None})
    assert (c.shard_id, c.task_id, c.lease_epoch) == (2, "t1", 9)
    assert c.outcome == worker_pb2.COMPLETION_OUTCOME_SUCCEEDED and c.result_json == b'{"a":1}'


def test_failed_done_carries_error_fatal_and_retry_after():
    c = outcomes.from_done(TASK, {"outcome": "failed", "error": {"error_class": "ValueError", "message": "m",
                                                                 "stack": "s"}, "fatal": True,
                                  "retry_after_s": 1.5})
    assert c.outcome == worker_pb2.COMPLETION_OUTCOME_FAILED and c.fatal
    assert (c.error.error_class, c.error.message, c.error.stack) == ("ValueError", "m", "s")
    assert c.retry_after.seconds == 1 and c.retry_after.nanos == 500_000_000


def test_invalid_done_frames_become_protocol_failures():
    for done in ({"outcome": "won"}, {"outcome": "failed", "error": "oops"},
                 {"outcome": "succeeded", "result": 5}, {"outcome": "failed", "retry_after_s": -1}):
        c = outcomes.from_end(TASK, RunEnd(done=done))
        assert c.outcome == worker_pb2.COMPLETION_OUTCOME_FAILED
        assert c.error.error_class == "SandboxProtocolError"


def test_an_oversized_result_is_refused_even_if_the_stub_lies():
    c = outcomes.from_done(TASK, {"outcome": "succeeded", "result": '"' + "x" * (256 * 1024) + '"'})
    assert c.fatal and c.error.error_class == "ResultTooLarge" and not c.result_json


def test_a_dead_sandbox_is_a_crash_naming_the_signal():
    c = outcomes.from_end(TASK, RunEnd(exit_status=-9), log_tail="Segmentation fault")
    assert c.outcome == worker_pb2.COMPLETION_OUTCOME_CRASHED and not c.fatal
    assert c.error.error_class == "SandboxCrashed"
    assert c.error.message == "sandbox process exited with signal 9 (SIGKILL) while running the handler"
    assert "Segmentation fault" in c.error.stack
    assert describe_exit(3) == "status 3"


def test_sandbox_env_is_scrubbed(monkeypatch, tmp_path):
    monkeypatch.setenv("RATCHET_HOSTAGENT_HOST_TOKEN", "secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    env = sandbox_env(tmp_path)
    assert set(env) <= {"PATH", "LANG", "HOME", "TMPDIR", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"}
    assert "secret" not in env.values() and env["HOME"] == str(tmp_path)


LEASED = worker_pb2.LeasedTask(shard_id=2, task_id="t1", tenant_id="ten", app_id="app", task_type="flow",
                               lease_epoch=9, attempt=3)


def test_a_suspended_done_frame_is_a_suspended_completion_with_its_position_and_wake():
    c = outcomes.from_end(LEASED, RunEnd(done={"type": "done", "task_id": "t1", "outcome": "suspended",
                                               "suspend_position": 4, "wake_after_s": 90.25, "result": None,
                                               "error": None, "fatal": False, "retry_after_s": None}))
    assert c.outcome == worker_pb2.COMPLETION_OUTCOME_SUSPENDED and c.suspend_position == 4
    assert (c.wake_after.seconds, c.wake_after.nanos) == (90, 250_000_000)
    # The lease and what it was for, as on every completion (the breakers read the type).
    assert (c.shard_id, c.task_id, c.lease_epoch, c.tenant_id, c.app_id, c.task_type) == (
        2, "t1", 9, "ten", "app", "flow")
    assert not c.fatal and not c.HasField("error") and not c.result_json


def test_a_suspension_without_wake_after_waits_for_its_step_only():
    c = outcomes.from_done(LEASED, {"outcome": "suspended", "suspend_position": 0, "wake_after_s": None})
    assert c.outcome == worker_pb2.COMPLETION_OUTCOME_SUSPENDED and c.suspend_position == 0
    assert not c.HasField("wake_after")


def test_malformed_suspended_and_timed_frames_become_protocol_failures():
    for done in ({"outcome": "suspended"}, {"outcome": "suspended", "suspend_position": -1},
                 {"outcome": "suspended", "suspend_position": True},
                 {"outcome": "suspended", "suspend_position": "3"},
                 {"outcome": "suspended", "suspend_position": 1, "wake_after_s": -5},
                 {"outcome": "suspended", "suspend_position": 1, "wake_after_s": float("nan")},
                 {"outcome": "failed", "retry_after_s": float("nan")},
                 {"outcome": "failed", "retry_after_s": 1e300}, {"outcome": ["suspended"]}):
        c = outcomes.from_end(LEASED, RunEnd(done=done))
        assert c.outcome == worker_pb2.COMPLETION_OUTCOME_FAILED, done
        assert c.error.error_class == "SandboxProtocolError", done
