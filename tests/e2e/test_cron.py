"""Cron end to end on the real mesh: schedules through the gateway, slots
fired by the cron process, tasks run by the host agent whose handler reads
ctx.scheduled_time. Across a SIGKILL of cron, two cron processes at once,
and a downtime longer than the catch-up window, no slot fires twice and no
slot is missed outside the catch-up policy.

Each test uses its own tenant and deploys a tiny app that appends every run
(task id, schedule id, scheduled time) to a ledger file, so the tests see
exactly what handlers saw.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from ratchet.client import Client, InvalidArgument
from ratchet.libs.pg.cluster import free_port
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.timeout(120)
UTC = dt.UTC
SEND_LEASE_S = 3.0  # the cron service's default send_lease_s

APP = textwrap.dedent('''
    import json

    from ratchet import task


    @task
    def cron_tick(ctx, payload):
        """Append what the platform told this run about its slot to the ledger."""
        scheduled = getattr(ctx, "scheduled_time", None)
        line = {"task_id": ctx.task_id, "attempt": ctx.attempt,
                "schedule_id": getattr(ctx, "schedule_id", None),
                "scheduled_time": scheduled.isoformat() if scheduled else None}
        with open(payload["ledger"], "a") as f:
            f.write(json.dumps(line) + "\\n")
        return line
''')


class Tenant:
    """A tenant of its own with the ledger app deployed, and a client for it."""

    def __init__(self, plat, root: pathlib.Path):
        info = plat.admin_client().create_tenant(f"cron-{uuid.uuid4().hex[:10]}")
        self.plat, self.api_key = plat, info["api_key"]
        app_dir = root / "app"
        app_dir.mkdir()
        (app_dir / "app.py").write_text(APP)
        env = {**os.environ, "RATCHET_ENDPOINT": plat.grpc_address("gateway"), "RATCHET_API_KEY": self.api_key}
        res = subprocess.run([sys.executable, "-m", "ratchet.cli", "deploy", str(app_dir), "--app", info["app"]],
                             env=env, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        self.client = Client(plat.grpc_address("gateway"), self.api_key)

    def ledger(self, path: pathlib.Path) -> list[dict]:
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def tenant(platform):
    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-e2e-cron-"))
    os.chmod(root, 0o777)
    t = Tenant(platform, root)
    t.root = root
    yield t
    t.client.close()


def runs_by_slot(entries: list[dict]) -> dict[dt.datetime, set[str]]:
    """scheduled_time -> the distinct task ids that ran for it (a task may run twice; a slot may not)."""
    out: dict[dt.datetime, set[str]] = {}
    for e in entries:
        out.setdefault(dt.datetime.fromisoformat(e["scheduled_time"]), set()).add(e["task_id"])
    return out


def cron_slots(plat, schedule_id: str) -> list[dict]:
    """The cron database's record of the schedule's slots."""
    async def fetch():
        conn = await asyncpg.connect(plat.cluster.dsn("ratchet_cron"), timeout=10)
        try:
            rows = await conn.fetch("SELECT slot, kind, state, task_id FROM schedule_slots WHERE schedule_id = $1 "
                                    "ORDER BY slot", schedule_id, timeout=10)
        finally:
            await conn.close()
        return [dict(r) for r in rows]
    return asyncio.run(fetch())


def expected_slots(first: dt.datetime, last: dt.datetime, every_s: int) -> list[dt.datetime]:
    out, t = [], first
    while t <= last:
        out.append(t)
        t += dt.timedelta(seconds=every_s)
    return out


def check_once_per_slot(tenant: Tenant, ledger: pathlib.Path, schedule_id: str) -> dict[dt.datetime, str]:
    """Every slot ran as exactly one task whose handler saw that slot; returns slot -> task id."""
    entries = tenant.ledger(ledger)
    assert entries, "no runs"
    assert {e["schedule_id"] for e in entries} == {schedule_id}
    by_slot = runs_by_slot(entries)
    doubled = {s: ids for s, ids in by_slot.items() if len(ids) > 1}
    assert not doubled, f"slots fired twice: {doubled}"
    fired = {r["slot"]: r["task_id"] for r in cron_slots(tenant.plat, schedule_id) if r["state"] == "FIRED"}
    ran = {s: next(iter(ids)) for s, ids in by_slot.items()}
    assert set(ran.items()) <= set(fired.items()), "a handler saw a slot or task the cron service did not fire"
    return ran


def settle(tenant: Tenant, schedule_id: str, ledger: pathlib.Path) -> None:
    """Pause, then wait until every fired slot's task has run."""
    tenant.client.pause_schedule(schedule_id)
    def done():
        fired = [r for r in cron_slots(tenant.plat, schedule_id) if r["state"] == "FIRED"]
        open_ = [r for r in cron_slots(tenant.plat, schedule_id) if r["state"] in ("PENDING", "SENDING")]
        return not open_ and {r["task_id"] for r in fired} <= {e["task_id"] for e in tenant.ledger(ledger)}
    wait_for(done, timeout=30, what="every fired slot's task to run")


