"""History's configuration: one frozen dataclass, validated at start-up.

Loaded with ratchet.libs.config.load_config from a JSON file (--config) and
environment variables prefixed RATCHET_HISTORY_ (e.g. RATCHET_HISTORY_GRPC_PORT).
"""

from __future__ import annotations

import dataclasses
import os

from ratchet.libs.config import ConfigError, field, load_config

ENV_PREFIX = "RATCHET_HISTORY_"

# wal_compression values history may set ('' keeps the server's; "on" is pglz's old name).
WAL_COMPRESSION = ("lz4", "zstd", "pglz", "off", "")


@dataclasses.dataclass(frozen=True)
class HistoryConfig:
    """Everything the history service needs to run."""

    shards: dict[str, str] = field(
        doc="Required. Shard id (a decimal integer, as a string key) -> Postgres DSN of that shard's database.")
    host: str = field("127.0.0.1", doc="Address the gRPC server binds.")
    grpc_port: int = field(0, doc="gRPC port; 0 picks a free port (the bound port is logged and exposed).")
    lease_duration_s: float = field(30.0, doc="Seconds a lease lasts when LeaseTasks/RecordHeartbeats name none.")
    cancel_grace_s: float = field(
        30.0, doc="Seconds a cancelled or timed-out attempt has to return before its lease is revoked.")
    idempotency_window_s: float = field(86400.0, doc="Seconds an idempotency key keeps naming its task (24 h).")
    pool_max_size: int = field(8, doc="Connections per shard pool.")
    enqueue_groups_in_flight: int = field(
        1, doc="Group-committed enqueue statements per shard and lane at once (enqueue/commit.py; a lane is the "
               "uniform requests of one kind, or all the others): 1 makes the largest groups, more "
               "trade commits for less waiting; 1..8.")
    statement_timeout_ms: int = field(10_000, doc="Server-side bound on every statement, in milliseconds.")
    wal_compression: str = field(
        "lz4", doc="wal_compression of history's sessions on the shards: the full-page images their "
                   "writes log after each checkpoint, compressed (lz4: less WAL per task right after a "
                   "checkpoint, docs/benchmarks/findings.md). A superuser-only "
                   "setting: the shard role needs superuser or `GRANT SET ON PARAMETER wal_compression` "
                   "(Postgres 15); without it history warns once per shard and keeps the server's "
                   "setting. One of lz4, zstd, pglz, off; '' leaves the server's.")
    bulk_batch_size: int = field(100, doc="Tasks a bulk operation processes per transaction.")
    bulk_interval_s: float = field(
        10.0, doc="Seconds the bulk loop waits between checks for running operations when idle "
                  "(default 10; a StartBulkOperation and a shard connecting late wake it at once, so the "
                  "check only finds operations another history process started on these shards).")
    log_level: str = field("INFO", doc="Python logging level.")

    def __post_init__(self) -> None:
        if not isinstance(self.shards, dict) or not self.shards:
            raise ConfigError("config field 'shards' is required: an object of shard id -> DSN")
        for key, dsn in self.shards.items():
            try:
                int(key)
            except (TypeError, ValueError):
                raise ConfigError(f"config field 'shards' has key {key!r}; shard ids are integers") from None
            if not isinstance(dsn, str) or not dsn.startswith(("postgresql://", "postgres://")):
                raise ConfigError(f"config field 'shards[{key}]' must be a postgresql:// DSN, got {dsn!r}")
        for name in ("lease_duration_s", "cancel_grace_s", "idempotency_window_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"config field {name!r} must be positive, got {getattr(self, name)}")
        if not 1 <= self.bulk_batch_size <= 1000:
            raise ConfigError(f"config field 'bulk_batch_size' must be 1..1000, got {self.bulk_batch_size}")
        if self.bulk_interval_s <= 0:
            raise ConfigError(f"config field 'bulk_interval_s' must be positive, got {self.bulk_interval_s}")
        if not 1 <= self.enqueue_groups_in_flight <= 8:
            raise ConfigError(f"config field 'enqueue_groups_in_flight' must be 1..8, got "
                              f"{self.enqueue_groups_in_flight}")
        if self.wal_compression not in WAL_COMPRESSION:
            raise ConfigError(f"config field 'wal_compression' must be one of "
                              f"{', '.join(repr(v) for v in WAL_COMPRESSION)}, got {self.wal_compression!r}")
        if self.pool_max_size < 1:
            raise ConfigError(f"config field 'pool_max_size' must be at least 1, got {self.pool_max_size}")
        if not 0 <= self.grpc_port <= 65535:
            raise ConfigError(f"config field 'grpc_port' must be 0..65535, got {self.grpc_port}")

    @property
    def shard_dsns(self) -> dict[int, str]:
        """Shard ids as integers -> DSN."""
        return {int(k): v for k, v in self.shards.items()}


def load(path: str | os.PathLike | None = None, **overrides) -> HistoryConfig:
    """Load and validate the config (file, then RATCHET_HISTORY_* env, then overrides)."""
    return load_config(HistoryConfig, path, env_prefix=ENV_PREFIX, overrides=overrides)
