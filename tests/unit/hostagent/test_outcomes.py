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