def test_cron_serves_health_and_reflection(platform):
    with grpc.insecure_channel(platform.grpc_address("cron")) as ch:
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        [resp] = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                timeout=5))
    names = {s.name for s in resp.list_services_response.service}
    assert {"ratchet.internal.cron.v1.CronService", "grpc.health.v1.Health"} <= names


def test_bad_schedules_are_refused_through_the_gateway(tenant):
    for cron, tz, message in (("0 0 30 2 *", "UTC", "never fires"),
                              ("61 * * * *", "UTC", "out of range for the minute field (allowed 0-59)"),
                              ("* * * * *", "Nowhere/City", "unknown time zone"),
                              ("*/5 * * *", "UTC", "expected 5")):
        with pytest.raises(InvalidArgument) as err:
            tenant.client.create_schedule(cron, "cron_tick", {}, timezone=tz)
        assert message in str(err.value)


def test_trigger_runs_the_handler_with_its_scheduled_time(tenant):
    ledger = tenant.root / "trigger.jsonl"
    s = tenant.client.create_schedule("0 0 1 1 *", "cron_tick", {"ledger": str(ledger)})
    before = dt.datetime.now(UTC)
    result = tenant.client.trigger_schedule(s.schedule_id)
    assert result.task_id and not result.skipped
    info = tenant.client.wait(result.task_id, timeout=30)
    assert info.state == "SUCCEEDED"
    seen = dt.datetime.fromisoformat(info.result["scheduled_time"])
    assert info.result["schedule_id"] == s.schedule_id and abs((seen - before).total_seconds()) < 5
    assert tenant.client.get_schedule(s.schedule_id).last_task_id == result.task_id
    tenant.client.delete_schedule(s.schedule_id)


def test_every_two_seconds_across_a_cron_sigkill(platform, tenant):
    ledger = tenant.root / "kill.jsonl"
    s = tenant.client.create_schedule("*/2 * * * * *", "cron_tick", {"ledger": str(ledger)}, catchup_window="10s")
    wait_for(lambda: len(tenant.ledger(ledger)) >= 2, timeout=20, what="two firings before the kill")
    killed_at = dt.datetime.now(UTC)
    platform.kill("cron")
    wait_for(lambda: platform.service_pid("cron") is not None and platform.health("cron") == "SERVING",
             timeout=30, what="the supervisor to restart cron")
    back_at = dt.datetime.now(UTC)
    wait_for(lambda: any(t > back_at + dt.timedelta(seconds=4) for t in runs_by_slot(tenant.ledger(ledger))),
             timeout=30, what="firings after the restart")
    settle(tenant, s.schedule_id, ledger)
    ran = check_once_per_slot(tenant, ledger, s.schedule_id)
    slots = sorted(ran)
    missing = [t for t in expected_slots(slots[0], slots[-1], 2) if t not in ran]
    # Only slots that came due while cron was down may be missing (or, if the kill landed mid-send,
    # during the send lease of 3 s after which the restarted process re-sends that slot); the newest
    # of them fires as the catch-up.
    down_until = max(back_at, killed_at + dt.timedelta(seconds=SEND_LEASE_S + 1))
    assert all(killed_at - dt.timedelta(seconds=2) <= t <= down_until for t in missing), (missing, killed_at, back_at)
    if missing:
        assert any(max(missing) < t <= down_until + dt.timedelta(seconds=2) for t in slots), "no catch-up fired"
    kinds = {r["slot"]: r["kind"] for r in cron_slots(platform, s.schedule_id)}
    assert all(kinds[t] in ("CRON", "CATCHUP") for t in slots)


