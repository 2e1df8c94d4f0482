"""Fixtures of the fault tier: the `gates` fixture, the seed (RATCHET_FAULT_SEED
reruns a failed scenario exactly), and the folder runs are written to
(RATCHET_FAULT_DIR, default build/fault/<time>)."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from tests.fault.gates.fixture import gates  # noqa: F401 - re-exported fixture

# gRPC's fork handlers can hang fork() forever in a process whose other threads are
# inside gRPC (seen here: LocalPlatform restarting a service while the workload's
# clients are busy). Off, unless the environment already decided. This only takes
# effect if grpc was not imported yet, hence also set by `make chaos`.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fault_seed(default: int) -> int:
    """The seed for a scenario: RATCHET_FAULT_SEED when set (a rerun), else the scenario's default."""
    return int(os.environ.get("RATCHET_FAULT_SEED", default))


@pytest.fixture(scope="session")
def fault_root() -> pathlib.Path:
    base = os.environ.get("RATCHET_FAULT_DIR") or str(ROOT / "build" / "fault" / time.strftime("%Y%m%d-%H%M%S"))
    # Absolute: the path travels in task payloads (the ledger) to sandboxes, whose working
    # folder is their app bundle (`make chaos` passes a relative RATCHET_FAULT_DIR).
    path = pathlib.Path(base).resolve()
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o777)
    return path
