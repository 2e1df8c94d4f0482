"""Gates hold a named point in another process until the test releases it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ratchet.libs import gates
from ratchet.libs.gates.control import GateNotReached, Gates

SERVER = [sys.executable, "-m", "tests.fault.gates.gate_server"]


def start(g: Gates | None, mode: str, name: str, n: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != gates.ENV}
    if g is not None:
        env.update(g.env)
    proc = subprocess.Popen(SERVER + [mode, name, str(n)], stdout=subprocess.PIPE, text=True, env=env,
                            cwd=os.getcwd())
    assert proc.stdout.readline().strip() == "ready"
    return proc


def finish(proc: subprocess.Popen) -> list[str]:
    # read() and not communicate(timeout=...): the latter bypasses the text buffer readline() filled
    out = proc.stdout.read()
    proc.wait(timeout=30)
    return [line.split()[0] + (" " + line.split()[1] if line.split()[0] != "ticker" else "") for line in
            out.splitlines()]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_armed_gate_holds_until_released(tmp_path, mode):
    g = Gates(tmp_path)
    gate = g.arm("history.complete.before_commit")
    proc = start(g, mode, "history.complete.before_commit", 2)
    hit = gate.wait_reached(timeout=10)
    assert hit["pid"] == proc.pid
    time.sleep(0.6)  # held: nothing passed yet (sync) / the other caller and the ticker went on (async)
    assert proc.poll() is None
    gate.release()
    lines = finish(proc)
    assert proc.returncode == 0
    assert sorted(line for line in lines if line.startswith("passed")) == ["passed 0", "passed 1"]
    if mode == "async":  # the loop kept running while one coroutine was held
        assert lines.index("ticker") < max(i for i, line in enumerate(lines) if line.startswith("passed"))
    g.verify()


def test_unarmed_and_disabled_gates_pass_through(tmp_path):
    g = Gates(tmp_path)
    for proc in (start(g, "sync", "a.b", 3), start(None, "async", "a.b", 3)):
        assert [x for x in finish(proc) if x.startswith("passed")] == ["passed 0", "passed 1", "passed 2"]


def test_only_the_armed_number_of_hits_is_held(tmp_path):
    g = Gates(tmp_path)
    gate = g.arm("t.hits", hits=1)
    proc = start(g, "async", "t.hits", 3)
    gate.wait_reached()
    deadline = time.monotonic() + 5
    while len(gate.hits_reached()) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.release()
    assert sum(1 for x in finish(proc) if x.startswith("passed")) == 3


def test_release_crash_kills_the_process_at_the_gate(tmp_path):
    g = Gates(tmp_path)
    gate = g.arm("t.crash")
    proc = start(g, "sync", "t.crash", 1)
    gate.wait_reached()
    gate.release(action="crash")
    lines = finish(proc)
    assert proc.returncode == 137 and not any(x.startswith("passed") for x in lines)


def test_release_raise_raises_at_the_gate(tmp_path):
    g = Gates(tmp_path)
    gate = g.arm("t.raise")
    proc = start(g, "async", "t.raise", 1)
    gate.wait_reached()
    gate.release(action="raise")
    assert "raised 0" in finish(proc)


def test_held_gate_times_out_instead_of_wedging_the_server(tmp_path):
    g = Gates(tmp_path)
    gate = g.arm("t.timeout", timeout_s=0.3)
    proc = start(g, "sync", "t.timeout", 1)
    assert "passed 0" in finish(proc)
    assert gate.timed_out() == [1]


def test_armed_gate_never_reached_fails_verification(tmp_path):
    g = Gates(tmp_path)
    g.arm("t.never")
    with pytest.raises(GateNotReached, match=r"t\.never"):
        g.verify()
    with pytest.raises(GateNotReached):
        g.arm("t.never2").wait_reached(timeout=0.1)


def test_gates_fixture_fails_a_test_whose_gate_was_never_reached(pytester_gates):
    result = pytester_gates
    assert "armed gates never reached: t.forgotten" in result


def test_gate_names_are_checked(tmp_path):
    with pytest.raises(ValueError):
        Gates(tmp_path).arm("../etc/passwd")


def test_idle_reach_is_cheap(monkeypatch):
    monkeypatch.delenv(gates.ENV, raising=False)
    gates.gates_dir.cache_clear()  # read again, without the folder
    try:
        start_ = time.perf_counter()
        for _ in range(100_000):
            gates.reach("history.complete.before_commit")
        per_call = (time.perf_counter() - start_) / 100_000
    finally:
        gates.gates_dir.cache_clear()  # the next reader sees the real environment
    assert per_call < 5e-6, f"{per_call * 1e6:.2f} us per idle reach"


@pytest.fixture
def pytester_gates(tmp_path):
    """Run a tiny test module that arms a gate and never reaches it, through the
    shared `gates` fixture, and return its output."""
    (tmp_path / "conftest.py").write_text("pytest_plugins = ['tests.fault.gates.fixture']\n")
    (tmp_path / "test_forgotten.py").write_text(
        "def test_forgets(gates):\n    gates.arm('t.forgotten')\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    assert res.returncode != 0
    return res.stdout + res.stderr
