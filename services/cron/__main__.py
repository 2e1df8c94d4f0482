"""`python -m ratchet.services.cron --config FILE`: migrate the cron database, serve
CronService, fire schedules, stop gracefully on SIGTERM/SIGINT."""

from __future__ import annotations

import ratchet.libs.rpc.grpc_env  # noqa: F401 - first: sets grpc's core settings before grpc loads
import sys

from ratchet.libs.rpc.service_main import ServiceMain
from ratchet.services.cron.config import ENV_PREFIX, CronConfig, load
from ratchet.services.cron.server import CronServer

SERVICE = ServiceMain("cron", "Ratchet cron service: stores schedules and fires each slot once.",
                      CronConfig, ENV_PREFIX, load, CronServer)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code (2: a bad config)."""
    return SERVICE.run(argv)


if __name__ == "__main__":
    sys.exit(main())
