"""`python -m ratchet.services.dispatcher --config FILE`: migrate the
dispatcher database (circuit breakers), then run one dispatcher until
SIGTERM/SIGINT."""

from __future__ import annotations

import ratchet.libs.rpc.grpc_env  # noqa: F401 - first: sets grpc's core settings before grpc loads
import argparse
import asyncio
import sys

import asyncpg

from ratchet.libs.config import ConfigError, describe
from ratchet.libs.rpc.server import run_until_signal, setup_logging
from ratchet.services.dispatcher.config import ENV_PREFIX, DispatcherConfig, load
from ratchet.services.dispatcher.server import DispatcherServer


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="python -m ratchet.services.dispatcher",
        description="Ratchet shard dispatcher: leases tasks to host agents and fires shard timers.",
        epilog=f"Config fields (JSON file keys; env {ENV_PREFIX}<FIELD> overrides):\n{describe(DispatcherConfig)}",
        formatter_class=argparse.RawDescriptionHelpFormatter)


async def _main(config: DispatcherConfig) -> None:
    server = DispatcherServer(config)

    async def serve(stop: asyncio.Event) -> None:
        await server.start()
        await stop.wait()
        await server.stop()

    await run_until_signal(serve)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = _parser()
    parser.add_argument("--config", help="JSON config file (fields below)")
    args = parser.parse_args(argv)
    try:
        config = load(args.config)
    except ConfigError as err:
        print(f"dispatcher: {err}", file=sys.stderr)
        return 2
    setup_logging("dispatcher", config.log_level)
    try:
        asyncio.run(_main(config))
    except (OSError, asyncpg.PostgresError) as err:
        # Without its breakers the dispatcher must not lease: exit, and be restarted.
        print(f"dispatcher: cannot use its database (config field 'dsn'): {type(err).__name__}: {err}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
