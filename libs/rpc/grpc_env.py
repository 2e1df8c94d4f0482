"""gRPC core settings of every service process: import this module first, before grpc.

`GRPC_EXPERIMENTS` (read once, when grpc's core starts): grpcio 1.85 runs a connection's I/O
on its EventEngine's own threads, which hand each completed operation to the Python poller
thread and on to the event loop; the iomgr path it replaced does the I/O in the thread that
polls the completion queue, one hand-off fewer per message, so each message costs less CPU
on both ends (`python -m loadtest.grpcfloor` measures it; docs/benchmarks/findings.md: gRPC
I/O path). A value already in the environment wins (an empty one keeps grpc's defaults); a grpcio
that no longer knows these experiments logs "Unknown experiment" and runs its default.
"""

from __future__ import annotations

import os
import sys

LEGACY_IO = "-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints"

if "grpc" in sys.modules:  # too late to take effect: the importer must come first
    raise ImportError("ratchet.libs.rpc.grpc_env must be imported before grpc")
os.environ.setdefault("GRPC_EXPERIMENTS", LEGACY_IO)
