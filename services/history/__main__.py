"""`python -m ratchet.services.history --config FILE`: migrate every shard,
serve HistoryService (health SERVING once up), stop gracefully on SIGTERM."""

from __future__ import annotations

import ratchet.libs.rpc.grpc_env  # noqa: F401 - first: sets grpc's core settings before grpc loads
import sys

from ratchet.libs.rpc.service_main import ServiceMain
from ratchet.services.history.config import ENV_PREFIX, HistoryConfig, load
from ratchet.services.history.server import HistoryServer

SERVICE = ServiceMain("history", "Ratchet history service: the shards' tasks, leases, timers and history.",
                      HistoryConfig, ENV_PREFIX, load, HistoryServer, freeze_gc=True)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code (2: a bad config)."""
    return SERVICE.run(argv)


if __name__ == "__main__":
    sys.exit(main())
