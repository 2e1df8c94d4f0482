"""Circuit breakers end to end, on a platform of their own with small breaker
settings (3 crashes in 30 s open a breaker for a 3 s cool-down): a poison
task type whose handler kills its own sandbox trips its breaker while another
type keeps running; the breaker is visible through the SDK and REST with the
reason and the last crashes; it resumes by ResetBreaker, and by cool-down
with a single probe task."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap

import httpx
import pytest

from ratchet.cli.platform import LocalPlatform
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.timeout(120)

THRESHOLD, WINDOW_S, COOLDOWN_S = 3, 30.0, 3.0
KILLED = "sandbox process exited with signal 9 (SIGKILL) while running the handler"
OVERRIDES = {
    "history": {"lease_duration_s": 2.0, "cancel_grace_s": 2.0},
    "dispatcher": {"lease_duration_s": 2.0, "breaker_crash_threshold": THRESHOLD, "breaker_window_s": WINDOW_S,
                   "breaker_cooldown_s": COOLDOWN_S},
    "hostagent": {"heartbeat_interval_s": 0.4, "capacity": 4},
}
ONE_ATTEMPT = {"max_attempts": 1}

APP = textwrap.dedent('''
    import json
    import os
    import signal
    import time

    from ratchet import task


    @task
    def poison(ctx, payload):
        """Kills its own sandbox, unless told the bug is fixed; logs each run."""
        with open(payload["ledger"], "a") as f:
            f.write(json.dumps({"task_id": ctx.task_id, "event": "start", "at": time.time()}) + "\\n")
        if payload.get("crash", True):
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(payload.get("sleep", 0))
        with open(payload["ledger"], "a") as f:
            f.write(json.dumps({"task_id": ctx.task_id, "event": "end", "at": time.time()}) + "\\n")
        return "fixed"


    @task
    def healthy(ctx, payload):
        return payload
''')


@pytest.fixture(scope="module")
def plat():
    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-e2e-breakers-"))
    os.chmod(root, 0o755)
    p = LocalPlatform(root / "state", shards=2, overrides=OVERRIDES,
                      pg_settings={"fsync": "off", "synchronous_commit": "off"})
    p.start()
    try:
        app_dir = root / "app"
        app_dir.mkdir()
        (app_dir / "app.py").write_text(APP)
        env = {**os.environ, "RATCHET_ENDPOINT": p.grpc_address("gateway"), "RATCHET_API_KEY": p.tenant["api_key"]}
        res = subprocess.run([sys.executable, "-m", "ratchet.cli", "deploy", str(app_dir), "--app", "default"],
                             env=env, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        p.ledger = root / "ledger.jsonl"
        yield p
    finally:
        p.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def client(plat):
    with plat.client() as c:
        yield c


def breaker(client, task_type: str = "poison"):
    return next((b for b in client.list_breakers() if b.task_type == task_type), None)


def ledger(plat) -> list[dict]:
    if not plat.ledger.exists():
        return []
    return [json.loads(line) for line in plat.ledger.read_text().splitlines() if line.strip()]


def trip(plat, client) -> None:
    """THRESHOLD poison tasks crash their sandboxes: the breaker opens."""
    ids = [client.enqueue("poison", {"ledger": str(plat.ledger)}, retry=ONE_ATTEMPT) for _ in range(THRESHOLD)]
    for task_id in ids:
        info = client.wait(task_id, timeout=30)
        assert info.state == "FAILED" and info.error.error_class == "SandboxCrashed", info
    wait_for(lambda: (b := breaker(client)) is not None and b.state == "OPEN", timeout=10, what="breaker OPEN")


def test_a_poison_type_trips_its_breaker_other_types_keep_running_and_reset_resumes_it(plat, client):
    trip(plat, client)
    b = breaker(client)
    assert b.reason == f"{THRESHOLD} sandbox crashes in {WINDOW_S:g} s; last: SandboxCrashed: {KILLED}"
    assert b.crashes == THRESHOLD and len(b.last_crashes) == THRESHOLD
    assert all(c.error_class == "SandboxCrashed" and KILLED in c.message for c in b.last_crashes)
    assert b.opened_at is not None and b.probe_at is not None and b.probe_at > b.opened_at

    # The public REST API shows the same breaker.
    with httpx.Client(base_url=plat.endpoints["rest"], timeout=10,
                      headers={"Authorization": f"Bearer {plat.tenant['api_key']}"}) as http:
        r = http.get("/v1/breakers")
        assert r.status_code == 200, r.text
        (rest,) = [x for x in r.json()["breakers"] if x["task_type"] == "poison"]
        assert rest["state"] == "BREAKER_STATE_OPEN" and rest["reason"] == b.reason
        assert len(rest["last_crashes"]) == THRESHOLD

    # Paused: a poison task waits; the healthy type keeps running meanwhile.
    paused = client.enqueue("poison", {"ledger": str(plat.ledger), "crash": False}, retry=ONE_ATTEMPT)
    for i in range(5):
        assert client.wait(client.enqueue("healthy", {"n": i}), timeout=20).state == "SUCCEEDED"
    assert client.get(paused).state == "ENQUEUED"

    reset = client.reset_breaker("poison")
    assert reset.state == "CLOSED" and reset.crashes == 0
    assert client.wait(paused, timeout=20).state == "SUCCEEDED"
    assert breaker(client) is None  # closed, counts cleared: no longer listed


def test_after_the_cool_down_a_single_probe_runs_and_its_success_closes_the_breaker(plat, client):
    trip(plat, client)
    opened = breaker(client).opened_at.timestamp()
    fixed = [client.enqueue("poison", {"ledger": str(plat.ledger), "crash": False, "sleep": 1.0, "n": i},
                            retry=ONE_ATTEMPT) for i in range(3)]
    for task_id in fixed:
        assert client.wait(task_id, timeout=40).state == "SUCCEEDED"
    runs = {e["task_id"]: {} for e in ledger(plat) if e["task_id"] in fixed}
    for e in ledger(plat):
        if e["task_id"] in runs:
            runs[e["task_id"]][e["event"]] = e["at"]
    probe = min(runs, key=lambda t: runs[t]["start"])
    assert runs[probe]["start"] >= opened + COOLDOWN_S - 0.05, "the probe ran before the cool-down ended"
    # Exactly one probe: nothing else of the type started until it had finished.
    assert all(runs[t]["start"] >= runs[probe]["end"] for t in runs if t != probe), runs
    assert breaker(client) is None
