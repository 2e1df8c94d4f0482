"""Temporal peer: a workflow that runs one no-op activity (the task cells), one that runs
K no-op activities (the workflow cells), and the worker process.

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


@activity.defn(name="noop_step")
async def noop_step() -> None:
    """One step of StepsWorkflow: an activity that does nothing."""
    return None


@workflow.defn(name="NoopWorkflow")
class NoopWorkflow:
    """One task = one workflow running one activity (Temporal's unit of background work)."""

    @workflow.run
    async def run(self, payload: dict) -> None:
        await workflow.execute_activity(noop_activity, payload, start_to_close_timeout=START_TO_CLOSE)


@workflow.defn(name="StepsWorkflow")
class StepsWorkflow:
    """payload["steps"] no-op activities in sequence (the workflow cells' durable steps).

    The probes are written from workflow code, as Ratchet's and DBOS's workflows write them, so
    every system is timed from the function's first line to its last; outside the sandbox's
    restrictions and never on a replay (a replayed run keeps its first times anyway)."""

    @workflow.run
    async def run(self, payload: dict) -> None:
        self._mark(payload, "b")
        for _ in range(int(payload.get("steps", 10))):
            await workflow.execute_activity(noop_step, start_to_close_timeout=START_TO_CLOSE)
        self._mark(payload, "e")

    @staticmethod
    def _mark(payload: dict, suffix: str) -> None:
        if not workflow.unsafe.is_replaying():
            with workflow.unsafe.sandbox_unrestricted():
                probe.mark(payload, suffix)


async def main() -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker
    client = await Client.connect(os.environ["RATCHET_BENCH_TEMPORAL"])
    concurrency = int(os.environ.get("RATCHET_BENCH_CONCURRENCY", "8"))
    worker = Worker(client, task_queue=TASK_QUEUE, workflows=[NoopWorkflow, StepsWorkflow],
                    activities=[noop_activity, noop_step],
                    max_concurrent_activities=concurrency)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
