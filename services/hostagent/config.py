"""Host agent configuration (env prefix RATCHET_HOSTAGENT_)."""

from __future__ import annotations

import dataclasses
import os
import socket
import sys

from ratchet.libs.config import ConfigError, field, load_config

ENV_PREFIX = "RATCHET_HOSTAGENT_"
# sun_path holds 108 bytes; leave room for "sockets/<12-hex id>.sock".
MAX_WORK_DIR_CHARS = 80


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclasses.dataclass(frozen=True, repr=False)
class HostAgentConfig:
    """Everything the host agent needs; validated at start-up."""

    dispatcher_target: str = field(doc="host:port of the shard dispatcher's DispatchService (required)")
    control_target: str = field(doc="host:port of the gateway's ControlService (required)")
    host_token: str = field(doc="secret sent as 'authorization: Bearer <token>' on every dispatcher and "
                                "control call; never given to a sandbox (required)")
    work_dir: str = field(doc="private folder for bundles (bundles/<digest-hex>/), sockets and sandbox "
                              f"homes; at most {MAX_WORK_DIR_CHARS} characters (required)")
    host: str = field("127.0.0.1", doc="address the agent's gRPC server binds")
    grpc_port: int = field(0, doc="port of the agent's gRPC server (ListSandboxes, health); 0 = any free port")
    worker_id: str = field(default_factory=_default_worker_id,
                           doc="identity recorded on attempts; default <hostname>-<pid>")
    capacity: int = field(512, doc="task slots: most tasks running at once on this host (1..1000); a quarter of "
                                   "them free is one poll, split over the shards: the lease batch size")
    sandbox_concurrency: int = field(
        128, doc="most tasks one sandbox process runs at once, each in its own thread (1..1000); at most "
                "about capacity / sandbox_concurrency sandboxes per app version. 1 gives every task its own "
                "process. A sandbox that crashes fails every attempt it was running (CRASHED); one running a "
                "task that must stop (lease lost, cancel ignored) takes no new task and is killed once the "
                "others in it have ended")
    poll_linger_s: float = field(
        0.005, doc="seconds the agent waits for a quarter of its slots to be free before polling with fewer, "
                   "so leases (and history's transactions) come in batches; 0 polls as soon as one is free")
    heartbeat_interval_s: float = field(10.0, doc="seconds between heartbeats of all held leases")
    poll_max_wait_s: float = field(20.0, doc="seconds a Poll may wait for work before closing empty (max 60)")
    sandbox_python: str = field(default_factory=lambda: sys.executable,
                                doc="Python interpreter that runs `-m ratchet.sandbox`; default this one")
    sandbox_start_timeout_s: float = field(30.0, doc="seconds a new sandbox has to import the app and say ready")
    deployment_cache_s: float = field(5.0, doc="seconds an app's active deployment is cached")
    rpc_timeout_s: float = field(10.0, doc="deadline in seconds of every unary dispatcher and control call")
    completion_retry_s: float = field(30.0, doc="seconds a completion batch is retried while the dispatcher "
                                                "is UNAVAILABLE before it is dropped (the lease then expires)")
    step_retry_s: float = field(30.0, doc="seconds a workflow step operation (with a fan-out's StartChildren to "
                                          "the control service) is retried while the dispatcher or the control "
                                          "service is UNAVAILABLE or does not answer within rpc_timeout_s; then the "
                                          "step is answered 'error' and the activation fails (retryable)")
    shutdown_grace_s: float = field(10.0, doc="seconds running handlers get to finish on SIGTERM")
    log_level: str = field("INFO", doc="logging level name")

    def __post_init__(self) -> None:
        for name in ("dispatcher_target", "control_target", "host_token", "work_dir", "worker_id"):
            if not str(getattr(self, name)).strip():
                raise ConfigError(f"config field {name!r} must not be empty")
        if not 1 <= self.capacity <= 1000:
            raise ConfigError(f"config field 'capacity' must be in 1..1000, got {self.capacity}")
        if not 1 <= self.sandbox_concurrency <= 1000:
            raise ConfigError(f"config field 'sandbox_concurrency' must be in 1..1000, got {self.sandbox_concurrency}")
        if not 0 <= self.poll_linger_s <= 1:
            raise ConfigError(f"config field 'poll_linger_s' must be in [0, 1], got {self.poll_linger_s}")
        if not 0 < self.poll_max_wait_s <= 60:
            raise ConfigError(f"config field 'poll_max_wait_s' must be in (0, 60], got {self.poll_max_wait_s}")
        for name in ("heartbeat_interval_s", "sandbox_start_timeout_s", "rpc_timeout_s", "completion_retry_s",
                     "step_retry_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"config field {name!r} must be greater than zero")
        for name in ("deployment_cache_s", "shutdown_grace_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"config field {name!r} must not be negative")
        if len(os.path.abspath(self.work_dir)) > MAX_WORK_DIR_CHARS:
            raise ConfigError(f"config field 'work_dir' must be at most {MAX_WORK_DIR_CHARS} characters "
                              f"(Unix socket paths are short); got {self.work_dir!r}")

    def __repr__(self) -> str:
        fields = ", ".join(f"{f.name}={'***' if f.name == 'host_token' else repr(getattr(self, f.name))}"
                           for f in dataclasses.fields(self))
        return f"HostAgentConfig({fields})"

    @property
    def auth_metadata(self) -> tuple[tuple[str, str], ...]:
        """gRPC metadata carrying the host credential."""
        return (("authorization", f"Bearer {self.host_token}"),)


def load(path: str | None = None, overrides: dict | None = None) -> HostAgentConfig:
    """The config from a JSON file, RATCHET_HOSTAGENT_* variables and overrides."""
    return load_config(HostAgentConfig, path, env_prefix=ENV_PREFIX, overrides=overrides)
