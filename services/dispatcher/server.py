"""Wiring: build the dispatcher from its config, migrate its database (the
circuit breakers), serve the worker plane's DispatchService and
BreakerAdminService with health and reflection, run the background loops,
stop gracefully."""

from __future__ import annotations

import logging
import os
import pathlib
import socket
import uuid

from ratchet.internal.dispatcher.v1 import dispatcher_pb2 as dpb
from ratchet.internal.dispatcher.v1 import dispatcher_pb2_grpc as dgrpc
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.internal.worker.v1 import worker_pb2_grpc as wgrpc
from ratchet.libs.clock import Clock, SystemClock
from ratchet.libs.loops import Loops
from ratchet.libs.pg import migrate
from ratchet.libs.pg.pool import create_pool
from ratchet.libs.rpc.client import aio_channel
from ratchet.libs.rpc.server import Server
from ratchet.services.dispatcher.auth import AuthInterceptor, TokenVerifier
from ratchet.services.dispatcher.breaker_gate import BreakerGate
from ratchet.services.dispatcher.breaker_keeper import BreakerKeeper
from ratchet.services.dispatcher.breakers import Settings
from ratchet.services.dispatcher.completions import MAX_IN_FLIGHT, CompletionBatcher
from ratchet.services.dispatcher.config import DispatcherConfig
from ratchet.services.dispatcher.handlers import BreakerAdminServicer, DispatchServicer
from ratchet.services.dispatcher.history_client import HistoryClient
from ratchet.services.dispatcher.leasing import Leaser
from ratchet.services.dispatcher.loops.breakers import BreakerLoop
from ratchet.services.dispatcher.loops.tick import FallbackTick
from ratchet.services.dispatcher.loops.watch import WatchLoop
from ratchet.services.dispatcher.parking import ParkingLot
from ratchet.services.dispatcher.polling import Poller
from ratchet.services.dispatcher.rotation import ShardRotation
from ratchet.services.dispatcher.shards import ShardBook
from ratchet.services.dispatcher.store import Store

log = logging.getLogger(__name__)

SERVICE_NAME = wpb.DESCRIPTOR.services_by_name["DispatchService"].full_name
ADMIN_SERVICE_NAME = dpb.DESCRIPTOR.services_by_name["BreakerAdminService"].full_name
MIGRATIONS = pathlib.Path(__file__).with_name("migrations")


def breaker_settings(config: DispatcherConfig) -> Settings:
    """Breaker tuning from the config; a probe silent for 2 lease durations lets another through."""
    return Settings(threshold=config.breaker_crash_threshold, window_s=config.breaker_window_s,
                    cooldown_s=config.breaker_cooldown_s, probe_timeout_s=2 * config.lease_duration_s)


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
        # Names this process's probe claims in the breakers table.
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.gate = BreakerGate(owner, self.clock)
        self.store = Store(None, config.rpc_timeout_s)
        self.breakers = BreakerKeeper(self.store, self.gate, breaker_settings(config), self._breakers_changed)
        self.poller = Poller(Leaser(self.history, self.book, self.clock, self.gate), self.lot, self.rotation,
                             self.clock)
        self.batcher = CompletionBatcher(self.history, complete_max_in_flight)
        servicer = DispatchServicer(self.poller, self.history, self.batcher, config.poll_max_wait_s, self.breakers)
        admin = BreakerAdminServicer(self.breakers, config.rpc_timeout_s)
        self.rpc = Server([(wgrpc.add_DispatchServiceServicer_to_server, servicer),
                           (dgrpc.add_BreakerAdminServiceServicer_to_server, admin)],
                          [SERVICE_NAME, ADMIN_SERVICE_NAME], host=config.host, port=config.grpc_port,
                          interceptors=[AuthInterceptor(TokenVerifier(config.host_token_sha256))])
        self.watch = WatchLoop(self.history, config.shard_ids, self._ready, self.clock)
        self.lot.on_demand = self.watch.demand  # ready events only while polls wait
        self.tick = FallbackTick(config.shard_ids, self.lot.signal, self.clock,
                                 live_tick_s=config.fallback_tick_live_s, live=lambda: self.watch.live)
        self.breaker_loop = BreakerLoop(self.breakers, self.clock)
        self._pool = None
        self._stopped = False
        # A loop that dies of a bug comes back: without the watch loop and the tick no
        # parked poll would wake.
        self._loops = Loops("dispatcher", self.clock)

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

    def _breakers_changed(self) -> None:
        # A breaker closed or a probe may go: paused work may be ready on any shard.
        self.lot.signal(self.config.shard_ids)

    async def start(self) -> None:
        """Migrate the breakers database and load the breakers (so no poll is
        ever served without them), then serve (health NOT_SERVING until
        history first answers) and start the loops."""
        c = self.config
        await migrate.apply(c.dsn, "dispatcher", MIGRATIONS)
        self._pool = await create_pool(c.dsn, max_size=c.pool_max_size,
                                       statement_timeout_ms=int(c.rpc_timeout_s * 1000),
                                       command_timeout=c.rpc_timeout_s + 1)
        self.store.pool = self._pool
        await self.breakers.refresh()
        await self.rpc.set_serving(False)
        await self.rpc.start()
        for name, run in (("watch", self.watch.run), ("tick", self.tick.run),
                          ("breakers", self.breaker_loop.run), ("health", self._serve_when_reachable)):
            self._loops.start(name, run)
        log.info("dispatcher listening on %s for shards %s (history at %s); %d breaker(s) not closed",
                 self.target, c.shard_ids, c.history_target, len(self.gate.breakers))

    async def _serve_when_reachable(self) -> None:
        await self.history.reachable.wait()
        await self.rpc.set_serving(True)
        log.info("history reachable: SERVING")

    async def stop(self, grace: float = 5.0) -> None:
        """Stop: NOT_SERVING, parked polls close empty, loops stop, in-flight calls finish within grace."""
        if self._stopped:
            return
        self._stopped = True
        await self.rpc.set_serving(False)
        self.lot.close()
        await self._loops.stop()
        await self.rpc.server.stop(grace)
        await self.batcher.close()
        await self._channel.close()
        # Crashes counted by the last completions should survive the restart too.
        await self.breakers.drain(timeout=min(grace, 2.0))
        if self._pool is not None:
            await self._pool.close()
        log.info("dispatcher stopped")
