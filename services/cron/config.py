"""Configuration of the cron service (env prefix RATCHET_CRON_)."""

from __future__ import annotations

import dataclasses
import logging
import os
import re

from ratchet.libs.config import ConfigError, field, load_config

ENV_PREFIX = "RATCHET_CRON_"
_TARGET = re.compile(r"^[^\s:]+:\d{1,5}$")


@dataclasses.dataclass(frozen=True)
class CronConfig:
    """Everything the cron service needs; validated at start-up, errors name the field."""

    dsn: str = field(doc="Postgres DSN of the cron database ratchet_cron (required)")
    gateway_target: str = field(doc="host:port of the gateway's ControlService, where slots are enqueued (required)")
    history_target: str = field(doc="host:port of the history service, read for overlap checks (required)")
    shard_ids: list[int] = field(doc="ids of the task shards; slots are split evenly over them, as the "
                                     "gateway does (required)")
    mesh_token: str = field(doc="bearer token sent to the gateway's ControlService; the gateway holds its "
                                "sha256 (required)")
    host: str = field("127.0.0.1", doc="address the gRPC server binds; default 127.0.0.1")
    grpc_port: int = field(0, doc="gRPC port; 0 picks a free one; default 0")
    tick_interval_s: float = field(0.2, doc="seconds between looks for due schedules and open slots while "
                                             "something is due or open; default 0.2")
    idle_interval_s: float = field(1.0, doc="longest wait between looks while nothing is due or open, seconds "
                                            "(never less than tick_interval_s); a schedule created or resumed "
                                            "and a slot recorded or closed in this process wake the loops at "
                                            "once, and the fire loop wakes when the next schedule is due; "
                                            "default 1")
    min_interval_s: float = field(1.0, doc="smallest gap allowed between two firings of a schedule, seconds; "
                                           "default 1")
    misfire_grace_s: float = field(2.0, doc="a slot reached at most this late fires as on time even with no "
                                            "catch-up window (the loop is never exactly on time), seconds; "
                                            "default 2")
    buffer_check_s: float = field(1.0, doc="how often a buffer_one slot re-reads the previous task's state, "
                                           "seconds; default 1")
    send_lease_s: float = field(3.0, doc="a slot being sent is left to the process that decided it this long; "
                                         "after a crash another process re-sends it then (the gateway's key "
                                         "makes a re-send return the same task), seconds; default 3")
    rpc_timeout_s: float = field(5.0, doc="deadline of every call to the gateway and history and of every "
                                          "database statement, seconds; default 5")
    batch_size: int = field(100, doc="schedules claimed per fire transaction and open slots handled per "
                                     "pass; default 100")
    delivery_concurrency: int = field(4, doc="schedules whose slots are delivered at once; default 4")
    slot_retention_s: float = field(7 * 86400.0, doc="finished slots older than this are deleted, seconds; "
                                                     "default 604800 (7 days)")
    pool_max_size: int = field(8, doc="largest number of database connections; default 8")
    log_level: str = field("INFO", doc="logging level: DEBUG, INFO, WARNING or ERROR; default INFO")

    def __post_init__(self) -> None:
        if not self.dsn:
            raise ConfigError("config field 'dsn' is required (the ratchet_cron database)")
        for name in ("gateway_target", "history_target"):
            if not _TARGET.fullmatch(getattr(self, name) or ""):
                raise ConfigError(f"config field {name!r} must be 'host:port', got {getattr(self, name)!r}")
        if not self.shard_ids or any(isinstance(s, bool) or not isinstance(s, int) or s < 0
                                     for s in self.shard_ids):
            raise ConfigError(f"config field 'shard_ids' must be a non-empty list of shard numbers >= 0, "
                              f"got {self.shard_ids!r}")
        if len(set(self.shard_ids)) != len(self.shard_ids):
            raise ConfigError(f"config field 'shard_ids' lists a shard twice: {self.shard_ids!r}")
        if not self.mesh_token:
            raise ConfigError("config field 'mesh_token' is required (the gateway refuses EnqueueScheduled "
                              "without it)")
        if not 0 <= self.grpc_port <= 65535:
            raise ConfigError(f"config field 'grpc_port' must be 0..65535, got {self.grpc_port}")
        for name in ("tick_interval_s", "idle_interval_s", "min_interval_s", "buffer_check_s", "send_lease_s",
                     "rpc_timeout_s", "slot_retention_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"config field {name!r} must be > 0 seconds, got {getattr(self, name)!r}")
        if self.misfire_grace_s < 0:
            raise ConfigError(f"config field 'misfire_grace_s' must be >= 0 seconds, got {self.misfire_grace_s!r}")
        for name in ("batch_size", "delivery_concurrency", "pool_max_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"config field {name!r} must be >= 1, got {getattr(self, name)!r}")
        if self.pool_max_size < self.delivery_concurrency + 2:
            raise ConfigError(f"config field 'pool_max_size' must be at least delivery_concurrency + 2 "
                              f"({self.delivery_concurrency + 2}) so API calls are not starved, "
                              f"got {self.pool_max_size}")
        if not isinstance(logging.getLevelName(self.log_level.upper()), int):
            raise ConfigError(f"config field 'log_level' must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}")


def load(path: str | os.PathLike | None = None, overrides: dict | None = None) -> CronConfig:
    """Load from a JSON file, RATCHET_CRON_* variables and explicit overrides."""
    return load_config(CronConfig, path, env_prefix=ENV_PREFIX, overrides=overrides)
