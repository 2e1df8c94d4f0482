"""The host agent's RPC edge: ListSandboxes."""

from __future__ import annotations

import grpc

from ratchet.internal.hostagent.v1 import hostagent_pb2, hostagent_pb2_grpc
from ratchet.services.hostagent.errors import status_for
from ratchet.services.hostagent.pool import SandboxPool


class HostAgentHandlers(hostagent_pb2_grpc.HostAgentServiceServicer):
    """Serves HostAgentService from the agent's sandbox pool."""

    def __init__(self, worker_id: str, pool: SandboxPool):
        self._worker_id, self._pool = worker_id, pool

    async def ListSandboxes(self, request: hostagent_pb2.ListSandboxesRequest,
                            context: grpc.aio.ServicerContext) -> hostagent_pb2.ListSandboxesResponse:
        try:
            # One entry per task in flight (a sandbox runs up to sandbox_concurrency of them), one
            # with an empty task_id for an idle sandbox.
            return hostagent_pb2.ListSandboxesResponse(worker_id=self._worker_id, sandboxes=[
                hostagent_pb2.Sandbox(sandbox_id=s.sandbox_id, pid=s.pid, app_id=s.app_id, digest=s.digest,
                                      task_id=task_id, attempt=attempt)
                for s in self._pool.sandboxes() for task_id, attempt in (s.running() or [("", 0)])])
        except Exception as e:  # noqa: BLE001 -- mapped to a status in errors.py
            await context.abort(*status_for(e))
