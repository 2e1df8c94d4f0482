"""The platform under test: LocalPlatform on the bench's own Postgres, the
no-op app deployed, and every process it started known by PID.

LocalPlatform has no option to use an external cluster yet; it does adopt a
server already running in <state_dir>/pg, which is where BenchPostgres puts
its cluster, and stop(keep_postgres=True) leaves that server to us.
"""

from __future__ import annotations

import asyncio
import pathlib

from loadtest import cpu
from loadtest.pgserver import BenchPostgres
from loadtest.procs import Registry, proc_start_ticks, stop_pid

APP_DIR = pathlib.Path(__file__).parent / "apps" / "noop"
SERVICE_NAMES = ("gateway", "dispatcher", "history", "hostagent")


class PlatformUnderTest:
    """Start/stop the mesh, deploy the no-op app, and name its processes."""

    def __init__(self, pg: BenchPostgres, registry: Registry, *, shards: int = 4,
                 overrides: dict | None = None):
        self.pg = pg
        self.registry = registry
        self.shards = shards
        self.overrides = overrides or {}
        self.platform = None
        self.seen: dict[int, int | None] = {}  # every service/sandbox pid observed -> start ticks

    @property
    def shard_dbs(self) -> list[str]:
        return [f"ratchet_shard_{i}" for i in range(self.shards)]

    async def start(self) -> None:
        """Start the services (blocking calls run in a thread) and register the stop."""
        from ratchet.cli.platform import LocalPlatform
        self.platform = LocalPlatform(self.pg.platform_dir, shards=self.shards, overrides=self.overrides,
                                      ready_timeout=90.0, log_level="WARNING")
        self.registry.add("platform services", self.stop)
        await asyncio.to_thread(self.platform.start)
        self._remember()
        if self.platform.cluster is not None and self.platform.cluster.port != self.pg.port:
            raise RuntimeError(f"the platform started its own Postgres on port {self.platform.cluster.port} "
                               f"instead of adopting the bench's on {self.pg.port}")

    def _remember(self) -> None:
        """Record every live service pid and its descendants, to stop them by PID later."""
        procs = cpu.all_procs()
        for pid in self.service_pids().values():
            for p in cpu._tree(pid, procs):
                self.seen.setdefault(p.pid, p.start)

    def stop(self) -> None:
        """Stop every service (Postgres stays: it is the bench's), then any straggler by PID."""
        if self.platform is not None:
            try:
                self._remember()
            except Exception:  # noqa: BLE001 - stopping must go on
                pass
            self.platform.stop(keep_postgres=True)
        for pid, ticks in self.seen.items():
            outcome = stop_pid(pid, ticks, grace=5.0)
            if outcome != "gone":
                print(f"[cleanup] platform process {pid}: {outcome}")

    def service_pids(self) -> dict[str, int]:
        """name -> pid of each running service (from the platform's endpoints)."""
        services = self.platform.endpoints["services"] if self.platform else {}
        return {name: info["pid"] for name, info in services.items() if info.get("pid")}

    def cpu_roots(self) -> dict[str, int]:
        """Process trees to charge CPU to: the four services and Postgres."""
        roots = dict(self.service_pids())
        pid = self.pg.cluster.postmaster_pid()
        if pid:
            roots["postgres"] = pid
        return roots

    @property
    def endpoints(self) -> dict:
        return self.platform.endpoints

    async def stop_hostagent(self) -> None:
        """Stop the workers so enqueued tasks stay put (a preloaded backlog)."""
        self._remember()
        await asyncio.to_thread(self.platform.stop_service, "hostagent")

    async def start_hostagent(self) -> int:
        """Start the workers again; returns the new host agent pid once it is SERVING."""
        pid = await asyncio.to_thread(self.platform.start_service, "hostagent")
        self.seen.setdefault(pid, proc_start_ticks(pid))
        return pid

    async def deploy_noop(self) -> str:
        """Deploy loadtest/apps/noop as app `default`; returns the deployment digest."""
        from ratchet.cli import bundle
        from ratchet.cli.commands import handler_messages
        from ratchet.client import Client

        def _deploy() -> str:
            data = bundle.package(APP_DIR)
            description = bundle.describe(data)
            with Client(self.endpoints["grpc"], self.endpoints["api_key"], timeout=60.0) as client:
                client.create_deployment(self.endpoints.get("app") or "default", data, bundle.digest(data),
                                         description.get("module") or "app", handler_messages(description))
            return bundle.digest(data)
        return await asyncio.to_thread(_deploy)
