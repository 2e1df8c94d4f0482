"""The local platform: its own Postgres and every service as its own process.

`LocalPlatform(state_dir).start()` is what `ratchet dev up` runs, and what the
end-to-end and fault tests use to run the mesh with small timeouts:

    with LocalPlatform(tmp, shards=2, overrides={"history": {"lease_duration_s": 3}}) as p:
        client = p.client()
        p.kill("hostagent")          # SIGKILL; the supervisor restarts it with backoff
        p.wait_serving("hostagent")

Layout of state_dir: pg/ (the cluster), secrets/ (0600 keys), config/<service>.json,
logs/<service>.log, blobs/, hostagent/, endpoints.json (0600: addresses and keys).
"""

from __future__ import annotations

import concurrent.futures
import copy
import hashlib
import logging
import os
import pathlib
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from ratchet.cli import procs
from ratchet.cli.supervision import Supervisor
from ratchet.libs.pg.cluster import LocalCluster, free_port
from ratchet.libs.rpc.server import PARENT_PID_ENV

log = logging.getLogger("ratchet.dev")

# Start order: each service's dependencies come before it.
SERVICES = ("history", "gateway", "cron", "dispatcher", "hostagent")
DEV_TENANT = "dev"


class PlatformError(RuntimeError):
    """The platform could not start; the message says which part and shows its log."""


