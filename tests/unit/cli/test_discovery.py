"""Which platform a command talks to: --state-dir, then the environment, then ./.ratchet."""

from __future__ import annotations

import json

import pytest

from ratchet.cli.discovery import discover
from ratchet.cli.errors import CLIError


def _state(dir_, grpc="127.0.0.1:1111", api_key="rk_file", admin_key="rk_admin_file"):
    dir_.mkdir(parents=True, exist_ok=True)
    (dir_ / "endpoints.json").write_text(json.dumps({"grpc": grpc, "rest": "http://127.0.0.1:2",
                                                     "api_key": api_key, "admin_key": admin_key}))
    return dir_


ENV = {"RATCHET_ENDPOINT": "10.0.0.1:7233", "RATCHET_API_KEY": "rk_env", "RATCHET_ADMIN_KEY": "rk_admin_env"}


def test_explicit_state_dir_beats_environment_and_default(tmp_path):
    _state(tmp_path / ".ratchet", grpc="127.0.0.1:9999")
    chosen = _state(tmp_path / "mine", grpc="127.0.0.1:1234")
    t = discover(chosen, environ=ENV, cwd=tmp_path)
    assert (t.grpc, t.api_key, t.admin_key) == ("127.0.0.1:1234", "rk_file", "rk_admin_file")


def test_environment_beats_default_state_dir(tmp_path):
    _state(tmp_path / ".ratchet")
    t = discover(None, environ=ENV, cwd=tmp_path)
    assert (t.grpc, t.api_key, t.admin_key) == ("10.0.0.1:7233", "rk_env", "rk_admin_env")
    assert "RATCHET_ENDPOINT" in t.source


def test_default_state_dir_when_nothing_else(tmp_path):
    _state(tmp_path / ".ratchet", grpc="127.0.0.1:5555")
    assert discover(None, environ={}, cwd=tmp_path).grpc == "127.0.0.1:5555"


def test_nothing_found_says_how_to_fix(tmp_path):
    with pytest.raises(CLIError, match=r"--state-dir.*RATCHET_ENDPOINT.*ratchet dev up"):
        discover(None, environ={}, cwd=tmp_path)


def test_explicit_state_dir_without_platform(tmp_path):
    with pytest.raises(CLIError, match="no platform in"):
        discover(tmp_path / "nope", environ=ENV, cwd=tmp_path)


def test_endpoint_without_key_is_refused_when_a_key_is_needed(tmp_path):
    t = discover(None, environ={"RATCHET_ENDPOINT": "127.0.0.1:1"}, cwd=tmp_path)
    with pytest.raises(CLIError, match="RATCHET_API_KEY"):
        t.need_api_key()
    with pytest.raises(CLIError, match="RATCHET_ADMIN_KEY"):
        t.need_admin_key()


def test_corrupt_endpoints_file(tmp_path):
    (tmp_path / "endpoints.json").write_text("{not json")
    with pytest.raises(CLIError, match="not valid JSON"):
        discover(tmp_path, environ={})
