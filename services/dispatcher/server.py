"""Wiring: build the dispatcher from its config, serve DispatchService with
health and reflection, run the background loops, stop gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ratchet.internal.dispatcher.v1 import dispatcher_pb2 as dpb
from ratchet.internal.dispatcher.v1 import dispatcher_pb2_grpc as dgrpc
from ratchet.libs.clock import Clock, SystemClock
from ratchet.libs.rpc.client import aio_channel
from ratchet.libs.rpc.server import Server
from ratchet.services.dispatcher.auth import AuthInterceptor, TokenVerifier
from ratchet.services.dispatcher.completions import MAX_IN_FLIGHT, CompletionBatcher
from ratchet.services.dispatcher.config import DispatcherConfig
from ratchet.services.dispatcher.handlers import DispatchServicer
from ratchet.services.dispatcher.history_client import HistoryClient
from ratchet.services.dispatcher.leasing import Leaser
from ratchet.services.dispatcher.loops.tick import FallbackTick
from ratchet.services.dispatcher.loops.timers import TimerLoop
from ratchet.services.dispatcher.loops.watch import WatchLoop
from ratchet.services.dispatcher.parking import ParkingLot
from ratchet.services.dispatcher.polling import Poller
from ratchet.services.dispatcher.rotation import ShardRotation
from ratchet.services.dispatcher.shards import ShardBook

log = logging.getLogger(__name__)

SERVICE_NAME = dpb.DESCRIPTOR.services_by_name["DispatchService"].full_name
LOOP_RESTART_S = 1.0


class DispatcherServer:
    """One dispatcher process: the gRPC server plus its loops."""

    def __init__(self, config: DispatcherConfig, clock: Clock | None = None,
                 complete_max_in_flight: int | None = MAX_IN_FLIGHT):
        self.config = config
        self.clock = clock or SystemClock()
        self._channel = aio_channel(config.history_target)
        self.history = HistoryClient(self._channel, config.rpc_timeout_s, config.lease_duration_s)
        self.book = ShardBook(config.shard_ids, self.clock)
        self.lot = ParkingLot(self.clock)
        self.rotation = ShardRotation(config.shard_ids)
        self.poller = Poller(Leaser(self.history, self.book, self.clock), self.lot, self.rotation, self.clock)
        self.batcher = CompletionBatcher(self.history, complete_max_in_flight)
        servicer = DispatchServicer(self.poller, self.history, self.batcher, config.poll_max_wait_s)
        self.rpc = Server([(dgrpc.add_DispatchServiceServicer_to_server, servicer)], [SERVICE_NAME],
                          host=config.host, port=config.grpc_port,
                          interceptors=[AuthInterceptor(TokenVerifier(config.host_token_sha256))])
        self.timers = TimerLoop(self.history, config.shard_ids, config.timer_interval_s, self._ready,
                                self.clock, self.book)
        self.watch = WatchLoop(self.history, config.shard_ids, self._ready, self.clock)
        self.tick = FallbackTick(config.shard_ids, self.lot.signal, self.clock)
        self._tasks: list[asyncio.Task] = []

    @property
    def port(self) -> int:
        """The bound gRPC port."""
        return self.rpc.port

    @property
    def target(self) -> str:
        """host:port to dial."""
        return f"{self.config.host}:{self.port}"

    def _ready(self, shard_id: int) -> None:
        self.lot.signal((shard_id,))

    async def start(self) -> None:
        """Serve (health NOT_SERVING until history first answers) and start the loops."""
        await self.rpc.set_serving(False)
        await self.rpc.start()
        for name, run in (("timers", self.timers.run), ("watch", self.watch.run), ("tick", self.tick.run)):
            self._tasks.append(asyncio.create_task(self._supervise(name, run), name=f"dispatcher-{name}"))
        self._tasks.append(asyncio.create_task(self._serve_when_reachable(), name="dispatcher-health"))
        log.info("dispatcher listening on %s for shards %s (history at %s)",
                 self.target, self.config.shard_ids, self.config.history_target)

    async def _supervise(self, name: str, run) -> None:
        # A loop that dies of a bug must come back: without the timer loop no
        # lease on the shard would ever expire.
        while True:
            try:
                await run()
                return
            except Exception:
                log.exception("dispatcher %s loop crashed; restarting in %.1fs", name, LOOP_RESTART_S)
                await self.clock.sleep(LOOP_RESTART_S)

    async def _serve_when_reachable(self) -> None:
        await self.history.reachable.wait()
        await self.rpc.set_serving(True)
        log.info("history reachable: SERVING")

    async def stop(self, grace: float = 5.0) -> None:
        """Stop: NOT_SERVING, parked polls close empty, loops stop, in-flight calls finish within grace."""
        await self.rpc.set_serving(False)
        self.lot.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.rpc.server.stop(grace)
        await self.batcher.close()
        await self._channel.close()
        log.info("dispatcher stopped")

