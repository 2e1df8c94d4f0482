"""Temporal peer: a workflow that runs one no-op activity, and the worker process.

`python -m loadtest.peers.temporal_app` connects to RATCHET_BENCH_TEMPORAL
(host:port of the dev server the bench started) and serves task queue "bench".
"""

from __future__ import annotations

import asyncio
import datetime
import os
import signal

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from loadtest.peers import probe

TASK_QUEUE = "bench"
# Matched to Ratchet's 30 s lease: how long a dead worker's activity stays claimed.
START_TO_CLOSE = datetime.timedelta(seconds=30)


@activity.defn(name="noop")
async def noop_activity(payload: dict) -> None:
    """The workload: nothing, unless the bench asked for a probe or a sleep."""
    await probe.record_async(payload)


@workflow.defn(name="NoopWorkflow")
class NoopWorkflow:
    """One task = one workflow running one activity (Temporal's unit of background work)."""

    @workflow.run
    async def run(self, payload: dict) -> None:
        await workflow.execute_activity(noop_activity, payload, start_to_close_timeout=START_TO_CLOSE)


async def main() -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker
    client = await Client.connect(os.environ["RATCHET_BENCH_TEMPORAL"])
    concurrency = int(os.environ.get("RATCHET_BENCH_CONCURRENCY", "8"))
    worker = Worker(client, task_queue=TASK_QUEUE, workflows=[NoopWorkflow], activities=[noop_activity],
                    max_concurrent_activities=concurrency)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
