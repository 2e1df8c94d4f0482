"""Two real cron processes (`python -m ratchet.services.cron`) on one
database against the fake gateway and history: together they fire every
slot once, and when one is SIGKILLed the other carries on without a gap
and without firing anything twice."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
from itertools import pairwise

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratchet.internal.cron.v1 import cron_pb2_grpc
from ratchet.libs.pg.cluster import free_port

from .conftest import MESH_TOKEN, SHARDS, create, slots, wait_for

pytestmark = pytest.mark.timeout(90)
UTC = dt.UTC


def _key(schedule_id: str, t: float) -> str:
    return f"sched:{schedule_id}@{dt.datetime.fromtimestamp(t, UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, UTC).isoformat()


def _gap_starts(times: list[float]) -> list[float]:
    """The first missing slot of every gap in a per-second sequence."""
    return [a + 1 for a, b in pairwise(times) if b - a > 1]


async def _serving(target: str) -> bool:
    try:
        async with grpc.aio.insecure_channel(target) as ch:
            resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
        return resp.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.aio.AioRpcError:
        return False


async def test_two_processes_fire_each_slot_once_and_survive_a_sigkill(mesh, cron_db, db, tmp_path):
    config = tmp_path / "cron.json"
    config.write_text(json.dumps({"dsn": cron_db, "gateway_target": mesh.target, "history_target": mesh.target,
                                  "shard_ids": SHARDS, "mesh_token": MESH_TOKEN, "tick_interval_s": 0.05,
                                  "rpc_timeout_s": 1.0, "misfire_grace_s": 0.5, "send_lease_s": 2.0}))
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "ratchet.services.cron", "--config", str(config)],
                              env={**os.environ, "RATCHET_CRON_GRPC_PORT": str(port)},
                              stdout=(tmp_path / f"cron{i}.log").open("wb"), stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)
             for i, port in enumerate(ports)]
    try:
        for port in ports:
            await wait_for(lambda port=port: _serving(f"127.0.0.1:{port}"), timeout=30, what=f"cron on {port}")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports[1]}") as ch:
            schedules = [await create(cron_pb2_grpc.CronServiceStub(ch), "* * * * * *") for _ in range(3)]
        await wait_for(lambda: all(len(mesh.tasks_of(s.schedule_id)) >= 3 for s in schedules), timeout=15,
                       what="three firings each with both processes up")
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        counts = {s.schedule_id: len(mesh.tasks_of(s.schedule_id)) for s in schedules}
        await wait_for(lambda: all(len(mesh.tasks_of(s.schedule_id)) >= counts[s.schedule_id] + 3
                                   for s in schedules), timeout=20, what="firing on after the kill")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)
    logs = "\n".join((tmp_path / f"cron{i}.log").read_text() for i in range(2))
    assert procs[1].returncode == 0, logs[-2000:]
    for s in schedules:
        tasks = mesh.tasks_of(s.schedule_id)
        times = [t.scheduled_time for t in tasks]
        assert len(times) == len(set(times)), "a slot fired twice"
        assert len({t.task_id for t in tasks}) == len(tasks)
        # No silent gap. The survivor takes over at once; a slot is passed over only (a) during the
        # send lease (2 s) of a slot the killed process had decided to send (that slot reaches the
        # gateway late), or (b) when a loop is so late that a newer slot is already due (on a loaded
        # machine), which the service logs as missed.
        late = [t for t in times if mesh.first_call[_key(s.schedule_id, t)] - t > 1.5]
        for first_missing in _gap_starts(times):
            logged = f"schedule {s.schedule_id}: missed slots from {_iso(first_missing)}" in logs
            assert logged or any(0 < first_missing - r <= 4 for r in late), \
                (f"slot {_iso(first_missing)} lost silently", late, logs[-3000:])
        assert all(n in (1, 2) for n in mesh.sends_of(s.schedule_id).values())
        rows = await slots(db, s.schedule_id)
        by_slot = {r["slot"].timestamp(): r for r in rows}
        for t in tasks:
            row = by_slot[t.scheduled_time]
            # A slot the gateway made a task for is FIRED with that task, or was still being sent
            # when the test stopped the survivor (SENDING: the next process resends it, deduplicated
            # by its key). Seen once in CI on a loaded machine (session 9): terminate between the
            # answer and the FIRED write.
            if row["state"] == "FIRED":
                assert row["task_id"] == t.task_id
            else:
                assert row["state"] == "SENDING", (row["state"], t)
