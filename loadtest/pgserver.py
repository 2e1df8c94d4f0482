"""The benchmark's own Postgres cluster: durable settings, started in a temp
folder, its effective configuration recorded, stopped by its postmaster PID.
The same cluster serves the physical reference and the platform."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import time

import asyncpg

from loadtest.procs import Registry, proc_start_ticks, stop_pid
from ratchet.libs.pg.cluster import LocalCluster

# Durability stays on: the numbers must describe what a customer would run.
BENCH_SETTINGS = {
    "synchronous_commit": "on",
    "fsync": "on",
    "full_page_writes": "on",
    "max_connections": "400",
    "log_min_messages": "warning",
    # Per-statement cost of the platform's SQL during the drain (a few % overhead
    # on every cell alike, the reference included).
    "shared_preload_libraries": "'pg_stat_statements'",
    "pg_stat_statements.track": "top",
    "pg_stat_statements.max": "2000",
}

# The settings that move commit and claim throughput, printed with every run.
REPORTED_SETTINGS = (
    "server_version", "synchronous_commit", "fsync", "full_page_writes", "wal_compression", "wal_sync_method",
    "wal_level", "commit_delay", "commit_siblings", "wal_writer_delay", "wal_buffers",
    "shared_buffers", "max_connections", "max_wal_size", "checkpoint_timeout",
    "autovacuum", "autovacuum_naptime", "work_mem", "data_checksums", "jit", "shared_preload_libraries",
)


class BenchPostgres:
    """Start/stop one LocalCluster for a whole bench run."""

    def __init__(self, registry: Registry, *, keep: bool = False, root: str | None = None):
        self.registry = registry
        self.keep = keep
        self.root = pathlib.Path(root or tempfile.mkdtemp(prefix="ratchet-bench-pg-"))
        os.chmod(self.root, 0o755)  # Postgres runs as an unprivileged user when we are root.
        # The data folder sits where LocalPlatform(state_dir=platform_dir) keeps
        # its cluster, so the platform adopts this running server instead of
        # starting its own: reference and platform share one Postgres.
        self.platform_dir = self.root / "platform"
        self.cluster = LocalCluster(self.platform_dir / "pg", settings=BENCH_SETTINGS)
        self.settings: dict[str, str] = {}

    @property
    def port(self) -> int:
        return self.cluster.port

    def dsn(self, dbname: str = "postgres") -> str:
        """Over the Unix socket, for every client alike: the platform (LocalPlatform's default),
        the reference (pgbench -h socket_dir) and every Postgres-backed peer."""
        return self.cluster.socket_dsn(dbname)

    @property
    def socket_dir(self) -> str:
        return str(self.cluster.data_dir)

    def start(self) -> None:
        """initdb, start, register the stop, and read back the effective settings."""
        self.registry.add("bench postgres folder", self._remove_folder)
        self.cluster.init()
        self.cluster.start()
        pid = self.cluster.postmaster_pid()
        ticks = proc_start_ticks(pid) if pid else None
        self.registry.add(f"bench postgres (postmaster {pid})", lambda: self._stop(pid, ticks))
        self.settings = self.read_settings()

    def _stop(self, pid: int | None, ticks: int | None) -> None:
        self.cluster.stop(mode="fast", timeout=30)
        if pid is not None:
            outcome = stop_pid(pid, ticks, grace=10.0)
            if outcome != "gone":
                print(f"[cleanup] postmaster {pid}: {outcome}")

    def _remove_folder(self) -> None:
        if self.keep:
            print(f"[cleanup] kept Postgres folder {self.root}")
            return
        shutil.rmtree(self.root, ignore_errors=True)

    def read_settings(self) -> dict[str, str]:
        """The effective values (with units) of REPORTED_SETTINGS."""
        names = ",".join(f"'{n}'" for n in REPORTED_SETTINGS)
        out = self.cluster.psql(
            f"SELECT name || '=' || current_setting(name) FROM pg_settings WHERE name IN ({names}) ORDER BY name")
        settings = {}
        for line in out.splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                settings[k] = v
        return settings

    def describe(self) -> str:
        """Printable lines: where the cluster runs and its effective settings."""
        lines = [f"bench Postgres: {self.cluster.bindir} port {self.port} data {self.cluster.data_dir}"]
        lines += [f"  {k} = {v}" for k, v in self.settings.items()]
        return "\n".join(lines)

    def pgbench_path(self) -> str:
        """pgbench from the cluster's bindir, else /usr/bin/pgbench."""
        cand = self.cluster.bindir / "pgbench"
        if cand.exists():
            return str(cand)
        found = shutil.which("pgbench")
        if not found:
            raise RuntimeError("pgbench not found: install the Debian package postgresql-contrib or postgresql-15")
        return found

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        return self.cluster.psql(sql, dbname)

    def create_database(self, name: str) -> None:
        self.cluster.create_database(name)

    async def quiesce(self, timeout_s: float = 300.0) -> float:
        """VACUUM ANALYZE every database, then CHECKPOINT; returns the seconds it took.

        Run between systems: the rows one system updated or deleted are otherwise
        vacuumed by autovacuum in the middle of the next system's cells (on 2 cores
        a VACUUM of 100k dead rows takes a core for seconds), and its dirty pages are
        flushed by the next checkpoint; either lands on whoever runs next.
        """
        t0 = time.monotonic()
        admin = await asyncpg.connect(self.dsn("postgres"), timeout=10)
        try:
            names = [r["datname"] for r in await admin.fetch(
                "SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname", timeout=10)]
            for name in names:
                conn = await asyncpg.connect(self.dsn(name), timeout=10)
                try:
                    await conn.execute("VACUUM (ANALYZE)", timeout=max(1.0, timeout_s - (time.monotonic() - t0)))
                finally:
                    await conn.close(timeout=5)
            await admin.execute("CHECKPOINT", timeout=max(1.0, timeout_s - (time.monotonic() - t0)))
        finally:
            await admin.close(timeout=5)
        return time.monotonic() - t0
