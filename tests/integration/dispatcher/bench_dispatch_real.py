"""The --real mode of bench_dispatch_complete.py: the real history service
on a private Postgres (fsync and synchronous_commit on, as in production),
two shards. Not collected by pytest."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import grpc

from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.internal.history.v1 import history_pb2_grpc as hgrpc
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.internal.worker.v1 import worker_pb2_grpc as wgrpc
from ratchet.libs.pg.cluster import LocalCluster, free_port
from ratchet.libs.shardmap import ShardMap, new_task_id

SHARDS = [0, 1]
AUTH = (("authorization", "Bearer bench-token"),)


async def _create(history: hgrpc.HistoryServiceStub, n: int) -> None:
    shard_map = ShardMap.even(SHARDS)
    by_shard: dict[int, list[hpb.NewTask]] = {s: [] for s in SHARDS}
    for i in range(n):
        task_id = new_task_id()
        by_shard[shard_map.shard_for_task(task_id)].append(hpb.NewTask(
            task_id=task_id, tenant_id=f"tenant-{i % 7}", app_id="app", task_type="work", queue="default",
            payload_json=b"{}", fingerprint=task_id))
    for shard, tasks in by_shard.items():
        for k in range(0, len(tasks), 500):
            await history.CreateTasks(hpb.CreateTasksRequest(shard_id=shard, tasks=tasks[k:k + 500]), timeout=60)


async def _lease_all(target: str, n: int) -> list[wpb.Completion]:
    out: list[wpb.Completion] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = wgrpc.DispatchServiceStub(channel)
        while len(out) < n:
            request = wpb.PollRequest(worker_id="bench", capacity=min(1000, n - len(out)))
            request.max_wait.FromSeconds(5)
            async for message in stub.Poll(request, metadata=AUTH, timeout=30):
                out.extend(wpb.Completion(shard_id=t.shard_id, task_id=t.task_id, lease_epoch=t.lease_epoch,
                                          outcome=wpb.COMPLETION_OUTCOME_SUCCEEDED, result_json=b"{}")
                           for t in message.tasks)
    return out


async def real_runs(modes: list[str], clients: int, n: int, spawn, wait_port, drive) -> dict:
    """Completions/s through the dispatcher with and without coalescing."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-bench-disp-"))
    root.chmod(0o755)
    cluster = LocalCluster(root / "data")
    cluster.ensure_started()
    history = None
    results = {}
    try:
        shards = {}
        for s in SHARDS:
            cluster.create_database(f"bench_shard{s}")
            shards[str(s)] = cluster.dsn(f"bench_shard{s}")
        cluster.create_database("bench_dispatch")
        config = root / "history.json"
        hport = free_port()
        config.write_text(json.dumps({"shards": shards, "grpc_port": hport, "lease_duration_s": 600,
                                      "log_level": "WARNING"}))
        history = subprocess.Popen([sys.executable, "-m", "ratchet.services.history", "--config", str(config)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await wait_port(hport, 60)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{hport}") as channel:
            for mode in modes + modes:  # each mode twice, interleaved, to see the noise
                await _create(hgrpc.HistoryServiceStub(channel), n)
                dport = free_port()
                dispatcher = spawn("--serve-dispatcher", f"127.0.0.1:{hport}", str(dport), mode,
                                   json.dumps(SHARDS), cluster.dsn("bench_dispatch"))
                try:
                    await wait_port(dport)
                    completions = await _lease_all(f"127.0.0.1:{dport}", n)
                    run = await drive(f"127.0.0.1:{dport}", completions, clients)
                finally:
                    dispatcher.terminate()
                    dispatcher.wait(timeout=10)
                results.setdefault(f"in_flight_{mode}", []).append(run)
    finally:
        if history is not None:
            history.terminate()
            history.wait(timeout=15)
        cluster.stop(mode="immediate")
        shutil.rmtree(root, ignore_errors=True)
    return results
