"""graphile-worker 0.16 (npm, Node, Postgres): jobs added with its documented SQL
API (graphile_worker.add_job / add_jobs) from the bench process, one Node worker
process (library `run`) consuming."""

from __future__ import annotations

import json
import pathlib
import shutil

import asyncpg

from loadtest.peers.base import Peer, PeerUnavailable


async def _keep_session(conn) -> None:
    """No per-release reset query (asyncpg's default costs a commit per enqueue; Ratchet's pools skip it too)."""

HERE = pathlib.Path(__file__).parent / "graphile"


class GraphilePeer(Peer):
    name = "graphile-worker"
    label = "Postgres"
    supports_batch = True
    batch_with_delays = True
    concurrency = 24
    config_note = ("one Node worker process (library `run`), concurrency 24 and maxPoolSize 25 as on the "
                   "project's performance page (its localQueue batching is 0.17+; 0.18 needs a newer "
                   "Node), LISTEN/NOTIFY for new jobs, pollInterval 2 s (default) for future ones; "
                   "producer: SQL graphile_worker.add_job / add_jobs over asyncpg (the JS addJob calls "
                   "the same function)")
    recovery_note = ("jobs locked by a dead worker are unlocked only after 4 hours (graphile-worker's "
                     "fixed lock timeout); nothing else recovers them")

    @classmethod
    def check(cls) -> None:
        if not shutil.which("node"):
            raise PeerUnavailable("node is not installed (Debian package nodejs)")
        pkg = HERE / "node_modules" / "graphile-worker" / "package.json"
        if not pkg.exists():
            raise PeerUnavailable("graphile-worker is not installed: npm ci --prefix loadtest/peers/graphile")
        cls.version = json.loads(pkg.read_text())["version"]

    async def setup(self) -> None:
        self.recreate_database()
        # The worker installs its schema on start: start it once and wait for a probe.
        self.pool = await asyncpg.create_pool(self.dsn(), min_size=1, max_size=34, timeout=10,
                                              reset=_keep_session)
        self.start_worker()
        await self._wait_schema()
        await self.wait_ready()
        self.stop_worker()
        self.conn = await asyncpg.connect(self.dsn(), timeout=10)

    async def _wait_schema(self, timeout: float = 60.0) -> None:
        import asyncio
        import time
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.pool.fetchval("SELECT to_regproc('graphile_worker.add_jobs')") is not None:
                return
            if self.worker is not None and self.worker.poll() is not None:
                raise RuntimeError(f"graphile worker exited: {self.worker_log_tail()}")
            await asyncio.sleep(0.2)
        raise RuntimeError(f"graphile-worker schema not installed in {timeout:g}s: {self.worker_log_tail()}")

    async def reconnect(self) -> None:
        await self.pool.close()
        self.pool = await asyncpg.create_pool(self.dsn(), min_size=1, max_size=34, timeout=10,
                                              reset=_keep_session)

    async def teardown(self) -> None:
        await self.pool.close()
        await self.conn.close(timeout=5)

    def worker_command(self):
        return ["node", str(HERE / "worker.js")], {
            "RATCHET_BENCH_DSN": self.dsn(), "RATCHET_BENCH_CONCURRENCY": str(self.concurrency),
            "RATCHET_BENCH_POOL": str(self.concurrency + 1), "NODE_PATH": str(HERE / "node_modules")}

    async def send(self, n, *, probe=None, delay_s=None, sleep_s=None):
        payload = json.dumps(self.payload(n, probe, sleep_s))
        if delay_s is None:
            await self.pool.execute("SELECT graphile_worker.add_job('noop', $1::json)", payload, timeout=30)
        else:
            await self.pool.execute(
                "SELECT graphile_worker.add_job('noop', $1::json, run_at := now() + $2 * interval '1 second')",
                payload, max(0.0, delay_s), timeout=30)

    async def send_batch(self, first, size, *, delays=None, probes=None):
        payloads = [json.dumps(self.payload(first + i, probes[i] if probes else None)) for i in range(size)]
        delays = delays or [0.0] * size
        await self.pool.execute(
            "SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(SELECT ROW('noop', p.payload, NULL, "
            "now() + p.delay * interval '1 second', NULL, NULL, NULL, NULL)::graphile_worker.job_spec "
            "FROM unnest($1::json[], $2::float8[]) AS p(payload, delay)))",
            payloads, [max(0.0, d) for d in delays], timeout=60)

    async def remaining(self) -> int:
        self.probe_queries += 1
        return int(await self.conn.fetchval("SELECT count(*) FROM graphile_worker._private_jobs", timeout=30))
