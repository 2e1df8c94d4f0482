"""Procrastinate peer: the app, its no-op task, and the worker process.

`python -m loadtest.peers.procrastinate_app` runs one worker with the options
the bench chose (see ProcrastinatePeer.config_note). The DSN comes from
RATCHET_BENCH_DSN.
"""

from __future__ import annotations

import asyncio
import os

import procrastinate

from loadtest.peers import probe


def make_app(pool_max: int = 10) -> procrastinate.App:
    """An App on the bench's database; pool_max bounds the producer's connections."""
    connector = procrastinate.PsycopgConnector(conninfo=os.environ["RATCHET_BENCH_DSN"],
                                               min_size=1, max_size=pool_max)
    app = procrastinate.App(connector=connector)
    app.task(name="noop", queue="bench")(noop)
    return app


async def noop(**payload) -> None:
    """The workload: nothing, unless the bench asked for a probe or a sleep."""
    await probe.record_async(payload)


async def retry_stalled(app: procrastinate.App, every_s: float) -> None:
    """Procrastinate's documented recovery: jobs of workers whose heartbeat stopped are retried
    by application code calling job_manager.get_stalled_jobs / retry_job (the docs run it as a
    periodic task; here a loop so its period can be seconds)."""
    while True:
        await asyncio.sleep(every_s)
        for job in await app.job_manager.get_stalled_jobs():
            await app.job_manager.retry_job(job)


async def main() -> None:
    concurrency = int(os.environ.get("RATCHET_BENCH_CONCURRENCY", "8"))
    app = make_app(pool_max=concurrency + 2)
    async with app.open_async():
        extra = []
        if os.environ.get("RATCHET_BENCH_RETRY_STALLED"):
            extra.append(asyncio.create_task(retry_stalled(app, float(os.environ["RATCHET_BENCH_RETRY_STALLED"]))))
        await app.run_worker_async(queues=["bench"], concurrency=concurrency, delete_jobs="successful",
                                   install_signal_handlers=True)
        for t in extra:
            t.cancel()


if __name__ == "__main__":
    asyncio.run(main())
