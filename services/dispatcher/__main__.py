"""`python -m ratchet.services.dispatcher --config FILE`: migrate the dispatcher database
(circuit breakers), then run one dispatcher until SIGTERM/SIGINT."""

from __future__ import annotations

import ratchet.libs.rpc.grpc_env  # noqa: F401 - first: sets grpc's core settings before grpc loads
import sys

import asyncpg

from ratchet.libs.rpc.service_main import ServiceMain
from ratchet.services.dispatcher.config import ENV_PREFIX, DispatcherConfig, load
from ratchet.services.dispatcher.server import DispatcherServer

SERVICE = ServiceMain(
    "dispatcher", "Ratchet shard dispatcher: leases tasks to host agents and takes their completions.",
    DispatcherConfig, ENV_PREFIX, load, DispatcherServer,
    # Without its breakers the dispatcher must not lease: exit, and be restarted.
    fatal=(OSError, asyncpg.PostgresError), fatal_hint="cannot use its database (config field 'dsn')")


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code (2: a bad config, 1: no database)."""
    return SERVICE.run(argv)


if __name__ == "__main__":
    sys.exit(main())
