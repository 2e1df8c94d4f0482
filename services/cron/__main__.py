"""`python -m ratchet.services.cron --config FILE`: migrate ratchet_cron, serve
CronService, fire schedules, stop gracefully on SIGTERM/SIGINT."""

from __future__ import annotations

import ratchet.libs.rpc.grpc_env  # noqa: F401 - first: sets grpc's core settings before grpc loads
import argparse
import asyncio
import sys

from ratchet.libs.config import ConfigError, describe
from ratchet.libs.rpc.server import run_until_signal, setup_logging
from ratchet.services.cron.config import ENV_PREFIX, CronConfig, load
from ratchet.services.cron.server import CronServer


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m ratchet.services.cron",
        description="Ratchet cron service: stores schedules and fires each slot once.",
        epilog=f"Config fields (JSON file keys; env {ENV_PREFIX}<FIELD> overrides):\n{describe(CronConfig)}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="JSON config file (fields below)")
    args = parser.parse_args(argv)
    try:
        config = load(args.config)
    except ConfigError as e:
        print(f"cron: {e}", file=sys.stderr)
        return 2
    setup_logging("cron", config.log_level)

    async def serve(stop: asyncio.Event) -> None:
        server = CronServer(config)
        await server.start()
        try:
            await stop.wait()
        finally:
            await server.stop()

    asyncio.run(run_until_signal(serve))
    return 0


if __name__ == "__main__":
    sys.exit(main())
