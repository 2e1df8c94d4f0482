"""`python -m ratchet.services.history --config FILE`: migrate every shard,
serve HistoryService (health SERVING once up), stop gracefully on SIGTERM."""

from __future__ import annotations

import ratchet.libs.rpc.grpc_env  # noqa: F401 - first: sets grpc's core settings before grpc loads
import argparse
import asyncio
import sys

from ratchet.libs.config import ConfigError, describe
from ratchet.libs.rpc.server import run_until_signal, setup_logging, tune_gc
from ratchet.services.history import config as config_mod
from ratchet.services.history.server import HistoryServer


def main(argv: list[str] | None = None) -> int:
    """Parse --config, load and validate it, serve until SIGTERM/SIGINT; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m ratchet.services.history",
        description="Ratchet history service. Config fields (env prefix RATCHET_HISTORY_):\n"
                    + describe(config_mod.HistoryConfig),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="JSON config file")
    args = parser.parse_args(argv)
    try:
        cfg = config_mod.load(args.config)
    except ConfigError as e:
        print(f"history: {e}", file=sys.stderr)
        return 2
    setup_logging("history", cfg.log_level)

    async def serve(stop: asyncio.Event) -> None:
        """Run the server until the stop event is set."""
        server = HistoryServer(cfg)
        await server.start()
        tune_gc()  # after start-up: what exists now lives as long as the process
        try:
            await stop.wait()
        finally:
            await server.stop()

    asyncio.run(run_until_signal(serve))
    return 0


if __name__ == "__main__":
    sys.exit(main())
