"""Configuration of the shard dispatcher (env prefix RATCHET_DISPATCHER_)."""

from __future__ import annotations

import dataclasses
import logging
import re

from ratchet.libs.config import ConfigError, field, load_config
from ratchet.services.dispatcher.breakers import MAX_CRASH_TIMES

ENV_PREFIX = "RATCHET_DISPATCHER_"

# The contract caps a poll's wait at 60 s (worker.proto, PollRequest.max_wait).
MAX_POLL_WAIT_S = 60.0

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_TARGET = re.compile(r"^[^\s:]+:\d{1,5}$")


@dataclasses.dataclass(frozen=True)
class DispatcherConfig:
    """Everything the dispatcher needs; validated at start-up, errors name the field."""

    history_target: str = field(doc="host:port of the history service (required), e.g. '127.0.0.1:7001'")
    shard_ids: list[int] = field(doc="shard ids this process owns (required, non-empty, e.g. [0, 1, 2, 3])")
    host_token_sha256: list[str] = field(
        doc="hex sha256 of each accepted host-agent bearer token (required, non-empty)")
    dsn: str = field(doc="Postgres DSN of the dispatcher's own database, ratchet_dispatch (required): the "
                         "circuit breakers; migrated at start-up")
    host: str = field("127.0.0.1", doc="address the gRPC server binds")
    grpc_port: int = field(0, doc="gRPC port; 0 picks a free port (logged at start-up)")
    fallback_tick_live_s: float = field(
        1.0, doc="seconds between fallback wake-ups of parked polls while the ready-event stream from history "
                 "is live (default 1; every 0.25 s while it is not). Set 0.25 when tasks reach these shards "
                 "through history processes other than history_target: their enqueues send this dispatcher "
                 "no event")
    lease_duration_s: float = field(30.0, doc="seconds a lease lasts before it must be extended (default 30)")
    poll_max_wait_s: float = field(20.0, doc="seconds a poll waits for work when the request sets no max_wait "
                                             "(default 20, at most 60)")
    rpc_timeout_s: float = field(10.0, doc="deadline in seconds of every call to history and of every "
                                           "breakers-database statement (default 10)")
    breaker_crash_threshold: int = field(5, doc="sandbox crashes of one task type (per tenant and app) within "
                                                "breaker_window_s that open its circuit breaker (default 5)")
    breaker_window_s: float = field(60.0, doc="seconds of the sliding window crashes are counted in (default 60)")
    breaker_cooldown_s: float = field(300.0, doc="seconds an open breaker pauses its task type before one probe "
                                                 "task may run (default 300)")
    pool_max_size: int = field(4, doc="connections to the dispatcher database at most (default 4)")
    log_level: str = field("INFO", doc="logging level: DEBUG, INFO, WARNING or ERROR (default INFO)")

    def __post_init__(self) -> None:
        _check_target(self.history_target)
        _check_shards(self.shard_ids)
        object.__setattr__(self, "host_token_sha256", _check_hashes(self.host_token_sha256))
        if not 0 <= self.grpc_port <= 65535:
            raise ConfigError(f"config field 'grpc_port' must be 0..65535, got {self.grpc_port}")
        for name in ("fallback_tick_live_s", "lease_duration_s", "poll_max_wait_s", "rpc_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"config field {name!r} must be > 0 seconds, got {getattr(self, name)!r}")
        if not (self.dsn or "").strip():
            raise ConfigError("config field 'dsn' must be a Postgres DSN of the dispatcher database, "
                              "e.g. 'postgresql://127.0.0.1:5432/ratchet_dispatch'")
        for name in ("breaker_window_s", "breaker_cooldown_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"config field {name!r} must be > 0 seconds, got {getattr(self, name)!r}")
        if not 1 <= self.breaker_crash_threshold <= MAX_CRASH_TIMES:
            raise ConfigError(f"config field 'breaker_crash_threshold' must be 1..{MAX_CRASH_TIMES} crashes, "
                              f"got {self.breaker_crash_threshold}")
        if not 1 <= self.pool_max_size <= 100:
            raise ConfigError(f"config field 'pool_max_size' must be 1..100, got {self.pool_max_size}")
        if self.poll_max_wait_s > MAX_POLL_WAIT_S:
            raise ConfigError(f"config field 'poll_max_wait_s' must be at most {MAX_POLL_WAIT_S:g} seconds, "
                              f"got {self.poll_max_wait_s:g}")
        if not isinstance(logging.getLevelName(self.log_level.upper()), int):
            raise ConfigError(f"config field 'log_level' must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}")


def _check_target(target: str) -> None:
    if not _TARGET.match(target or ""):
        raise ConfigError(f"config field 'history_target' must be 'host:port', got {target!r}")


def _check_shards(shard_ids: list) -> None:
    if not shard_ids:
        raise ConfigError("config field 'shard_ids' must list at least one shard id, e.g. [0, 1, 2, 3]")
    for sid in shard_ids:
        if isinstance(sid, bool) or not isinstance(sid, int) or sid < 0:
            raise ConfigError(f"config field 'shard_ids' must hold non-negative integers, got {sid!r}")
    if len(set(shard_ids)) != len(shard_ids):
        raise ConfigError(f"config field 'shard_ids' lists a shard twice: {shard_ids}")


def _check_hashes(hashes: list) -> list[str]:
    if not hashes:
        raise ConfigError("config field 'host_token_sha256' must list at least one token hash "
                          "(hex sha256 of a host-agent token)")
    out = []
    for h in hashes:
        norm = h.strip().lower() if isinstance(h, str) else h
        if not isinstance(norm, str) or not _SHA256_HEX.match(norm):
            raise ConfigError(f"config field 'host_token_sha256' must hold 64-character hex sha256 digests, got {h!r}")
        out.append(norm)
    return out


def load(path: str | None = None, overrides: dict | None = None) -> DispatcherConfig:
    """Load the dispatcher config from a JSON file, RATCHET_DISPATCHER_* env vars and overrides."""
    return load_config(DispatcherConfig, path, env_prefix=ENV_PREFIX, overrides=overrides)
