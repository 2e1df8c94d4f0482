"""Properties of the mesh itself: every service answers health checks and
reflection, and dispatch is fair between tenants."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from ratchet.client import Client
from tests.e2e.conftest import APP_DIR

pytestmark = pytest.mark.timeout(180)

EXPECTED = {
    "gateway": {"ratchet.api.tasks.v1.TaskService", "ratchet.api.apps.v1.AppService",
                "ratchet.api.tenants.v1.TenantService", "ratchet.internal.gateway.v1.ControlService"},
    "history": {"ratchet.internal.history.v1.HistoryService"},
    "dispatcher": {"ratchet.internal.worker.v1.DispatchService", "ratchet.internal.dispatcher.v1.BreakerAdminService"},
    "hostagent": {"ratchet.internal.hostagent.v1.HostAgentService"},
}


@pytest.mark.parametrize("service", sorted(EXPECTED))
def test_every_service_serves_health_and_reflection(platform, service):
    with grpc.insecure_channel(platform.grpc_address(service)) as ch:
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        [resp] = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                timeout=5))
        names = {s.name for s in resp.list_services_response.service}
    assert EXPECTED[service] <= names
    assert "grpc.health.v1.Health" in names


def test_one_tenants_backlog_does_not_delay_another_tenant(platform):
    """Tenant A floods the queue; tenant B's single task starts within a round."""
    with platform.admin_client() as admin:
        b = admin.create_tenant(f"fair-{uuid.uuid4().hex[:8]}")
    _deploy_for(platform, b["api_key"])
    with platform.client() as a_client, Client(platform.grpc_address("gateway"), b["api_key"]) as b_client:
        marker = uuid.uuid4().hex
        a_ids = []
        for _ in range(3):
            a_ids += a_client.enqueue_batch([{"task_type": "sleepy", "payload": {"seconds": 0.02, "m": marker}}
                                             for _ in range(1000)])
        b_id = b_client.enqueue("echo", {"tenant": "b"})
        b_info = b_client.wait(b_id, timeout=60)
        waited = (b_info.attempts[0].started_at - b_info.created_at).total_seconds()
        # A still had most of its 3,000 tasks waiting when B's one task started.
        waiting = sum(1 for tid in a_ids[-300:] if a_client.get(tid).state == "ENQUEUED")
        assert waited < 1.0, f"tenant B waited {waited:.3f}s behind tenant A's backlog"
        assert waiting > 0, "A's backlog drained before B was measured: the test proves nothing"


def _deploy_for(platform, api_key):
    env = {**os.environ, "RATCHET_ENDPOINT": platform.grpc_address("gateway"), "RATCHET_API_KEY": api_key}
    res = subprocess.run([sys.executable, "-m", "ratchet.cli", "deploy", str(APP_DIR), "--app", "default"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
