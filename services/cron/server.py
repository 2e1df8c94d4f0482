"""Wiring: migrate ratchet_cron, pool it, dial the gateway and history, serve
CronService with health and reflection, run the loops, stop gracefully."""

from __future__ import annotations

import logging
import pathlib

from ratchet.internal.cron.v1 import cron_pb2, cron_pb2_grpc
from ratchet.libs.clock import Clock, SystemClock
from ratchet.libs.loops import Loops
from ratchet.libs.pg import migrate
from ratchet.libs.pg.pool import create_pool
from ratchet.libs.rpc.client import aio_channel
from ratchet.libs.rpc.server import Server
from ratchet.services.cron.config import CronConfig
from ratchet.services.cron.delivery import Delivery
from ratchet.services.cron.handlers import CronServicer
from ratchet.services.cron.loops.deliver import DeliverLoop
from ratchet.services.cron.loops.fire import FireLoop
from ratchet.services.cron.loops.prune import PruneLoop
from ratchet.services.cron.peers import Gateway, History
from ratchet.services.cron.schedules import ScheduleApi
from ratchet.services.cron.store import Hook, Store

log = logging.getLogger(__name__)

MIGRATIONS = pathlib.Path(__file__).with_name("migrations")
SERVICE_NAME = cron_pb2.DESCRIPTOR.services_by_name["CronService"].full_name


class CronServer:
    """One cron process. Several may run against one database at once.

    hooks (tests only): named-query hooks passed to the store.
    """

    def __init__(self, config: CronConfig, clock: Clock | None = None, hooks: dict[str, Hook] | None = None):
        self.config = config
        self.clock = clock or SystemClock()
        self.hooks = hooks if hooks is not None else {}
        self.store: Store | None = None
        self.api: ScheduleApi | None = None
        self.fire: FireLoop | None = None
        self.deliver: DeliverLoop | None = None
        self._pool = None
        self._channels: list = []
        self._rpc: Server | None = None
        # A loop that dies of a bug comes back: without the fire loop no schedule fires.
        self._loops = Loops("cron", self.clock)

    @property
    def port(self) -> int:
        return self._rpc.port if self._rpc else 0

    @property
    def target(self) -> str:
        return f"{self.config.host}:{self.port}"

    async def start(self) -> None:
        """Migrate, connect, serve (SERVING once the database is ready) and start the loops."""
        c = self.config
        await migrate.apply(c.dsn, "cron", MIGRATIONS)
        self._pool = await create_pool(c.dsn, max_size=c.pool_max_size,
                                       statement_timeout_ms=int(c.rpc_timeout_s * 1000),
                                       command_timeout=c.rpc_timeout_s + 1)
        self.store = Store(self._pool, c.rpc_timeout_s, self.hooks)
        gateway_channel, history_channel = aio_channel(c.gateway_target), aio_channel(c.history_target)
        self._channels = [gateway_channel, history_channel]
        delivery = Delivery(self.store, Gateway(gateway_channel, c.mesh_token, c.rpc_timeout_s),
                            History(history_channel, c.shard_ids, c.rpc_timeout_s), c.buffer_check_s,
                            send_lease_s=c.send_lease_s)
        self.api = ScheduleApi(self.store, delivery, c.min_interval_s)
        self._rpc = Server([(cron_pb2_grpc.add_CronServiceServicer_to_server, CronServicer(self.api))],
                           [SERVICE_NAME], host=c.host, port=c.grpc_port)
        deliver = DeliverLoop(self.store, delivery, c.tick_interval_s, c.batch_size, c.delivery_concurrency,
                              idle_s=c.idle_interval_s)
        fire = FireLoop(self.store, c.tick_interval_s, c.batch_size, c.misfire_grace_s, deliver.wake, self.clock,
                        idle_s=c.idle_interval_s)
        deliver.on_delivered = fire.wake  # a closed slot may make its schedule claimable
        self.api.on_change = fire.wake  # a schedule created or resumed here: look now
        self.fire, self.deliver = fire, deliver
        prune = PruneLoop(self.store, c.slot_retention_s, self.clock)
        await self._rpc.start()
        for name, run in (("fire", fire.run), ("deliver", deliver.run), ("prune", prune.run)):
            self._loops.start(name, run)
        await self._rpc.set_serving(True)
        log.info("cron serving on %s (gateway %s, history %s, shards %s)", self.target, c.gateway_target,
                 c.history_target, c.shard_ids)

    async def stop(self, grace: float = 5.0) -> None:
        """NOT_SERVING, stop the loops, let in-flight calls finish within grace, release everything."""
        if self._rpc is not None:
            await self._rpc.set_serving(False)
        await self._loops.stop()
        if self._rpc is not None:
            await self._rpc.server.stop(grace)
        for channel in self._channels:
            await channel.close()
        if self._pool is not None:
            await self._pool.close()
        log.info("cron stopped")
