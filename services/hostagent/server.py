"""Wiring of the host agent: channels, components, loops and the gRPC server."""

from __future__ import annotations

import logging
import os
import pathlib

from ratchet.internal.gateway.v1 import control_pb2_grpc
from ratchet.internal.hostagent.v1 import hostagent_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2_grpc
from ratchet.libs.loops import Loops
from ratchet.libs.rpc.client import aio_channel
from ratchet.libs.rpc.server import Server
from ratchet.services.hostagent.agent import Agent
from ratchet.services.hostagent.bundles import BundleStore
from ratchet.services.hostagent.config import HostAgentConfig
from ratchet.services.hostagent.control import Deployments, bundle_fetcher
from ratchet.services.hostagent.handlers import HostAgentHandlers
from ratchet.services.hostagent.loops.completions import CompletionSender
from ratchet.services.hostagent.loops.heartbeat import HeartbeatLoop
from ratchet.services.hostagent.loops.poll import PollLoop
from ratchet.services.hostagent.pool import SandboxPool
from ratchet.services.hostagent.sandboxes import SandboxDirs
from ratchet.services.hostagent.steps import StepClient

log = logging.getLogger(__name__)

SERVICE_NAME = "ratchet.internal.hostagent.v1.HostAgentService"


class HostAgent:
    """The running host agent. `start()`, then `stop()` (graceful)."""

    def __init__(self, config: HostAgentConfig):
        self.config = config
        work_dir = pathlib.Path(config.work_dir).resolve()
        work_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(work_dir, 0o700)
        (work_dir / "bundles").mkdir(exist_ok=True)
        metadata = config.auth_metadata
        self._dispatcher_channel = aio_channel(config.dispatcher_target)
        self._control_channel = aio_channel(config.control_target)
        dispatch = worker_pb2_grpc.DispatchServiceStub(self._dispatcher_channel)
        control = control_pb2_grpc.ControlServiceStub(self._control_channel)
        self.pool = SandboxPool(dirs=SandboxDirs.under(work_dir), python=config.sandbox_python,
                                capacity=config.capacity, start_timeout_s=config.sandbox_start_timeout_s,
                                concurrency=config.sandbox_concurrency)
        self.completions = CompletionSender(stub=dispatch, worker_id=config.worker_id, metadata=metadata,
                                            rpc_timeout_s=config.rpc_timeout_s,
                                            retry_budget_s=config.completion_retry_s,
                                            on_settled=lambda task_id, epoch: self.agent.settled(task_id, epoch))
        self.agent = Agent(capacity=config.capacity,
                           deployments=Deployments(control, metadata, config.rpc_timeout_s, config.deployment_cache_s),
                           bundles=BundleStore(work_dir / "bundles",
                                               bundle_fetcher(control, metadata, config.rpc_timeout_s)),
                           pool=self.pool, submit=self.completions.submit,
                           steps=StepClient(stub=dispatch, metadata=metadata, rpc_timeout_s=config.rpc_timeout_s,
                                            retry_budget_s=config.step_retry_s, control=control))
        common = dict(agent=self.agent, stub=dispatch, worker_id=config.worker_id, metadata=metadata)
        self.poll = PollLoop(**common, max_wait_s=config.poll_max_wait_s, rpc_timeout_s=config.rpc_timeout_s,
                             linger_s=config.poll_linger_s)
        self.heartbeat = HeartbeatLoop(**common, interval_s=config.heartbeat_interval_s,
                                       rpc_timeout_s=config.rpc_timeout_s)
        self.server = Server([(hostagent_pb2_grpc.add_HostAgentServiceServicer_to_server,
                               HostAgentHandlers(config.worker_id, self.pool))],
                             [SERVICE_NAME], host=config.host, port=config.grpc_port)
        self._loops = Loops("hostagent")

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        """Serve RPCs and start the loops; SERVING once the dispatcher is reachable."""
        await self.server.start()
        for name, run in (("completions", self.completions.run), ("heartbeat", self.heartbeat.run),
                          ("poll", self.poll.run), ("serving", self._become_serving)):
            self._loops.start(name, run)
        log.info("host agent %s serving on %s:%d (capacity %d)", self.config.worker_id, self.config.host,
                 self.port, self.config.capacity)

    async def _become_serving(self) -> None:
        await self._dispatcher_channel.channel_ready()
        await self.server.set_serving(True)
        log.info("dispatcher %s reachable: SERVING", self.config.dispatcher_target)

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop polling, give running handlers the grace, deliver their
        completions, then kill what is left (its leases expire on the server)."""
        grace_s = self.config.shutdown_grace_s if grace_s is None else grace_s
        await self.server.set_serving(False)
        # Polling stops first: no new lease arrives while the running ones drain, and the
        # heartbeats and completions keep going until those are settled.
        await self._loops.stop("poll")
        await self.agent.drain(grace_s)
        await self.completions.flush(max(1.0, min(grace_s, self.config.completion_retry_s)))
        await self._loops.stop()
        await self.agent.close()
        await self.pool.close()
        await self.server.stop(1.0)
        await self._dispatcher_channel.close()
        await self._control_channel.close()
