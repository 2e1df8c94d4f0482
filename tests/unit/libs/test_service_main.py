"""The one start-up every service shares (libs/rpc/service_main)."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import subprocess
import sys

import pytest

from ratchet.libs.config import ConfigError, field
from ratchet.libs.rpc.service_main import ServiceMain

ROOT = pathlib.Path(__file__).resolve().parents[3]


@dataclasses.dataclass(frozen=True)
class Config:
    log_level: str = field("INFO", doc="log level")


class Server:
    def __init__(self, config, fail: BaseException | None = None):
        self.events: list[str] = []
        self.fail = fail

    async def start(self) -> None:
        self.events.append("start")
        if self.fail is not None:
            raise self.fail

    async def stop(self) -> None:
        self.events.append("stop")


def _refuse(path):
    raise ConfigError("config field 'dsn' is required")


def test_a_bad_config_exits_2_and_says_why(capsys):
    svc = ServiceMain("demo", "a demo", Config, "RATCHET_DEMO_", _refuse, Server)
    assert svc.run([]) == 2
    assert "demo: config field 'dsn' is required" in capsys.readouterr().err


def test_a_fatal_error_at_start_exits_1_with_the_operators_hint(capsys, monkeypatch):
    svc = ServiceMain("demo", "a demo", Config, "RATCHET_DEMO_", lambda p: Config(),
                      lambda c: Server(c, fail=OSError("connection refused")), fatal=(OSError,),
                      fatal_hint="cannot use its database (config field 'dsn')")
    assert svc.run([]) == 1
    assert "demo: cannot use its database (config field 'dsn'): OSError: connection refused" in capsys.readouterr().err


def test_a_bug_at_start_is_not_swallowed():
    svc = ServiceMain("demo", "a demo", Config, "RATCHET_DEMO_", lambda p: Config(),
                      lambda c: Server(c, fail=KeyError("bug")), fatal=(OSError,))
    with pytest.raises(KeyError):
        svc.run([])


async def test_serve_starts_then_stops_the_server_once_stop_is_set():
    made = []
    svc = ServiceMain("demo", "a demo", Config, "RATCHET_DEMO_", lambda p: Config(),
                      lambda c: made.append(Server(c)) or made[-1])
    stop = asyncio.Event()
    task = asyncio.ensure_future(svc._serve(Config(), stop))
    await asyncio.sleep(0.01)
    assert made[0].events == ["start"]
    stop.set()
    await asyncio.wait_for(task, 5)
    assert made[0].events == ["start", "stop"]


def test_help_lists_the_config_fields_and_their_env_prefix():
    text = ServiceMain("demo", "a demo", Config, "RATCHET_DEMO_", lambda p: Config(), Server).parser().format_help()
    assert "RATCHET_DEMO_<FIELD>" in text and "log_level" in text


def test_every_service_starts_through_it():
    # (a fresh interpreter: each __main__ must import grpc_env before grpc loads)
    names = sorted(p.parent.name for p in (ROOT / "services").glob("*/__main__.py"))
    code = ("import importlib, sys, ratchet.libs.rpc.grpc_env; from ratchet.libs.rpc.service_main import ServiceMain; "
            "mods = [importlib.import_module(f'ratchet.services.{n}.__main__') for n in sys.argv[1:]]; "
            "print([type(m.SERVICE) is ServiceMain and m.SERVICE.name == n for m, n in zip(mods, sys.argv[1:])])")
    out = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([True] * len(names)) and len(names) == 5
