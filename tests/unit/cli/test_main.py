"""The CLI's contract: failures are one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import pytest

from ratchet.api.apps.v1 import apps_pb2
from ratchet.cli import commands
from ratchet.cli.errors import CLIError
from ratchet.cli.main import main


@pytest.fixture(autouse=True)
def _no_platform(monkeypatch, tmp_path):
    for var in ("RATCHET_ENDPOINT", "RATCHET_API_KEY", "RATCHET_ADMIN_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)


def test_no_platform_is_one_line_and_exit_1(capsys):
    assert main(["tasks", "get", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no platform found") and err.count("\n") == 1


def test_unreachable_platform_names_the_code_and_a_hint(capsys, monkeypatch):
    monkeypatch.setenv("RATCHET_ENDPOINT", "127.0.0.1:1")
    monkeypatch.setenv("RATCHET_API_KEY", "rk_x")
    from ratchet.client import Unavailable, _Transport

    def refuse(*args, **kwargs):
        raise Unavailable("connection refused", "UNAVAILABLE")

    monkeypatch.setattr(_Transport, "call", refuse)
    assert main(["tasks", "get", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: UNAVAILABLE: connection refused") and "ratchet dev status" in err


def test_bad_payload_json(capsys, monkeypatch):
    monkeypatch.setenv("RATCHET_ENDPOINT", "127.0.0.1:1")
    monkeypatch.setenv("RATCHET_API_KEY", "rk_x")
    assert main(["tasks", "enqueue", "greet", "--payload", "{name: 1}"]) == 1
    assert "--payload is not valid JSON" in capsys.readouterr().err


def test_dev_status_without_platform(capsys, tmp_path):
    assert main(["dev", "status", "--state-dir", str(tmp_path / "none")]) == 1
    assert "start one with `ratchet dev up`" in capsys.readouterr().err


def test_dev_down_with_nothing_running_is_fine(capsys, tmp_path):
    assert main(["dev", "down", "--state-dir", str(tmp_path / "none")]) == 0
    assert "nothing was running" in capsys.readouterr().out


def test_usage_errors_exit_2():
    with pytest.raises(SystemExit) as e:
        main(["tasks", "enqueue"])
    assert e.value.code == 2


def test_describe_output_becomes_handlers():
    described = {"module": "app", "handlers": [{
        "name": "greet", "non_retryable": ["KeyError"],
        "retry": {"max_attempts": 3, "base_s": 0.5, "factor": 2.0, "cap_s": 60.0, "jitter": True},
        "timeouts": {"start_to_close_s": 600.0, "schedule_to_start_s": None, "schedule_to_close_s": None}}]}
    [h] = commands.handler_messages(described)
    assert isinstance(h, apps_pb2.Handler) and h.name == "greet" and list(h.non_retryable) == ["KeyError"]
    assert (h.retry.max_attempts, h.retry.base.ToMilliseconds(), h.retry.cap.seconds) == (3, 500, 60)
    assert h.timeouts.start_to_close.seconds == 600
    assert not h.timeouts.HasField("schedule_to_start")


def test_app_without_handlers_is_refused():
    with pytest.raises(CLIError, match="registers no handlers"):
        commands.handler_messages({"module": "app", "handlers": []})
