"""gRPC core settings of every service process: import this module first, before grpc.

`GRPC_EXPERIMENTS` (read once, when grpc's core starts): grpcio 1.85 runs a connection's I/O
on its EventEngine's own threads, which hand each completed operation to the Python poller
thread and on to the event loop; the iomgr path it replaced does the I/O in the thread that
polls the completion queue, one hand-off fewer per message. On the 2-core bench machine a
stream message's round trip costs ~25 % less CPU that way (`python -m loadtest.grpcfloor`:
203-242 -> 136-186 us, client and server together) and a single enqueue through the platform
~5-10 % less in the gateway, history and the caller (docs/benchmarks/findings.md, session
14). A value already in the environment wins (an empty one keeps grpc's defaults); a grpcio
that no longer knows these experiments logs "Unknown experiment" and runs its default.
"""

from __future__ import annotations

import os
import sys

LEGACY_IO = "-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints"

if "grpc" in sys.modules:  # too late to take effect: the importer must come first
    raise ImportError("ratchet.libs.rpc.grpc_env must be imported before grpc")
os.environ.setdefault("GRPC_EXPERIMENTS", LEGACY_IO)
