"""Does coalescing Complete calls help? Measure, don't guess.

    .venv/bin/python tests/integration/dispatcher/bench_dispatch_complete.py [--real] [--clients 32]

Runs the dispatcher as its own process once per coalescing mode (off, or at
most K CompleteTasks calls in flight per shard before completions queue and go
out together), and drives it with N concurrent host-agent-like
clients that each complete one task per Complete call (the shape a host agent
with many sandboxes produces). Reports completions/s, the p50/p99 latency of
Complete.

--real: history is the real service (a process, on a private Postgres with
synchronous_commit on, two shards); tasks are created with CreateTasks and
leased through the dispatcher first, so every completion is a real
transaction. Without --real: an in-memory fake history process whose
CompleteTasks costs 1 ms + 20 us per completion, 8 at a time per shard (a
stand-in for a connection pool): it measures the dispatcher's own overhead.
Not collected by pytest (not named test_*).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import ClassVar

import grpc

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ratchet.internal.history.v1 import history_pb2 as hpb  # noqa: E402 - after the sys.path insert
from ratchet.internal.worker.v1 import worker_pb2 as wpb  # noqa: E402 - after the sys.path insert
from ratchet.internal.worker.v1 import worker_pb2_grpc as wgrpc  # noqa: E402 - after the sys.path insert
from ratchet.libs.pg.cluster import LocalCluster, free_port  # noqa: E402 - after the sys.path insert

TOKEN = "bench-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
PY = sys.executable


def _fake_history_main(port: int) -> None:
    """Child process: the fake history with a modelled commit cost."""
    from dispatch_fake_history import FakeHistory

    from ratchet.internal.history.v1 import history_pb2_grpc as hgrpc

    class CostlyHistory(FakeHistory):
        pools: ClassVar[dict[int, asyncio.Semaphore]] = {}

        async def CompleteTasks(self, request, context):
            async with self.pools.setdefault(request.shard_id, asyncio.Semaphore(8)):
                await asyncio.sleep(0.001 + 0.00002 * len(request.completions))
            return hpb.CompleteTasksResponse(results=[
                wpb.CompletionResult(task_id=c.task_id, accepted=True) for c in request.completions])

    async def run():
        server = grpc.aio.server()
        hgrpc.add_HistoryServiceServicer_to_server(CostlyHistory(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(run())


def _dispatcher_main(history_target: str, port: int, mode: str, shards: list[int], dsn: str) -> None:
    """Child process: one dispatcher; mode "off" (no coalescing) or the max in-flight calls per shard."""
    from ratchet.services.dispatcher.config import DispatcherConfig
    from ratchet.services.dispatcher.server import DispatcherServer

    async def run():
        config = DispatcherConfig(history_target=history_target, shard_ids=shards, grpc_port=port, dsn=dsn,
                                  host_token_sha256=[hashlib.sha256(TOKEN.encode()).hexdigest()])
        server = DispatcherServer(config, complete_max_in_flight=None if mode == "off" else int(mode))
        await server.start()
        await asyncio.Event().wait()

    asyncio.run(run())


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([PY, __file__, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise TimeoutError(f"nothing listening on {port}")


async def _drive(target: str, completions: list[wpb.Completion], clients: int) -> dict:
    """Each client sends one completion per Complete call until the list is done."""
    latencies: list[float] = []
    queue = list(reversed(completions))
    async with grpc.aio.insecure_channel(target) as channel:
        stub = wgrpc.DispatchServiceStub(channel)

        async def client(i: int):
            while queue:
                c = queue.pop()
                t0 = time.perf_counter()
                await stub.Complete(wpb.CompleteRequest(worker_id=f"bench-{i}", completions=[c]),
                                    metadata=AUTH, timeout=30)
                latencies.append(time.perf_counter() - t0)

        started = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {"per_s": round(len(completions) / elapsed), "p50_ms": round(statistics.median(latencies) * 1e3, 2),
            "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1e3, 2)}


async def _fake_run(mode: str, clients: int, n: int, dsn: str) -> dict:
    hport, dport = free_port(), free_port()
    history = _spawn("--serve-fake-history", str(hport))
    dispatcher = None
    try:
        await _wait_port(hport)
        dispatcher = _spawn("--serve-dispatcher", f"127.0.0.1:{hport}", str(dport), mode, "[0,1]", dsn)
        await _wait_port(dport)
        completions = [wpb.Completion(shard_id=i % 2, task_id=f"t{i}", lease_epoch=1,
                                      outcome=wpb.COMPLETION_OUTCOME_SUCCEEDED) for i in range(n)]
        await _drive(f"127.0.0.1:{dport}", completions[:200], clients)  # warm-up
        return await _drive(f"127.0.0.1:{dport}", completions, clients)
    finally:
        for proc in (dispatcher, history):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)


@contextlib.contextmanager
def _breakers_db():
    """The dispatcher's own database (its circuit breakers), on a private cluster."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-bench-breakers-"))
    root.chmod(0o755)
    cluster = LocalCluster(root / "data")
    cluster.ensure_started()
    try:
        cluster.create_database("bench_dispatch")
        yield cluster.dsn("bench_dispatch")
    finally:
        cluster.stop(mode="immediate")
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-fake-history":
        return _fake_history_main(int(sys.argv[2]))
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-dispatcher":
        return _dispatcher_main(sys.argv[2], int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5]), sys.argv[6])
    parser = argparse.ArgumentParser()
    parser.add_argument("--real", action="store_true", help="real history on Postgres (see module doc)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("-n", type=int, default=4000, help="completions per run")
    parser.add_argument("--modes", default="off,1,2,4", help="coalescing modes: off or max in-flight calls per shard")
    args = parser.parse_args()
    if args.real:
        from bench_dispatch_real import real_runs
        results = asyncio.run(real_runs(args.modes.split(","), args.clients, args.n, _spawn, _wait_port, _drive))
    else:
        with _breakers_db() as dsn:
            results = {f"in_flight_{m}": asyncio.run(_fake_run(m, args.clients, args.n, dsn))
                       for m in args.modes.split(",")}
    print(json.dumps({"clients": args.clients, "n": args.n, "real": args.real, **results}, indent=1))


if __name__ == "__main__":
    main()
