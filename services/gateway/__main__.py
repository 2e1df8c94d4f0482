"""`python -m ratchet.services.gateway --config FILE`: migrate, serve, stop on SIGTERM."""

from __future__ import annotations

import ratchet.libs.rpc.grpc_env  # noqa: F401 - first: sets grpc's core settings before grpc loads
import argparse
import asyncio
import sys

from ratchet.libs.config import ConfigError, describe
from ratchet.libs.rpc.server import run_until_signal, setup_logging, tune_gc
from ratchet.services.gateway import config as _config
from ratchet.services.gateway.server import Gateway


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ratchet.services.gateway",
        description="Ratchet gateway: public gRPC + REST API and the control database.",
        epilog="config fields (JSON file, or RATCHET_GATEWAY_<FIELD> variables):\n"
               + describe(_config.GatewayConfig),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="JSON config file")
    args = parser.parse_args(argv)
    try:
        cfg = _config.load(args.config)
    except ConfigError as e:
        print(f"gateway: {e}", file=sys.stderr)
        return 2
    setup_logging("gateway", cfg.log_level)

    async def serve(stop: asyncio.Event) -> None:
        gw = Gateway(cfg)
        await gw.start()
        tune_gc()  # after start-up: what exists now lives as long as the process
        try:
            await stop.wait()
        finally:
            await gw.stop()

    asyncio.run(run_until_signal(serve))
    return 0


if __name__ == "__main__":
    sys.exit(main())
