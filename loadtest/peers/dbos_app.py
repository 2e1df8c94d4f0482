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

QUEUE = "bench"


@DBOS.workflow(name="noop")
def noop(payload: dict) -> None:
    """The workload: nothing, unless the bench asked for a probe or a sleep."""
    probe.record(payload)


def main() -> None:
    stop = threading.Event()
    DBOS(config={"name": "ratchet-bench", "system_database_url": os.environ["RATCHET_BENCH_URL"],
                 "executor_id": "bench-worker"})
    DBOS.launch()
    # No concurrency limit: with one, a poll (every polling_interval_sec) dequeues at most the
    # free slots, so 8 slots and the default 1 s poll cap a worker at 8 workflows/s.
    limit = int(os.environ.get("RATCHET_BENCH_CONCURRENCY", "0")) or None
    DBOS.register_queue(QUEUE, worker_concurrency=limit)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy(workflow_completion_timeout_sec=5)


if __name__ == "__main__":
    main()
