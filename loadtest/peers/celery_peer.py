"""Celery 5 with a Redis broker (PyPI + Debian redis-server), labelled not durable:
the bench starts its own redis-server (no RDB, no AOF) on a free port."""

from __future__ import annotations

import asyncio
import shutil

from loadtest.peers.base import PY, Peer, PeerUnavailable, free_port, wait_port


class CeleryPeer(Peer):
    name = "celery"
    label = "Redis, not durable"
    uses_postgres = False
    config_note = ("one worker process (`celery worker --pool threads --concurrency 8 --without-gossip "
                   "--without-mingle --without-heartbeat`, the docs' advice for a lean worker), acks_late, "
                   "prefetch multiplier 4 (default), results ignored; Redis with persistence off (the "
                   "default `save` snapshots would not make it durable either); producer: Task.apply_async")
    recovery_note = ("with acks_late the tasks of a killed worker return only after the Redis transport's "
                     "visibility_timeout (1 hour, default)")

    @classmethod
    def check(cls) -> None:
        try:
            import celery  # noqa: F401 - imported only to see that it is installed
            import redis  # noqa: F401 - imported only to see that it is installed
        except ImportError:
            raise PeerUnavailable("celery[redis] is not installed (pip install -e '.[bench]')") from None
        if not shutil.which("redis-server"):
            raise PeerUnavailable("redis-server is not installed (Debian package redis-server)")
        from importlib.metadata import version
        cls.version = version("celery")

    @property
    def dbs(self) -> list[str]:
        return []

    async def setup(self) -> None:
        self.port = free_port()
        self.start_server("redis", ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "no", "--dir", str(self.workdir),
                                    "--protected-mode", "yes"])
        await wait_port(self.port)
        self.broker = f"redis://127.0.0.1:{self.port}/0"
        from loadtest.peers import celery_app
        self.app = celery_app.make_app(self.broker)  # a new app per server: no stale connection pool
        self.task = self.app.tasks["noop"]
        import redis
        self.redis = redis.Redis(host="127.0.0.1", port=self.port)

    async def teardown(self) -> None:
        self.app.pool.force_close_all()
        self.redis.close()

    def worker_command(self):
        return [PY, "-m", "celery", "-A", "loadtest.peers.celery_app", "worker", "--pool", "threads",
                "--concurrency", str(self.concurrency), "--without-gossip", "--without-mingle",
                "--without-heartbeat", "-Q", "bench", "--loglevel", "WARNING"], {
            "RATCHET_BENCH_BROKER": self.broker}

    async def send(self, n, *, probe=None, delay_s=None, sleep_s=None):
        payload = self.payload(n, probe, sleep_s)
        if delay_s is None:
            await asyncio.to_thread(self.task.apply_async, (payload,))
        else:
            await asyncio.to_thread(self.task.apply_async, (payload,), countdown=max(0.0, delay_s))

    def _remaining(self) -> int:
        # Waiting in the queue + delivered and not yet acknowledged (late ack: not finished).
        return int(self.redis.llen("bench")) + int(self.redis.hlen("unacked"))

    async def remaining(self) -> int:
        return await asyncio.to_thread(self._remaining)
