"""`ratchet tasks list|retry|cancel-many`, `operations`, `schedules` and
`breakers` against a fake gateway: their JSON output, exit codes and errors."""

from __future__ import annotations

import json

import pytest

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.cli import commands
from ratchet.cli.main import main
from tests.unit.client.fake_server import FakeServer


@pytest.fixture
def server(monkeypatch, tmp_path):
    s = FakeServer()
    monkeypatch.setenv("RATCHET_ENDPOINT", s.endpoint)
    monkeypatch.setenv("RATCHET_API_KEY", "rk_test")
    monkeypatch.chdir(tmp_path)
    yield s
    s.stop()


def run(capsys, *argv: str) -> tuple[int, object, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_tasks_list_prints_a_page_or_every_page(server, capsys):
    server.tasks.listable = [tasks_pb2.Task(task_id=f"t-{n}", task_type="report", state=tasks_pb2.TASK_STATE_FAILED,
                                            error=tasks_pb2.TaskError(error_class="KeyError")) for n in range(3)]
    code, out, _ = run(capsys, "tasks", "list", "--state", "FAILED", "--type", "report", "--since", "1d",
                       "--page-size", "2")
    assert code == 0 and [t["task_id"] for t in out["tasks"]] == ["t-0", "t-1"] and out["next_page_token"]
    assert out["tasks"][0]["state"] == "FAILED" and out["tasks"][0]["error"]["error_class"] == "KeyError"
    code, out, _ = run(capsys, "tasks", "list", "--state", "FAILED", "--error-class", "KeyError", "--all",
                       "--page-size", "1")
    assert code == 0 and [t["task_id"] for t in out["tasks"]] == ["t-0", "t-1", "t-2"]
    req = server.tasks.requests[-1]
    assert (req.state, req.error_class) == (tasks_pb2.TASK_STATE_FAILED, "KeyError")


@pytest.mark.parametrize("argv, fragment", [
    (["--state", "FAILED", "--state", "EXPIRED"], "tasks list takes one --state"),
    (["--page-size", "0"], "--page-size must be between 1 and 500"),
    (["--all", "--page-token", "x"], "give --all or --page-token, not both"),
    (["--state", "DEAD"], "INVALID_ARGUMENT: unknown task state 'DEAD'"),
    (["--since", "last tuesday"], "neither an ISO 8601 time nor a duration ago"),
])
def test_tasks_list_refuses_bad_flags_in_one_line(server, capsys, argv, fragment):
    code, out, err = run(capsys, "tasks", "list", *argv)
    assert code == 1 and out is None and err.startswith("error: ") and fragment in err and err.count("\n") == 1


def test_tasks_retry_dry_run_then_wait(server, capsys):
    code, out, _ = run(capsys, "tasks", "retry", "--state", "FAILED", "--error-class", "KeyError", "--dry-run")
    assert code == 0 and out == {"matched": 3, "operation": None} and server.tasks.requests[0].dry_run
    code, out, _ = run(capsys, "tasks", "retry", "--type", "report", "--request-id", "fix-1", "--wait", "10")
    assert code == 0 and out["operation_id"] == "op-fix-1" and out["state"] == "SUCCEEDED"
    assert out["failures"] == [{"task_id": "t-2", "reason": "task type 'gone' is not registered"}]
    # The same request id again is the same operation (the contract's idempotency).
    code, out, _ = run(capsys, "tasks", "retry", "--type", "report", "--request-id", "fix-1")
    assert out["operation"]["operation_id"] == "op-fix-1" and len(server.tasks.operations) == 1


def test_cancel_many_and_operations(server, capsys):
    code, out, _ = run(capsys, "tasks", "cancel-many", "--queue", "emails", "--state", "ENQUEUED",
                       "--state", "RETRY_WAIT")
    op_id = out["operation"]["operation_id"]
    assert code == 0 and out["operation"]["kind"] == "CANCEL" and out["operation"]["state"] == "RUNNING"
    assert list(server.tasks.requests[-1].filter.states) == [tasks_pb2.TASK_STATE_ENQUEUED,
                                                             tasks_pb2.TASK_STATE_RETRY_WAIT]
    code, out, _ = run(capsys, "operations", "get", op_id)
    assert code == 0 and out["processed"] == 1
    code, out, _ = run(capsys, "operations", "cancel", op_id)
    assert code == 0 and out["state"] == "CANCELED"
    code, out, _ = run(capsys, "operations", "wait", op_id, "--timeout", "5")
    assert code == 2 and out["state"] == "CANCELED"
    code, out, err = run(capsys, "operations", "get", "nope")
    assert code == 1 and err == "error: NOT_FOUND: operation nope not found\n"


def test_schedules_commands(server, capsys):
    code, out, _ = run(capsys, "schedules", "create", "*/5 * * * *", "report", "--payload", '{"day": 1}',
                       "--timezone", "Europe/Paris", "--overlap", "skip", "--catchup-window", "10m")
    assert code == 0 and out["schedule_id"] == "sch-1" and out["state"] == "ACTIVE"
    assert (out["cron"], out["timezone"], out["payload"], out["overlap_policy"], out["catchup_window_s"]) == (
        "*/5 * * * *", "Europe/Paris", {"day": 1}, "skip", 600.0)
    assert out["next_fire_time"] == "2026-01-01T00:00:00+00:00"
    assert run(capsys, "schedules", "pause", "sch-1")[1]["state"] == "PAUSED"
    assert run(capsys, "schedules", "resume", "sch-1")[1]["state"] == "ACTIVE"
    assert run(capsys, "schedules", "get", "sch-1")[1]["task_type"] == "report"
    assert [s["schedule_id"] for s in run(capsys, "schedules", "list")[1]["schedules"]] == ["sch-1"]
    assert run(capsys, "schedules", "trigger", "sch-1")[1] == {"schedule_id": "sch-1", "task_id": None,
                                                              "skipped": True}
    assert run(capsys, "schedules", "delete", "sch-1")[1] == {"schedule_id": "sch-1", "deleted": True}
    code, _, err = run(capsys, "schedules", "get", "sch-1")
    assert code == 1 and err == "error: NOT_FOUND: schedule sch-1 not found\n"


@pytest.mark.parametrize("argv, fragment", [
    (["61 * * * *", "report"], "error: INVALID_ARGUMENT: cron: minute 61 is out of range 0..59"),
    (["* * * * *", "report", "--payload", "{x}"], "error: --payload is not valid JSON"),
    (["* * * * *", "report", "--catchup-window", "soon"], "error: INVALID_ARGUMENT: catchup_window: invalid"),
])
def test_bad_schedules_are_one_line_errors(server, capsys, argv, fragment):
    code, out, err = run(capsys, "schedules", "create", *argv)
    assert code == 1 and out is None and err.startswith(fragment) and err.count("\n") == 1


def test_unknown_overlap_policy_is_a_usage_error(server):
    with pytest.raises(SystemExit) as e:
        main(["schedules", "create", "* * * * *", "report", "--overlap", "queue"])
    assert e.value.code == 2


def test_breakers_commands(server, capsys):
    code, out, _ = run(capsys, "breakers", "list")
    [b] = out["breakers"]
    assert code == 0 and (b["task_type"], b["state"], b["crashes"]) == ("poison", "OPEN", 5)
    assert b["last_crashes"][0]["error_class"] == "SandboxCrashed"
    code, out, _ = run(capsys, "breakers", "reset", "poison")
    assert code == 0 and out["state"] == "CLOSED"
    code, _, err = run(capsys, "breakers", "reset", "poison")
    assert code == 1 and "NOT_FOUND" in err


def test_deploy_maps_rules_and_non_retryable_into_the_handler():
    described = {"module": "app", "handlers": [{
        "name": "sync", "non_retryable": ["BadInput"],
        "retry": {"max_attempts": 3, "base_s": 0.5, "factor": 2.0, "cap_s": 60.0, "jitter": True,
                  "non_retryable": ["BadInput"],
                  "rules": {"TimeoutError": {"non_retryable": False, "max_attempts": 10, "base_s": 5.0,
                                             "factor": None, "cap_s": None, "jitter": None},
                            "ValueError": {"non_retryable": True, "max_attempts": None, "base_s": None,
                                           "factor": None, "cap_s": None, "jitter": None}}},
        "timeouts": {"start_to_close_s": 60.0}}]}
    [h] = commands.handler_messages(described)
    assert isinstance(h, apps_pb2.Handler) and list(h.non_retryable) == ["BadInput"]
    assert list(h.retry.non_retryable) == ["BadInput"] and set(h.retry.rules) == {"TimeoutError", "ValueError"}
    timeout_rule, value_rule = h.retry.rules["TimeoutError"], h.retry.rules["ValueError"]
    assert not timeout_rule.non_retryable and timeout_rule.max_attempts == 10 and timeout_rule.base.seconds == 5
    # Unset rule fields stay unset: they inherit the policy's.
    assert not any(timeout_rule.HasField(f) for f in ("factor", "cap", "jitter"))
    assert value_rule.non_retryable and not value_rule.HasField("max_attempts")
    # An older describe output without retry.non_retryable still fills the Handler.
    old = {"handlers": [{"name": "a", "retry": {"max_attempts": 2}, "non_retryable": ["KeyError"]}]}
    [h] = commands.handler_messages(old)
    assert list(h.non_retryable) == ["KeyError"] and not h.retry.rules
