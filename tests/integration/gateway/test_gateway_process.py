"""`python -m ratchet.services.gateway --config FILE` migrates, serves, reports
SERVING, and exits cleanly on SIGTERM; a bad config fails naming the field."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratchet.libs.pg.cluster import free_port

from .conftest import sha

pytestmark = pytest.mark.timeout(60)


def test_runs_as_a_process_and_stops_on_sigterm(pg_cluster, tmp_path):
    name = f"gw_proc_{free_port()}"
    pg_cluster.create_database(name)
    grpc_port, rest_port = free_port(), free_port()
    cfg = {"control_dsn": pg_cluster.dsn(name), "history_target": f"127.0.0.1:{free_port()}",
           "shard_ids": [0, 1], "blob_dir": str(tmp_path / "blobs"), "admin_key_sha256": sha("a"),
           "grpc_port": grpc_port, "rest_port": rest_port}
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "ratchet.services.gateway", "--config", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        status = None
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    status = stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                    break
                except grpc.RpcError:
                    time.sleep(0.1)
        assert status == health_pb2.HealthCheckResponse.SERVING, proc.stdout.read() if proc.poll() is not None else ""
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, out
        assert "gateway serving" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_bad_config_exits_2_naming_the_field(tmp_path):
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({"control_dsn": "postgresql://x/y", "history_target": "h:1", "shard_ids": [],
                                "blob_dir": "/tmp", "admin_key_sha256": sha("a")}))
    res = subprocess.run([sys.executable, "-m", "ratchet.services.gateway", "--config", str(path)],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "shard_ids" in res.stderr
