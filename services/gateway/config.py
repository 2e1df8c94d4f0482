"""Gateway configuration: one typed object, validated at start-up."""

from __future__ import annotations

import dataclasses
import os
import re

from ratchet.libs.config import ConfigError, field, load_config

ENV_PREFIX = "RATCHET_GATEWAY_"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclasses.dataclass(frozen=True)
class GatewayConfig:
    """Everything the gateway needs; every field names its unit and default."""

    control_dsn: str = field(doc="Postgres DSN of the control database (required)")
    history_target: str = field(doc="host:port of the history service (required)")
    shard_ids: list[int] = field(doc="ids of the task shards; slots are split evenly over them (required)")
    blob_dir: str = field(doc="folder holding bundles as blob_dir/sha256/<hex>.tar.gz (required)")
    admin_key_sha256: str = field(doc="hex sha256 of the admin key that may call TenantService (required)")
    host_token_sha256: list[str] = field(
        default_factory=list, doc="hex sha256 of each host agent token accepted by ControlService; default none")
    cron_target: str = field("", doc="host:port of the cron service (ScheduleService forwards to it); "
                                     "default empty: schedule calls answer UNAVAILABLE")
    dispatcher_target: str = field("", doc="host:port of the dispatcher (BreakerService forwards to its "
                                           "BreakerAdminService); default empty: breaker calls answer UNAVAILABLE")
    host: str = field("127.0.0.1", doc="address both listeners bind; default 127.0.0.1")
    grpc_port: int = field(0, doc="gRPC port; 0 picks a free one; default 0")
    rest_port: int = field(0, doc="REST (HTTP/JSON) port; 0 picks a free one; default 0")
    max_payload_bytes: int = field(262144, doc="largest task payload as compact JSON, bytes; default 262144 (256 KiB)")
    max_bundle_bytes: int = field(33554432, doc="largest deployment bundle, bytes; default 33554432 (32 MiB)")
    rpc_timeout_s: float = field(10.0, doc="deadline of every call to history and of every request, seconds; "
                                           "default 10")
    auth_cache_s: float = field(10.0, doc="how long a verified API key stays cached (so revocation takes this "
                                          "long), seconds; default 10")
    enqueue_calls_in_flight: int = field(1, doc="CreateTasks calls per shard at once for single enqueues "
                                         "(enqueue.py): 1 coalesces the most, more wait less; 1..8; default 1")
    enqueue_stream: bool = field(True, doc="send CreateTasks to history as messages on one stream "
                                 "(CreateTasksStream) instead of unary calls; default true")
    log_level: str = field("INFO", doc="Python logging level; default INFO")

    def __post_init__(self) -> None:
        for name in ("control_dsn", "history_target", "blob_dir"):
            if not getattr(self, name):
                raise ConfigError(f"config field {name!r} is required")
        if not self.shard_ids or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                         for s in self.shard_ids):
            raise ConfigError(f"config field 'shard_ids' must be a non-empty list of shard numbers >= 0, "
                              f"got {self.shard_ids!r}")
        if len(set(self.shard_ids)) != len(self.shard_ids):
            raise ConfigError(f"config field 'shard_ids' repeats a shard: {self.shard_ids!r}")
        if not _HEX64.match(self.admin_key_sha256 or ""):
            raise ConfigError("config field 'admin_key_sha256' must be 64 lowercase hex characters")
        for h in self.host_token_sha256:
            if not isinstance(h, str) or not _HEX64.match(h):
                raise ConfigError("config field 'host_token_sha256' must hold 64-character lowercase hex digests")
        for name in ("grpc_port", "rest_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ConfigError(f"config field {name!r} must be a port 0..65535")
        for name in ("max_payload_bytes", "max_bundle_bytes"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"config field {name!r} must be > 0 bytes")
        for name in ("rpc_timeout_s", "auth_cache_s"):
            if getattr(self, name) < 0 or (name == "rpc_timeout_s" and getattr(self, name) == 0):
                raise ConfigError(f"config field {name!r} must be > 0 seconds")
        if not 1 <= self.enqueue_calls_in_flight <= 8:
            raise ConfigError(f"config field 'enqueue_calls_in_flight' must be 1..8, "
                              f"got {self.enqueue_calls_in_flight}")


def load(path: str | os.PathLike | None = None, overrides: dict | None = None) -> GatewayConfig:
    """Load from a JSON file, RATCHET_GATEWAY_* variables and explicit overrides."""
    return load_config(GatewayConfig, path, env_prefix=ENV_PREFIX, overrides=overrides)
