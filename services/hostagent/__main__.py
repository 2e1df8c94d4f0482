"""`python -m ratchet.services.hostagent --config FILE`: run a host agent
until SIGTERM or SIGINT."""

from __future__ import annotations

import ratchet.libs.rpc.grpc_env  # noqa: F401 - first: sets grpc's core settings before grpc loads
import argparse
import asyncio
import os
import sys

# Sandboxes are forked and exec at once; gRPC's fork handlers only add noise.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

from ratchet.libs.config import ConfigError, describe
from ratchet.libs.rpc.server import run_until_signal, setup_logging, tune_gc
from ratchet.services.hostagent.config import ENV_PREFIX, HostAgentConfig, load
from ratchet.services.hostagent.server import HostAgent


def _hide_from_sandboxes() -> None:
    # Sandboxes share the agent's uid in this slice: a non-dumpable agent keeps
    # /proc/<agent>/environ and /proc/<agent>/mem (where the host token lives)
    # unreadable to them.
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


async def _serve(config: HostAgentConfig, stop: asyncio.Event) -> None:
    agent = HostAgent(config)
    await agent.start()
    tune_gc()  # after start-up: what exists now lives as long as the process
    await stop.wait()
    await agent.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit status 2 on a bad configuration."""
    parser = argparse.ArgumentParser(
        prog="python -m ratchet.services.hostagent",
        description=f"Ratchet host agent. Config fields (env {ENV_PREFIX}<FIELD>):\n{describe(HostAgentConfig)}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="JSON config file")
    args = parser.parse_args(argv)
    try:
        config = load(args.config)
    except ConfigError as e:
        print(f"hostagent: {e}", file=sys.stderr)
        return 2
    setup_logging("hostagent", config.log_level)
    _hide_from_sandboxes()
    asyncio.run(run_until_signal(lambda stop: _serve(config, stop)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
