"""The local platform with the fault hooks the nemeses need.

FaultPlatform is ratchet.cli.platform.LocalPlatform plus:
* fault proxies (ratchet.libs.faultproxy) spliced into chosen links:
  ``history-pg`` (history -> its shard databases), ``dispatcher-history``,
  ``gateway-history`` and ``hostagent-dispatcher``;
* per-service clock skew with libfaketime (wall clock only; Postgres and the
  sandboxes keep the true clock), changeable at run time;
* the host agent's sandboxes (ListSandboxes), the Postgres backends, and a
  ``heal_everything`` that undoes any fault left behind;
* more than one cron process (``cron_processes=2`` adds ``cron2``: the same
  config and database on its own port, supervised like the others; the design
  lets several run at once). The gateway's schedule API talks to ``cron``;
* a mutant history (``mutation=NAME``): history with one guard removed
  (tests/fault/mutants), for the checker's mutation runs, restarted as such;
* a rival history (``start_rival_history``): a second history process on the
  same shard databases (mutant too, in a mutation run), not supervised, until
  ``stop_rival_history``; its timer loops race the first one's.
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
import signal

from ratchet.cli.platform import SERVICES, LocalPlatform
from ratchet.libs.faultproxy import ProxyThread
from ratchet.libs.pg.cluster import free_port

from .nemesis import restart_postgres

FAKETIME_GLOBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                  "/usr/lib/*/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1")
LINKS = ("history-pg", "dispatcher-history", "gateway-history", "hostagent-dispatcher")
RIVAL = "history2"  # the rival history process (RivalHistory): same config and shards, its own port
REPO = pathlib.Path(__file__).resolve().parents[3]  # on a mutant history's path: it runs tests.fault.mutants


def faketime_library() -> str | None:
    """The libfaketime (multi-threaded) shared object, if the faketime package is installed."""
    for pattern in FAKETIME_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


class FaultPlatform(LocalPlatform):
    """A LocalPlatform whose links and clocks the nemeses can break."""

    @property
    def pg_over_socket(self) -> bool:
        """The history-pg link splices a TCP proxy into the shard DSNs (configs below): TCP then."""
        return "history-pg" not in self.link_names

    def __init__(self, state_dir, shards: int = 2, overrides: dict | None = None, *,
                 links: tuple[str, ...] = (), skew_services: tuple[str, ...] = (), cron_processes: int = 1,
                 mutation: str | None = None, **kwargs):
        # RATCHET_FAULT_SERVICE_MODULES='{"gateway": "pkg.module"}' runs a stand-in for a service
        # (a local debugging aid; the default runs the real services).
        modules = json.loads(os.environ.get("RATCHET_FAULT_SERVICE_MODULES") or "{}")
        if modules:
            kwargs["service_modules"] = {**modules, **kwargs.get("service_modules", {})}
        super().__init__(state_dir, shards=shards, overrides=overrides, **kwargs)
        unknown = set(links) - set(LINKS)
        if unknown:
            raise ValueError(f"unknown links {sorted(unknown)}; known: {LINKS}")
        self.link_names = links
        self.proxies = ProxyThread().start() if links else None
        self.links = {}
        self.skew_dir = self.dir / "skew"
        self.skew_services = tuple(skew_services)
        self._faketime = faketime_library()
        self.skew_dir.mkdir(parents=True, exist_ok=True)
        for name in self.skew_services:
            self.skew(name, 0)
        if not 1 <= cron_processes <= 9:
            raise ValueError("cron_processes must be 1..9")
        self.extra_services = tuple(f"cron{i}" for i in range(2, cron_processes + 1))
        for name in self.extra_services:
            self.modules[name] = self.modules["cron"]
        self.mutation = mutation
        if mutation is not None:
            from tests.fault.mutants.mutations import mutation as known

            known(mutation)  # an unknown name fails here, not in the started process (its log)
            self.modules["history"] = "tests.fault.mutants.history"
        self.modules[RIVAL] = self.modules["history"]

    def service_names(self) -> tuple[str, ...]:
        """Every service process this platform runs, the extra cron processes included."""
        return (*SERVICES, *self.extra_services)

    def start(self) -> FaultPlatform:
        super().start()
        try:
            for name in self.extra_services:
                self.start_service(name)
        except BaseException:
            self.stop()
            raise
        return self

    # -- splicing proxies into the generated configs -------------------------------
    def _link(self, name: str, port: int):
        link = self.links.get(name)
        if link is None:
            link = self.proxies.add(name, "127.0.0.1", port)
            self.links[name] = link
        elif link.upstream[1] != port:
            link.upstream = ("127.0.0.1", port)
        return link

    def configs(self) -> dict[str, dict]:
        configs = super().configs()
        for name in self.extra_services:  # another cron process: same database, its own port
            self.ports.setdefault(name, free_port(set(self.ports.values())))
            configs[name] = {**configs["cron"], "grpc_port": self.ports[name]}
        if "history-pg" in self.link_names:
            port = self._link("history-pg", self.cluster.port).port
            shards = configs["history"]["shards"]
            configs["history"]["shards"] = {k: dsn.replace(f":{self.cluster.port}/", f":{port}/")
                                            for k, dsn in shards.items()}
        for link, (svc, field, target) in {"dispatcher-history": ("dispatcher", "history_target", "history"),
                                           "gateway-history": ("gateway", "history_target", "history"),
                                           "hostagent-dispatcher": ("hostagent", "dispatcher_target", "dispatcher"),
                                           }.items():
            if link in self.link_names:
                configs[svc][field] = f"127.0.0.1:{self._link(link, self.ports[target]).port}"
        # The rival history: the same shards (through the same link), its own port.
        self.ports.setdefault(RIVAL, free_port(set(self.ports.values())))
        configs[RIVAL] = {**configs["history"], "grpc_port": self.ports[RIVAL]}
        return configs

    # -- per-service environment: clock skew ---------------------------------------
    def skew_unavailable(self, service: str) -> str | None:
        if self._faketime is None:
            return "libfaketime is not installed (Debian package faketime): clock-skew nemeses skipped"
        if service not in self.skew_services:
            return f"{service} was not started under libfaketime (skew_services={self.skew_services})"
        return None

    def skew(self, service: str, offset_s: float) -> None:
        """Set the service's wall-clock offset; it takes effect at once, no restart."""
        path = self.skew_dir / f"{service}.rc"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{offset_s:+.3f}s\n")
        os.replace(tmp, path)  # faketime must never read a half-written file

    def _service_env(self, name: str) -> dict[str, str]:
        out: dict[str, str] = {}
        paths = []
        if name in ("history", RIVAL) and self.mutation is not None:
            from tests.fault.mutants.mutations import ENV

            out[ENV] = self.mutation
            paths.append(str(REPO))
        if name in self.skew_services and self._faketime is not None:
            paths.insert(0, str(pathlib.Path(__file__).resolve().parent / "faketime_site"))
            out.update({"LD_PRELOAD": self._faketime, "FAKETIME_TIMESTAMP_FILE": str(self.skew_dir / f"{name}.rc"),
                        "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
        if paths:
            out["PYTHONPATH"] = os.pathsep.join(p for p in (*paths, self.env.get("PYTHONPATH", "")) if p)
        return out

    def _spawn(self, name: str):
        base = self.env
        extra = self._service_env(name)
        if extra:
            self.env = {**base, **extra}
        try:
            return super()._spawn(name)
        finally:
            self.env = base

    # -- what the nemeses aim at ---------------------------------------------------
    def sandboxes(self) -> list[dict]:
        """Every live sandbox of the host agent: {sandbox_id, pid, task_id, attempt}."""
        from ratchet.internal.hostagent.v1 import hostagent_pb2, hostagent_pb2_grpc
        from ratchet.libs.rpc.client import sync_channel

        if self.service_pid("hostagent") is None:
            return []
        channel = sync_channel(self.grpc_address("hostagent"))
        try:
            stub = hostagent_pb2_grpc.HostAgentServiceStub(channel)
            resp = stub.ListSandboxes(hostagent_pb2.ListSandboxesRequest(), timeout=3)
        except Exception:  # noqa: BLE001 - the agent may be paused or restarting: no target this time
            return []
        finally:
            channel.close()
        return [{"sandbox_id": s.sandbox_id, "pid": s.pid, "task_id": s.task_id, "attempt": s.attempt}
                for s in resp.sandboxes if s.pid > 0]

    def backend_pids(self) -> list[int]:
        """Postgres client backends serving the platform's databases."""
        rows = _pg(self.cluster, "SELECT pid FROM pg_stat_activity WHERE datname LIKE 'ratchet_%' "
                                 "AND backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY pid")
        return [r[0] for r in rows]

    def terminate_backends(self, pids: list[int]) -> int:
        if not pids:
            return 0
        rows = _pg(self.cluster, "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                                 "FROM unnest($1::int[]) AS pid", [int(p) for p in pids])
        return int(rows[0][0])

    def start_rival_history(self) -> int:
        """Start the rival history (a second process on the same shards) and wait for SERVING;
        its pid. The supervisor leaves it alone once stopped."""
        pid = self.start_service(RIVAL)
        with self._lock:
            self._held.add(RIVAL)  # not restarted if it dies: it is a fault, not a service
        return pid

    def stop_rival_history(self) -> None:
        """Stop the rival history if it runs."""
        self.stop_service(RIVAL, grace=5.0)

    def ensure_serving(self, name: str, timeout: float = 60.0) -> None:
        """After a kill: the supervisor restarts it (with backoff); wait for SERVING."""
        if self._supervisor is None and self.service_pid(name) is None:
            self.start_service(name, wait=False)
        self.wait_serving(name, timeout=timeout)

    def heal_everything(self) -> None:
        """Resume every process, heal every link and clock, restart Postgres if down, wait for SERVING."""
        for name in self.service_names():
            pid = self.service_pid(name)
            if pid:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        for box in self.sandboxes():
            try:
                os.kill(box["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass
        for link in self.links.values():
            link.heal()
        for name in self.skew_services:
            self.skew(name, 0)
        if self.cluster is not None:
            restart_postgres(self.cluster)
        for name in self.service_names():
            self.ensure_serving(name)

    def stop(self, keep_postgres: bool = False) -> None:
        try:
            for name in self.service_names():  # a stopped process ignores SIGTERM until continued
                pid = self.service_pid(name)
                if pid:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
            for name in (*self.extra_services, RIVAL):  # LocalPlatform.stop knows only its own five
                self.stop_service(name)
            super().stop(keep_postgres=keep_postgres)
        finally:
            if self.proxies is not None:
                self.proxies.stop()
                self.proxies = None

    @property
    def state_path(self) -> pathlib.Path:
        return self.dir


def _pg(cluster, sql: str, *args) -> list:
    """One query on the cluster's `postgres` database over asyncpg. (Not psql: forking
    from a process full of gRPC threads has killed the child with SIGBUS here.)"""
    import asyncio

    import asyncpg

    async def run():
        conn = await asyncpg.connect(cluster.dsn("postgres"), timeout=5)
        try:
            return [tuple(r) for r in await conn.fetch(sql, *args, timeout=5)]
        finally:
            await conn.close(timeout=5)
    return asyncio.run(run())
