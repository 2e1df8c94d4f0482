"""DBOS Transact (PyPI, Postgres): DBOSClient.enqueue_async from the bench process
onto a queue served by one DBOS worker process."""

from __future__ import annotations

import asyncpg

from loadtest.peers.base import PY, Peer, PeerUnavailable

# The workflow cells' queue (dbos_app registers it). It polls every 0.1 s instead of the default
# 1 s (Queue's documented polling_interval_sec): one run at a time would otherwise wait ~0.5 s for
# its dequeue, which the task cells' schedule-to-start shows already, and the idle cell's runs
# would take a second each.
WORKFLOW_QUEUE = "bench_wf"
WORKFLOW_POLL_S = 0.1


class DbosPeer(Peer):
    name = "dbos"
    label = "Postgres"
    concurrency = 0  # unlimited (see config_note)
    config_note = ("one worker process (DBOS.launch, executor_id fixed so a restarted worker recovers "
                   "its workflows), queue without a concurrency limit (with worker_concurrency 8 a 1 s poll "
                   "dequeues only the free slots: 8 workflows/s), polling_interval_sec 1.0 (default), "
                   "LISTEN/NOTIFY on (default); producer: DBOSClient.enqueue_async, no batch call")
    supports_workflows = True
    workflow_note = ("`@DBOS.workflow` calling K `@DBOS.step` functions in the worker process; runs enqueued "
                     "with DBOSClient.enqueue_async on queue bench_wf: no concurrency limit, "
                     "polling_interval_sec 0.1 (documented Queue setting; default 1.0)")
    recovery_note = ("the restarted worker (same executor_id) recovers its PENDING workflows at launch "
                     "(DBOS's documented local recovery)")

    @classmethod
    def check(cls) -> None:
        try:
            import dbos  # noqa: F401 - imported only to see that it is installed
        except ImportError:
            raise PeerUnavailable("dbos is not installed (pip install -e '.[bench]')") from None
        from importlib.metadata import version
        cls.version = version("dbos")

    async def setup(self) -> None:
        self.recreate_database()
        # The system schema is created by the first launch: run the worker once.
        self.start_worker()
        await self.wait_for_schema()
        self.stop_worker()
        self._open_client()
        self.conn = await asyncpg.connect(self.dsn(), timeout=10)

    async def wait_for_schema(self, timeout: float = 60.0) -> None:
        import asyncio
        import time
        conn = await asyncpg.connect(self.dsn(), timeout=10)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                ok = await conn.fetchval("SELECT count(*) FROM dbos.queues WHERE name = 'bench'"
                                         if await conn.fetchval("SELECT to_regclass('dbos.queues')") else
                                         "SELECT 0", timeout=10)
                if ok:
                    return
                if self.worker is not None and self.worker.poll() is not None:
                    raise RuntimeError(f"dbos worker exited: {self.worker_log_tail()}")
                await asyncio.sleep(0.2)
        finally:
            await conn.close(timeout=5)
        raise RuntimeError(f"dbos worker did not create its schema and queue in {timeout:g}s: "
                           f"{self.worker_log_tail()}")

    def _open_client(self) -> None:
        from dbos import DBOSClient
        self.client = DBOSClient(system_database_url=self.url(), system_database_pool_size=40)

    async def reconnect(self) -> None:
        self.client.destroy()
        self._open_client()

    async def teardown(self) -> None:
        self.client.destroy()
        await self.conn.close(timeout=5)

    def worker_command(self):
        return [PY, "-m", "loadtest.peers.dbos_app"], {
            "RATCHET_BENCH_URL": self.url(), "RATCHET_BENCH_CONCURRENCY": "0"}

    async def send(self, n, *, probe=None, delay_s=None, sleep_s=None):
        opts = {"queue_name": "bench", "workflow_name": "noop"}
        if delay_s is not None:
            opts["delay_seconds"] = max(0.0, delay_s)
        await self.client.enqueue_async(opts, self.payload(n, probe, sleep_s))

    async def start_run(self, n, payload):
        await self.client.enqueue_async({"queue_name": WORKFLOW_QUEUE, "workflow_name": "steps"}, payload)

    async def remaining(self) -> int:
        self.probe_queries += 1
        return int(await self.conn.fetchval(
            "SELECT count(*) FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'PENDING', 'DELAYED')",
            timeout=30))
