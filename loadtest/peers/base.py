"""What every peer adapter provides, and the machinery they share.

A peer runs the same no-op workload as Ratchet through its own public API:
the bench process is its producer (as the load generator is Ratchet's), one
worker process of the peer consumes, and every process involved is known by
PID so CPU can be charged to it and it can be stopped (or, in the recovery
cell, killed) exactly.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

from loadtest import cpu
from loadtest.peers.probe import ENV as PROBE_ENV
from loadtest.peers.probe import ProbeFile
from loadtest.procs import proc_start_ticks, stop_pid

REPO = pathlib.Path(__file__).resolve().parents[2]
PY = sys.executable


class PeerUnavailable(RuntimeError):
    """The peer's optional extra (or binary) is missing: the peer is skipped."""


class Peer:
    """One system under test besides Ratchet. Subclasses fill in the hooks."""

    name = "peer"
    label = ""                 # shown next to the name: "not durable", "SQLite", ...
    version = ""
    uses_postgres = True       # commits/WAL per task are meaningful
    supports_batch = False
    batch_with_delays = False  # send_batch takes a due time per task in one call
    concurrency = 8            # handlers at once in the one worker process
    config_note = ""           # how it is configured, for the report
    recovery_note = ""         # what bounds its recovery after a killed worker
    supports_workflows = False  # has the workflow cells' `steps` workflow (loadtest/workflows.py)
    # Worker settings for the workflow throughput cell (env overrides), as pairs.
    workflow_env: tuple[tuple[str, str], ...] = ()
    workflow_note = ""         # how its workflow cells are run, for the report

    def __init__(self, pg, registry, workdir: pathlib.Path):
        self.pg = pg
        self.registry = registry
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o777)
        self.probes = ProbeFile(str(self.workdir / "probe.log"))
        self.worker: subprocess.Popen | None = None
        self.worker_ticks: int | None = None
        self.probe_queries = 0     # our own read-only commits on the peer's database
        self.servers: dict[str, int] = {}  # extra server processes (redis, temporal) by label

    # -- hooks ----------------------------------------------------------------
    @classmethod
    def check(cls) -> None:
        """Raise PeerUnavailable with an install hint when the extra is missing."""

    @property
    def dbs(self) -> list[str]:
        """Databases of the bench cluster this peer writes to (for commits per task)."""
        return [f"peer_{self.name.replace('-', '_')}"]

    async def setup(self) -> None:
        """Fresh state: database, schema, servers; the worker is not running."""

    async def teardown(self) -> None:
        """Close producer connections and stop servers (the worker is already stopped)."""

    def worker_command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    async def send(self, n: int, *, probe: str | None = None, delay_s: float | None = None,
                   sleep_s: float | None = None) -> None:
        """Enqueue task n with the peer's single-enqueue API."""
        raise NotImplementedError

    async def send_batch(self, first: int, size: int, *, delays: list[float] | None = None,
                         probes: list[str] | None = None) -> None:
        """Enqueue `size` tasks in one call of the peer's batch API (when supports_batch)."""
        raise NotImplementedError

    async def remaining(self) -> int:
        """Tasks enqueued and not yet finished."""
        raise NotImplementedError

    async def start_run(self, n: int, payload: dict[str, Any]) -> None:
        """Start one run of the `steps` workflow (when supports_workflows) with the peer's client."""
        raise NotImplementedError

    async def reconnect(self) -> None:
        """Close and reopen the producer side, so its connections' statistics are flushed."""

    # -- shared machinery -------------------------------------------------------
    def payload(self, n: int, probe: str | None = None, sleep_s: float | None = None) -> dict[str, Any]:
        p: dict[str, Any] = {"n": n}
        if probe is not None:
            p["probe"] = probe
        if sleep_s:
            p["sleep_s"] = sleep_s
        return p

    def dsn(self, db: str | None = None) -> str:
        return self.pg.dsn(db or self.dbs[0])

    def url(self, db: str | None = None, scheme: str = "postgresql") -> str:
        """postgresql://ratchet@127.0.0.1:port/db, for libraries that want a URL."""
        dsn = self.dsn(db)
        return dsn if dsn.startswith(scheme) else scheme + dsn[dsn.index("://"):]

    def recreate_database(self) -> None:
        for db in self.dbs:
            self.pg.psql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            self.pg.create_database(db)

    def cpu_roots(self) -> dict[str, int]:
        roots = dict(self.servers)
        if self.worker is not None and self.worker.poll() is None:
            roots[f"{self.name}_worker"] = self.worker.pid
        pid = self.pg.cluster.postmaster_pid()
        if pid:
            roots["postgres"] = pid
        return roots

    def start_worker(self, env_overrides: dict[str, str] | None = None) -> int:
        """Start the peer's worker process (not waiting for it to be ready); env_overrides
        change its settings for one cell (the workflow cells' slots)."""
        if self.worker is not None and self.worker.poll() is None:
            return self.worker.pid
        args, env = self.worker_command()
        env = {**env, **(env_overrides or {})}
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", PROBE_ENV: self.probes.path,
                    "PYTHONPATH": str(REPO), **env}
        # The child has its own copy of the log's descriptor: ours closes once it is started.
        with open(self.workdir / "worker.log", "ab") as log:
            self.worker = self.registry.popen(f"{self.name} worker", args, env=full_env, stdout=log,
                                              stderr=subprocess.STDOUT, cwd=str(self.workdir),
                                              start_new_session=True)
        self.worker_ticks = proc_start_ticks(self.worker.pid)
        return self.worker.pid

    def stop_worker(self, grace: float = 15.0) -> None:
        """SIGTERM (graceful shutdown as the peer documents), SIGKILL after grace."""
        if self.worker is None:
            return
        if self.worker.poll() is None:
            stop_pid(self.worker.pid, self.worker_ticks, grace=grace)
        self._reap_tree()

    def kill_worker(self) -> None:
        """SIGKILL the worker and everything under it, as a crashed machine would."""
        if self.worker is None or self.worker.poll() is not None:
            return
        procs = cpu.all_procs()
        tree = cpu._tree(self.worker.pid, procs)
        for p in tree:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reap_tree()

    def _reap_tree(self) -> None:
        try:
            self.worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        # The worker runs in its own session: anything left of it (a child) goes by its group.
        try:
            os.killpg(self.worker.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.worker = None

    def worker_log_tail(self, n: int = 1500) -> str:
        try:
            return (self.workdir / "worker.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    async def wait_ready(self, timeout: float = 60.0) -> float:
        """Enqueue a probe and wait for its handler to start: the worker is consuming."""
        t0 = time.monotonic()
        key = f"ready-{time.time_ns()}"
        await self.send(0, probe=key)
        while time.monotonic() - t0 < timeout:
            if self.worker is not None and self.worker.poll() is not None:
                raise RuntimeError(f"{self.name} worker exited ({self.worker.returncode}): "
                                   f"{self.worker_log_tail()}")
            if key in self.probes.read_new():
                return time.monotonic() - t0
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.name} worker ran no task within {timeout:g}s: {self.worker_log_tail()}")

    def start_server(self, label: str, args: list[str], **kwargs) -> subprocess.Popen:
        with open(self.workdir / f"{label}.log", "ab") as log:
            proc = self.registry.popen(f"{self.name} {label}", args, stdout=log, stderr=subprocess.STDOUT,
                                       cwd=str(self.workdir), **kwargs)
        self.servers[label] = proc.pid
        return proc

    def stop_servers(self) -> None:
        for label, pid in list(self.servers.items()):
            outcome = stop_pid(pid, proc_start_ticks(pid), grace=10.0)
            if outcome == "killed":
                print(f"[cleanup] {self.name} {label} {pid}: killed")
            self.servers.pop(label, None)

    def remove_workdir(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def free_port() -> int:
    """A free listening port below the ephemeral range (ratchet.libs.pg.cluster.free_port)."""
    from ratchet.libs.pg.cluster import free_port as _free_port
    return _free_port()


async def wait_port(port: int, timeout: float = 30.0) -> None:
    """Until something accepts on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
            w.close()
            return
        except (TimeoutError, OSError):
            await asyncio.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g}s")
