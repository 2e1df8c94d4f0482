"""The host agent's RPC edge: ListSandboxes. Errors become the call's status at the
shared edge (libs/rpc/errors.rpc)."""

from __future__ import annotations

import grpc

from ratchet.internal.hostagent.v1 import hostagent_pb2, hostagent_pb2_grpc
from ratchet.libs.rpc.errors import rpc
from ratchet.services.hostagent.pool import SandboxPool


class HostAgentHandlers(hostagent_pb2_grpc.HostAgentServiceServicer):
    """Serves HostAgentService from the agent's sandbox pool."""

    def __init__(self, worker_id: str, pool: SandboxPool):
        self._worker_id, self._pool = worker_id, pool

    @rpc
    async def ListSandboxes(self, request: hostagent_pb2.ListSandboxesRequest,
                            context: grpc.aio.ServicerContext) -> hostagent_pb2.ListSandboxesResponse:
        # One entry per task in flight (a sandbox runs up to sandbox_concurrency of them), one
        # with an empty task_id for an idle sandbox.
        return hostagent_pb2.ListSandboxesResponse(worker_id=self._worker_id, sandboxes=[
            hostagent_pb2.Sandbox(sandbox_id=s.sandbox_id, pid=s.pid, app_id=s.app_id, digest=s.digest,
                                  task_id=task_id, attempt=attempt)
            for s in self._pool.sandboxes() for task_id, attempt in (s.running() or [("", 0)])])
