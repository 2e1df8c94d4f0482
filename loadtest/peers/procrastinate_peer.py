"""Procrastinate (PyPI, Postgres): async defer / batch_defer from the bench process,
one `run_worker_async` process consuming."""

from __future__ import annotations

import datetime

import asyncpg

from loadtest.peers.base import PY, Peer, PeerUnavailable


class ProcrastinatePeer(Peer):
    name = "procrastinate"
    label = "Postgres"
    supports_batch = True
    config_note = ("one worker process, concurrency 8 (async task), LISTEN/NOTIFY on (default), "
                   "delete_jobs='successful' (the docs' advice to keep the jobs table small); "
                   "producer: App.open_async + Task.defer_async / batch_defer_async")
    recovery_note = ("stalled jobs retried by a get_stalled_jobs/retry_job loop every 1 s in the new "
                     "worker (the documented recipe); a job is stalled once its worker's heartbeat "
                     "is 30 s old (default stalled_worker_timeout)")

    @classmethod
    def check(cls) -> None:
        try:
            import procrastinate  # noqa: F401 - imported only to see that it is installed
        except ImportError:
            raise PeerUnavailable("procrastinate is not installed (pip install -e '.[bench]')") from None
        from importlib.metadata import version
        cls.version = version("procrastinate")

    async def setup(self) -> None:
        import os
        self.recreate_database()
        os.environ["RATCHET_BENCH_DSN"] = self.url()
        from loadtest.peers import procrastinate_app
        self._mod = procrastinate_app
        self.app = procrastinate_app.make_app(pool_max=34)
        await self.app.open_async()
        await self.app.schema_manager.apply_schema_async()
        self.task = self.app.tasks["noop"]
        self.conn = await asyncpg.connect(self.dsn(), timeout=10)

    async def reconnect(self) -> None:
        await self.app.close_async()
        self.app = self._mod.make_app(pool_max=34)
        await self.app.open_async()
        self.task = self.app.tasks["noop"]

    async def teardown(self) -> None:
        await self.app.close_async()
        await self.conn.close(timeout=5)

    def worker_command(self):
        return [PY, "-m", "loadtest.peers.procrastinate_app"], {
            "RATCHET_BENCH_DSN": self.url(), "RATCHET_BENCH_CONCURRENCY": str(self.concurrency),
            "RATCHET_BENCH_RETRY_STALLED": "1"}

    async def send(self, n, *, probe=None, delay_s=None, sleep_s=None):
        payload = self.payload(n, probe, sleep_s)
        if delay_s is not None:
            at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=max(0.0, delay_s))
            await self.task.configure(schedule_at=at).defer_async(**payload)
        else:
            await self.task.defer_async(**payload)

    async def send_batch(self, first, size, *, delays=None, probes=None):
        payloads = [self.payload(first + i, probes[i] if probes else None) for i in range(size)]
        if delays is None:
            await self.task.batch_defer_async(*payloads)
            return
        # batch_defer takes one schedule for the whole call: group per due instant.
        now = datetime.datetime.now(datetime.UTC)
        for p, d in zip(payloads, delays, strict=True):
            at = now + datetime.timedelta(seconds=max(0.0, d))
            await self.task.configure(schedule_at=at).defer_async(**p)

    async def remaining(self) -> int:
        self.probe_queries += 1
        return int(await self.conn.fetchval(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')", timeout=30))
