"""DBOS Transact peer: the no-op workflow and the worker process.

`python -m loadtest.peers.dbos_app` launches DBOS on the bench's system
database (RATCHET_BENCH_URL), registers the queue and serves it until SIGTERM.
"""

from __future__ import annotations

import os
import signal
import threading

from dbos import DBOS

from loadtest.peers import probe
from loadtest.peers.dbos_peer import WORKFLOW_POLL_S, WORKFLOW_QUEUE

QUEUE = "bench"


@DBOS.workflow(name="noop")
def noop(payload: dict) -> None:
    """The workload: nothing, unless the bench asked for a probe or a sleep."""
    probe.record(payload)


@DBOS.step(name="noop_step")
def noop_step() -> None:
    """One durable step that does nothing: DBOS checkpoints its (empty) output."""
    return None


@DBOS.workflow(name="steps")
def steps(payload: dict) -> None:
    """payload["steps"] no-op steps between the two probes the workflow cells time."""
    probe.mark(payload, "b")
    for _ in range(int(payload.get("steps", 10))):
        noop_step()
    probe.mark(payload, "e")


def main() -> None:
    stop = threading.Event()
    DBOS(config={"name": "ratchet-bench", "system_database_url": os.environ["RATCHET_BENCH_URL"],
                 "executor_id": "bench-worker"})
    DBOS.launch()
    # No concurrency limit: with one, a poll (every polling_interval_sec) dequeues at most the
    # free slots, so 8 slots and the default 1 s poll cap a worker at 8 workflows/s.
    limit = int(os.environ.get("RATCHET_BENCH_CONCURRENCY", "0")) or None
    DBOS.register_queue(QUEUE, worker_concurrency=limit)
    DBOS.register_queue(WORKFLOW_QUEUE, worker_concurrency=limit, polling_interval_sec=WORKFLOW_POLL_S)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy(workflow_completion_timeout_sec=5)


if __name__ == "__main__":
    main()