def test_two_cron_processes_at_once_never_fire_a_slot_twice(platform, tenant):
    ledger = tenant.root / "two.jsonl"
    port = free_port()
    log = (tenant.root / "cron2.log").open("ab")
    second = subprocess.Popen([sys.executable, "-m", "ratchet.services.cron", "--config",
                               str(platform.config_path("cron"))],
                              env={**os.environ, "RATCHET_CRON_GRPC_PORT": str(port)}, stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: _serving(f"127.0.0.1:{port}"), timeout=30, what="the second cron process")
        s = tenant.client.create_schedule("* * * * * *", "cron_tick", {"ledger": str(ledger)})
        wait_for(lambda: len(runs_by_slot(tenant.ledger(ledger))) >= 5, timeout=30, what="five firings")
        settle(tenant, s.schedule_id, ledger)
    finally:
        second.terminate()
        try:
            second.wait(10)
        except subprocess.TimeoutExpired:
            second.kill()
            second.wait(10)
        log.close()
    assert second.returncode == 0, (tenant.root / "cron2.log").read_text()[-2000:]
    ran = check_once_per_slot(tenant, ledger, s.schedule_id)
    slots = sorted(ran)
    assert slots == expected_slots(slots[0], slots[-1], 1), "a slot was missed with both processes up"


def test_downtime_longer_than_the_catch_up_window_fires_at_most_one_catch_up(platform, tenant):
    ledger = tenant.root / "down.jsonl"
    s = tenant.client.create_schedule("* * * * * *", "cron_tick", {"ledger": str(ledger)}, catchup_window="1s")
    wait_for(lambda: len(tenant.ledger(ledger)) >= 2, timeout=20, what="firings before the downtime")
    platform.stop_service("cron")
    stopped_at = dt.datetime.now(UTC)
    time.sleep(5)  # the downtime itself: longer than catch-up window + misfire grace (1 s + 2 s)
    platform.start_service("cron")
    started_at = dt.datetime.now(UTC)
    wait_for(lambda: any(t > started_at + dt.timedelta(seconds=2) for t in runs_by_slot(tenant.ledger(ledger))),
             timeout=30, what="firings after the restart")
    settle(tenant, s.schedule_id, ledger)
    ran = sorted(check_once_per_slot(tenant, ledger, s.schedule_id))
    before = [t for t in ran if t <= stopped_at]
    first_after = next(t for t in ran if t > stopped_at)
    # Slots of the downtime were passed over, not replayed ...
    assert (first_after - before[-1]).total_seconds() - 1 >= 3, (before[-1], first_after)
    # ... except at most one catch-up, the most recent missed slot (never an old one).
    catchups = [r["slot"] for r in cron_slots(platform, s.schedule_id) if r["kind"] == "CATCHUP"]
    assert len(catchups) <= 1, catchups
    assert first_after >= stopped_at + dt.timedelta(seconds=4)
    if catchups:
        assert catchups == [first_after]


def _serving(target: str) -> bool:
    try:
        with grpc.insecure_channel(target) as ch:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
        return resp.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError:
        return False