class LocalPlatform:
    """Postgres plus the five services of a local Ratchet, owned by this object.

    overrides: {service: {config field: value}} merged over the generated
    config. service_modules: {service: module} to run something else (fakes).
    pg_settings: extra postgresql.conf settings. env: extra environment for
    the services. supervise: restart services that die (with backoff).
    """

    # Services reach Postgres over its Unix socket (cheaper per round trip than loopback TCP);
    # a subclass that splices a TCP proxy between a service and Postgres sets this False.
    pg_over_socket = True

    def __init__(self, state_dir: str | os.PathLike, shards: int = 4, overrides: dict | None = None, *,
                 service_modules: dict | None = None, pg_settings: dict | None = None,
                 env: dict | None = None, supervise: bool = True, ready_timeout: float = 60.0,
                 log_level: str = "INFO"):
        if not 1 <= shards <= 64:
            raise ValueError("shards must be between 1 and 64")
        self.dir = pathlib.Path(state_dir).resolve()
        self.shards = shards
        self.overrides = copy.deepcopy(overrides or {})
        unknown = set(self.overrides) - set(SERVICES)
        if unknown:
            raise ValueError(f"overrides for unknown service(s) {sorted(unknown)}; known: {list(SERVICES)}")
        self.modules = {name: f"ratchet.services.{name}" for name in SERVICES} | (service_modules or {})
        self.pg_settings = pg_settings or {}
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.ready_timeout = ready_timeout
        self.log_level = log_level
        self.cluster: LocalCluster | None = None
        self.ports: dict[str, int] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.tenant: dict = {}
        self._held: set[str] = set()  # services stopped on purpose: not restarted
        self._lock = threading.RLock()
        self._supervisor = Supervisor(self) if supervise else None
        # Services get SIGTERM when the thread that forked them ends, so they
        # are all forked by this one long-lived thread, whoever asks.
        self._spawner: concurrent.futures.ThreadPoolExecutor | None = None

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> LocalPlatform:
        """Start Postgres and every service, wait for SERVING, create the dev tenant."""
        for sub in ("secrets", "config", "logs", "blobs", "hostagent", "run"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir / "secrets", 0o700)
        try:
            self._start_postgres()
            self._write_configs()
            for name in SERVICES:
                self.start_service(name)
            self._bootstrap_tenant()
            self.write_endpoints()
        except BaseException:
            self.stop()
            raise
        if self._supervisor:
            self._supervisor.start()
        return self

    def stop(self, keep_postgres: bool = False) -> None:
        """Stop every service (reverse order, SIGTERM then SIGKILL) and Postgres."""
        if self._supervisor:
            self._supervisor.stop()
        for name in reversed(SERVICES):
            self.stop_service(name)
        if self.cluster and not keep_postgres:
            self.cluster.stop()
        if self._spawner is not None:
            self._spawner.shutdown()
            self._spawner = None
        self.write_endpoints()

    def __enter__(self) -> LocalPlatform:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- one service ------------------------------------------------------------
    def start_service(self, name: str, wait: bool = True) -> int:
        """Start one service (if not running) and wait until it reports SERVING; returns its pid."""
        with self._lock:
            self._held.discard(name)
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                proc = self._spawn(name)
        if wait:
            self.wait_serving(name)
        return proc.pid

    def stop_service(self, name: str, grace: float = 10.0) -> None:
        """SIGTERM one service (SIGKILL after grace); it stays down until start_service."""
        with self._lock:
            self._held.add(name)
            proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def restart(self, name: str) -> int:
        """Stop one service gracefully and start it again; returns the new pid."""
        self.stop_service(name)
        return self.start_service(name)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal one service (SIGKILL by default) as a crash would; the supervisor restarts it."""
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(sig)

    def pause(self, name: str) -> None:
        """SIGSTOP one service (a GC pause or a hung host)."""
        self.kill(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT a paused service."""
        self.kill(name, signal.SIGCONT)

    def service_pid(self, name: str) -> int | None:
        """The pid of the running service, or None when it is down."""
        proc = self.procs.get(name)
        return proc.pid if proc is not None and proc.poll() is None else None

    def health(self, name: str) -> str:
        return procs.health(self.grpc_address(name))

    def wait_serving(self, name: str, timeout: float | None = None) -> None:
        """Wait until the service reports SERVING; PlatformError with its log tail otherwise."""
        deadline = time.monotonic() + (timeout or self.ready_timeout)
        while True:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None and name in self._held:
                raise PlatformError(f"{name} is stopped")
            if self.health(name) == "SERVING":
                return
            restarting = self._supervisor is not None and self._supervisor.running
            if not restarting and proc is not None and proc.poll() is not None:
                raise PlatformError(f"{name} exited with code {proc.returncode} while starting; "
                                    f"last lines of {self.log_path(name)}:\n{procs.tail(self.log_path(name))}")
            if time.monotonic() > deadline:
                raise PlatformError(f"{name} did not report SERVING within {timeout or self.ready_timeout:g}s; "
                                    f"last lines of {self.log_path(name)}:\n{procs.tail(self.log_path(name))}")
            time.sleep(0.1)

    def _spawn(self, name: str) -> subprocess.Popen:
        logf = self.log_path(name).open("ab")
        logf.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {name}\n".encode())
        logf.flush()
        cmd = [sys.executable, "-m", self.modules[name], "--config", str(self.config_path(name))]
        # Own process group: Ctrl-C on `ratchet dev up` reaches only the
        # supervisor, which then stops the services in order.
        if self._spawner is None:
            self._spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ratchet-spawner")
        try:
            proc = self._spawner.submit(
                subprocess.Popen, cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                cwd=self.dir, env={**self.env, PARENT_PID_ENV: str(os.getpid())}, process_group=0).result()
        finally:
            logf.close()
        self.procs[name] = proc
        self.write_endpoints()
        return proc

    # -- paths and addresses -----------------------------------------------------
    def log_path(self, name: str) -> pathlib.Path:
        return self.dir / "logs" / f"{name}.log"

    def config_path(self, name: str) -> pathlib.Path:
        return self.dir / "config" / f"{name}.json"

    def grpc_address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    @property
    def endpoints(self) -> dict:
        """What endpoints.json holds: addresses, keys, pids."""
        services = {}
        for name in SERVICES:
            if name not in self.ports:
                continue
            pid = self.service_pid(name)
            services[name] = {"grpc": self.grpc_address(name), "pid": pid,
                              "start_time": procs.start_time(pid) if pid else None,
                              "log": str(self.log_path(name))}
        pg = self.cluster
        return {
            "rest": f"http://127.0.0.1:{self.ports.get('gateway_rest')}",
            "grpc": self.grpc_address("gateway") if "gateway" in self.ports else None,
            "openapi": f"http://127.0.0.1:{self.ports.get('gateway_rest')}/openapi.json",
            "api_key": self.tenant.get("api_key"),
            "admin_key": self._secret("admin_key"),
            "tenant": DEV_TENANT, "tenant_id": self.tenant.get("tenant_id"),
            "app": self.tenant.get("app", "default"),
            "shards": self.shards,
            "services": services,
            "postgres": {"port": pg.port if pg else None, "pid": pg.postmaster_pid() if pg else None,
                         "data_dir": str(self.dir / "pg"),
                         "dsn_control": pg.dsn("ratchet_control") if pg else None},
        }

    def write_endpoints(self) -> None:
        if not self.ports:
            return
        with self._lock:
            procs.write_json(self.dir / "endpoints.json", self.endpoints, mode=0o600)

    def client(self, **kwargs: Any):
        """A ratchet.Client for the dev tenant's app `default`."""
        from ratchet.client import Client
        return Client(self.grpc_address("gateway"), self.tenant["api_key"], **kwargs)

    def admin_client(self, **kwargs: Any):
        from ratchet.client import AdminClient
        return AdminClient(self.grpc_address("gateway"), self._secret("admin_key"), **kwargs)

    # -- setup steps ---------------------------------------------------------------
    def _secret(self, name: str) -> str:
        """A key kept in secrets/<name> (0600), generated on first use."""
        path = self.dir / "secrets" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"rk_{name.split('_')[0]}_{secrets.token_urlsafe(32)}")
        return path.read_text().strip()

    def _start_postgres(self) -> None:
        saved = (procs.read_json(self.dir / "run" / "ports.json") or {}).get("postgres")
        cluster = LocalCluster(self.dir / "pg", port=saved or free_port(), settings=self.pg_settings)
        if cluster.initialized and cluster.running():
            # Reuse the server a previous run left up, on whatever port it has.
            cluster.port = _configured_port(cluster) or cluster.port
        else:
            if not procs.port_free(cluster.port):
                cluster.port = free_port()
            try:
                cluster.ensure_started()
            except (RuntimeError, subprocess.SubprocessError) as e:
                raise PlatformError(f"Postgres did not start in {cluster.data_dir}: {e}") from None
        self.cluster = cluster
        cluster.create_database("ratchet_control")
        cluster.create_database("ratchet_cron")
        cluster.create_database("ratchet_dispatch")
        for i in range(self.shards):
            cluster.create_database(f"ratchet_shard_{i}")

    def _choose_ports(self) -> None:
        path = self.dir / "run" / "ports.json"
        saved = procs.read_json(path) or {}
        names = [*SERVICES, "gateway_rest"]
        taken = {self.cluster.port} if self.cluster else set()
        for name in names:
            port = saved.get(name)
            # (no port twice: none of them is bound until its service starts)
            self.ports[name] = port if port and port not in taken and procs.port_free(port) else free_port(taken)
            taken.add(self.ports[name])
        procs.write_json(path, {**self.ports, "postgres": self.cluster.port if self.cluster else None})

    def _write_configs(self) -> None:
        self._choose_ports()
        for name, config in self.configs().items():
            procs.write_json(self.config_path(name), config, mode=0o600)

    def configs(self) -> dict[str, dict]:
        """The generated config of every service, overrides applied."""
        pg, host = self.cluster, "127.0.0.1"
        assert pg is not None, "Postgres must be started before configs are made"
        dsn = pg.socket_dsn if self.pg_over_socket else pg.dsn
        shard_ids = list(range(self.shards))
        token_sha = [hashlib.sha256(self._secret("host_token").encode()).hexdigest()]
        # The cron service calls the gateway's ControlService with a token of its own.
        cron_token_sha = hashlib.sha256(self._secret("cron_token").encode()).hexdigest()
        common = {"host": host, "log_level": self.log_level}
        configs = {
            "history": {**common, "grpc_port": self.ports["history"],
                        "shards": {str(i): dsn(f"ratchet_shard_{i}") for i in shard_ids}},
            "gateway": {**common, "grpc_port": self.ports["gateway"], "rest_port": self.ports["gateway_rest"],
                        "control_dsn": dsn("ratchet_control"),
                        "history_target": self.grpc_address("history"), "shard_ids": shard_ids,
                        "blob_dir": str(self.dir / "blobs"),
                        "admin_key_sha256": hashlib.sha256(self._secret("admin_key").encode()).hexdigest(),
                        "host_token_sha256": [*token_sha, cron_token_sha],
                        "cron_target": self.grpc_address("cron"),
                        "dispatcher_target": self.grpc_address("dispatcher")},
            "cron": {**common, "grpc_port": self.ports["cron"], "dsn": dsn("ratchet_cron"),
                     "gateway_target": self.grpc_address("gateway"), "history_target": self.grpc_address("history"),
                     "shard_ids": shard_ids, "mesh_token": self._secret("cron_token")},
            "dispatcher": {**common, "grpc_port": self.ports["dispatcher"],
                           "history_target": self.grpc_address("history"), "shard_ids": shard_ids,
                           "host_token_sha256": token_sha, "dsn": dsn("ratchet_dispatch")},
            "hostagent": {**common, "grpc_port": self.ports["hostagent"],
                          "dispatcher_target": self.grpc_address("dispatcher"),
                          "control_target": self.grpc_address("gateway"),
                          "host_token": self._secret("host_token"), "worker_id": "dev-host-1",
                          "work_dir": str(self.dir / "hostagent"), "sandbox_python": sys.executable},
        }
        for name, extra in self.overrides.items():
            configs[name].update(extra)
        return configs

    def _bootstrap_tenant(self) -> None:
        """Create tenant `dev` (app `default`) the first time; keep its key in secrets/."""
        path = self.dir / "secrets" / "dev_tenant.json"
        saved = procs.read_json(path)
        if saved:
            self.tenant = saved
            return
        from ratchet.client import AdminClient, Conflict
        try:
            with AdminClient(self.grpc_address("gateway"), self._secret("admin_key")) as admin:
                self.tenant = admin.create_tenant(DEV_TENANT)
        except Conflict:
            raise PlatformError(f"tenant {DEV_TENANT!r} exists but its API key is not in {path}; "
                                f"remove {self.dir} to start from scratch") from None
        procs.write_json(path, self.tenant, mode=0o600)


def _configured_port(cluster: LocalCluster) -> int | None:
    try:
        for line in (cluster.data_dir / "postgresql.auto.conf").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "port":
                return int(value.strip().strip("'"))
    except (FileNotFoundError, ValueError):
        return None
    return None
