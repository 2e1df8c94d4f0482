"""`make run` as a new user meets it: a fresh copy of the tree in a folder
closed to everyone else (0700, as a container's /root or a mktemp -d folder
is), the platform started, a task run, and Ctrl-C stopping every process,
both while the demo runs and once the platform serves."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from ratchet.cli.procs import is_ours

REPO = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None,
                                reason="needs make and git")


def _copy_tree(dest: pathlib.Path) -> None:
    """The working tree's files as a fresh clone would have them (no .venv, no state)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, check=True, capture_output=True, timeout=60).stdout.split(b"\0")
    for name in filter(None, files):
        src = REPO / os.fsdecode(name)
        if src.is_file():
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))


def _alive(pid: int) -> bool:
    return is_ours(pid, None)   # alive and not a zombie


def _platform_pids(state: pathlib.Path) -> set[int]:
    """Every pid the platform recorded: supervisor, Postgres, each service."""
    pids: set[int] = set()
    try:
        ep = json.loads((state / "endpoints.json").read_text())
        sup = json.loads((state / "run" / "supervisor.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return pids
    pids.update(p for p in [sup.get("pid"), (ep.get("postgres") or {}).get("pid")] if p)
    pids.update(s["pid"] for s in (ep.get("services") or {}).values() if s.get("pid"))
    return pids


def _as_a_terminal_would() -> None:
    """In the child before exec: SIGINT at its default and no signal blocked, as a shell started
    from a terminal has them. The test process's own state is inherited otherwise (a blocked or
    ignored SIGINT left by an earlier test or a library thread), and a shell that starts with
    SIGINT ignored cannot trap it: Ctrl-C would be lost."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_until(tree: pathlib.Path, log: pathlib.Path, marker: str, deadline_s: float):
    """Start `make run` as a terminal would (own process group); wait for marker and a full platform."""
    proc = subprocess.Popen(["make", "run"], cwd=tree, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_as_a_terminal_would)
    deadline = time.monotonic() + deadline_s
    pids: set[int] = set()
    while time.monotonic() < deadline:
        text = log.read_text()
        pids = _platform_pids(tree / ".ratchet")
        if marker in text and len(pids) >= 7:   # supervisor, Postgres, five services
            return proc, pids
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(60)
    pytest.fail(f"make run never printed {marker!r} with the platform up:\n{log.read_text()[-3000:]}")


def _ctrl_c(proc: subprocess.Popen, pids: set[int], log: pathlib.Path) -> None:
    os.killpg(proc.pid, signal.SIGINT)   # what the terminal sends on Ctrl-C
    proc.wait(90)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    left = sorted(p for p in pids if _alive(p))
    assert not left, f"Ctrl-C left processes running: {left}\n{log.read_text()[-2000:]}"


def test_make_run_from_a_closed_folder_runs_a_task_and_ctrl_c_stops_everything(tmp_path):
    outer = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-run-"))   # 0700, like mktemp -d
    assert outer.stat().st_mode & 0o777 == 0o700
    tree = outer / "ratchet"
    tree.mkdir()
    relocated = None
    try:
        _copy_tree(tree)
        log = tmp_path / "run.log"
        # 1. Ctrl-C while the demo tasks run: the platform is up, the serving banner not yet shown.
        # (The marker is the demo's own first line: a Ctrl-C sent while bash starts the demo can
        # reach the child between fork and exec, where it is lost, and the run goes on.)
        proc, pids = _run_until(tree, log, "Enqueueing over the Python SDK:", deadline_s=420)
        pg = tree / ".ratchet" / "pg"
        relocated = pg.resolve() if pg.is_symlink() else None
        _ctrl_c(proc, pids, log)
        assert "Press Ctrl-C to stop." not in log.read_text()
        # 2. Again to the end: a REST task succeeds, then Ctrl-C while serving.
        proc, pids = _run_until(tree, log, "Press Ctrl-C to stop.", deadline_s=240)
        text = log.read_text()
        rest = [ln for ln in text.splitlines() if "Hello, curl!" in ln]
        assert rest and "SUCCEEDED" in rest[-1], text[-3000:]
        # The demo's workflow went through its sleep and its event.
        assert "the run is SUCCEEDED" in text and "send_welcome" in text, text[-3000:]
        _ctrl_c(proc, pids, log)
        assert "stopped the platform" in log.read_text()
    finally:
        if relocated is not None:
            shutil.rmtree(relocated.parent, ignore_errors=True)
        shutil.rmtree(outer, ignore_errors=True)
