"""`python -m ratchet.services.gateway --config FILE`: serve the public gRPC and REST API
and ControlService until SIGTERM/SIGINT."""

from __future__ import annotations

import ratchet.libs.rpc.grpc_env  # noqa: F401 - first: sets grpc's core settings before grpc loads
import sys

from ratchet.libs.rpc.service_main import ServiceMain
from ratchet.services.gateway.config import ENV_PREFIX, GatewayConfig, load
from ratchet.services.gateway.server import Gateway

SERVICE = ServiceMain("gateway", "Ratchet gateway: public gRPC + REST API and the control database.",
                      GatewayConfig, ENV_PREFIX, load, Gateway, freeze_gc=True)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code (2: a bad config)."""
    return SERVICE.run(argv)


if __name__ == "__main__":
    sys.exit(main())
