"""The nemesis scheduler and the nemeses that need no platform: a seed gives
one schedule; pauses are always resumed; every action is in the history;
Postgres backends are terminated; a crashed cluster comes back; clock skew
moves a child's wall clock at run time."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from itertools import pairwise

import pytest

from ratchet.libs.pg.cluster import LocalCluster
from tests.fault.harness.nemesis import (
    CrashPostgres,
    KillService,
    NemesisRunner,
    PauseService,
    TerminateBackends,
    make_schedule,
    pid_alive,
)
from tests.fault.harness.platform import FaultPlatform, faketime_library
from tests.fault.harness.recorder import Recorder


def proc_state(pid: int) -> str:
    return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


class FakePlatform:
    """Just enough platform for process nemeses: one 'service' that is a sleep."""

    def __init__(self):
        self.proc = subprocess.Popen(["sleep", "60"])
        self.healed = 0

    def service_pid(self, name):
        return self.proc.pid if self.proc.poll() is None else None

    def ensure_serving(self, name):
        if self.proc.poll() is not None:
            self.proc = subprocess.Popen(["sleep", "60"])

    def heal_everything(self):
        self.healed += 1
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self):
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def env(tmp_path):
    e = types.SimpleNamespace(platform=FakePlatform(), recorder=Recorder(tmp_path / "history.jsonl"))
    yield e
    e.platform.close()


def events(env) -> list[dict]:
    return [json.loads(x) for x in env.recorder.path.read_text().splitlines()]


def test_a_seed_gives_one_schedule_bounded_in_time():
    names = ["kill-history", "pause-dispatcher", "crash-postgres"]
    a = make_schedule(42, names, 30.0, (1, 3), (1, 4))
    assert a == make_schedule(42, names, 30.0, (1, 3), (1, 4))
    assert a != make_schedule(43, names, 30.0, (1, 3), (1, 4))
    assert all(s.at_s < 30.0 and 1 <= s.hold_s <= 4 for s in a)
    assert all(b.at_s >= x.at_s + x.hold_s for x, b in pairwise(a)), "one fault at a time"
    assert make_schedule(1, [], 30.0) == []


def test_pause_is_resumed_and_logged(env):
    pid = env.platform.proc.pid
    runner = NemesisRunner(env, [PauseService("history")], make_schedule(1, ["pause-history"], 0.5, (0.1, 0.1),
                                                                           (0.6, 0.6)), 1).start()
    deadline = time.monotonic() + 5
    while proc_state(pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc_state(pid) == "T", "SIGSTOP delivered"
    runner.stop()
    assert proc_state(pid) in ("S", "R")
    fs = [(e["f"], e["type"]) for e in events(env)]
    assert fs == [("pause-history", "invoke"), ("pause-history", "info"), ("pause-history:healed", "info"),
                  ("heal", "info")]
    assert events(env)[1]["value"]["injected"]["pid"] == pid


def test_stop_mid_fault_still_heals(env):
    pid = env.platform.proc.pid
    runner = NemesisRunner(env, [PauseService("history")], make_schedule(2, ["pause-history"], 0.3, (0.05, 0.05),
                                                                           (30, 30)), 2).start()
    deadline = time.monotonic() + 5
    while proc_state(pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    runner.stop()
    assert time.monotonic() - t0 < 5, "a held fault is cut short by stop()"
    assert proc_state(pid) in ("S", "R") and env.platform.healed == 1
    assert events(env)[-1]["f"] == "heal"


def test_kill_then_heal_restarts(env):
    old = env.platform.proc.pid
    runner = NemesisRunner(env, [KillService("history")], make_schedule(3, ["kill-history"], 0.2, (0.05, 0.05),
                                                                          (0.2, 0.2)), 3).start()
    assert runner.wait(10)
    runner.stop()
    assert env.platform.proc.pid != old and env.platform.proc.poll() is None
    injected = next(e for e in events(env) if e["f"] == "kill-history" and e["type"] == "info")
    assert injected["value"]["injected"] == {"target": "history", "pid": old, "signalled": True}


def test_a_service_the_platform_does_not_run_is_skipped(env):
    from tests.fault.harness.nemesis import describe

    env.platform.service_names = lambda: ("history", "gateway", "cron", "dispatcher", "hostagent")
    ok, skipped = describe([KillService("cron"), KillService("cron2"), PauseService("cron2")], env)
    assert [n.name for n in ok] == ["kill-cron"]
    assert set(skipped) == {"kill-cron2", "pause-cron2"} and "no cron2 process" in skipped["kill-cron2"]


def test_a_broken_nemesis_is_reported_and_still_heals(env):
    class Broken(PauseService):
        def inject(self, env, rng):
            raise RuntimeError("boom")

    runner = NemesisRunner(env, [Broken("history")], make_schedule(4, ["pause-history"], 0.2, (0.05, 0.05),
                                                                     (0.1, 0.1)), 4).start()
    assert runner.wait(10)
    runner.stop()
    assert runner.errors == ["RuntimeError: boom"]
    assert env.platform.healed == 1 and events(env)[-1]["f"] == "heal"


def test_terminate_backends(pg_cluster, tmp_path):
    import asyncio

    import asyncpg

    pg_cluster.create_database("ratchet_nemesis_t")
    fake = types.SimpleNamespace(cluster=pg_cluster)
    fake.backend_pids = lambda: FaultPlatform.backend_pids(fake)
    fake.terminate_backends = lambda pids: FaultPlatform.terminate_backends(fake, pids)

    async def scenario():
        conns = [await asyncpg.connect(pg_cluster.dsn("ratchet_nemesis_t"), timeout=5) for _ in range(3)]
        env = types.SimpleNamespace(platform=fake, recorder=Recorder(tmp_path / "h.jsonl"))
        info = await asyncio.to_thread(TerminateBackends(2).inject, env, __import__("random").Random(1))
        assert info["terminated"] == 2 and len(info["pids"]) == 2
        alive = 0
        for c in conns:
            try:
                await c.fetchval("SELECT 1", timeout=5)
                alive += 1
            except Exception:  # noqa: BLE001 - any error means the backend is gone
                pass
        assert alive == 1
        for c in conns:
            c.terminate()

    asyncio.run(scenario())


def test_crash_postgres_and_restart():
    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-nemesis-pg-"))
    os.chmod(root, 0o755)  # Postgres runs unprivileged when we are root: it must reach its folder
    cluster = LocalCluster(root / "pg", settings={"fsync": "off"})
    cluster.ensure_started()
    try:
        cluster.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        env = types.SimpleNamespace(platform=types.SimpleNamespace(cluster=cluster), recorder=None)
        nem = CrashPostgres()
        info = nem.inject(env, None)
        assert info["pid"] and info["dead"] and not pid_alive(info["pid"])
        nem.heal(env, info)
        assert cluster.psql("SELECT x FROM t").strip() == "1", "committed rows survive the crash"
    finally:
        cluster.stop(mode="immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(faketime_library() is None, reason="libfaketime not installed (Debian package faketime)")
def test_clock_skew_moves_a_child_wall_clock_at_run_time(tmp_path):
    fp = FaultPlatform(tmp_path / "p", shards=1, skew_services=("history",))
    assert fp.skew_unavailable("history") is None and fp.skew_unavailable("gateway")
    fp.skew("history", 3600)
    code = ("import time,sys\nprint(round(time.time()), flush=True)\nsys.stdin.readline()\n"
            "time.sleep(1.2)\nprint(round(time.time()), flush=True)\nt0=time.monotonic();time.sleep(0.2)\n"
            "print(round(time.monotonic()-t0,1), flush=True)")
    child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **fp._service_env("history")},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = int(child.stdout.readline())
        assert abs(first - time.time() - 3600) < 5
        fp.skew("history", -600)
        child.stdin.write("\n")
        child.stdin.flush()
        second = int(child.stdout.readline())
        assert abs(second - time.time() + 600) < 5, "the new offset applies without a restart"
        assert float(child.stdout.readline()) == 0.2, "the monotonic clock is not skewed"
    finally:
        child.kill()
        child.wait(10)
