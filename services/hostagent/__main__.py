"""`python -m ratchet.services.hostagent --config FILE`: run this host's sandboxes for the
tasks the dispatcher leases, until SIGTERM/SIGINT."""

from __future__ import annotations

import ratchet.libs.rpc.grpc_env  # noqa: F401 - first: sets grpc's core settings before grpc loads
import os
import sys

# Sandboxes are forked and exec at once; gRPC's fork handlers only add noise.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

from ratchet.libs.rpc.service_main import ServiceMain
from ratchet.services.hostagent.config import ENV_PREFIX, HostAgentConfig, load
from ratchet.services.hostagent.server import HostAgent


def _hide_from_sandboxes(_config: HostAgentConfig) -> None:
    # Sandboxes share the agent's uid in this slice: a non-dumpable agent keeps
    # /proc/<agent>/environ and /proc/<agent>/mem (where the host token lives)
    # unreadable to them.
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


SERVICE = ServiceMain("hostagent", "Ratchet host agent: runs customer code in sandboxes for leased tasks.",
                      HostAgentConfig, ENV_PREFIX, load, HostAgent, freeze_gc=True,
                      before_start=_hide_from_sandboxes)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code (2: a bad config)."""
    return SERVICE.run(argv)


if __name__ == "__main__":
    sys.exit(main())
