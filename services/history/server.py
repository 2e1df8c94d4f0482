"""Wiring of the history service: shards, store, ready hub, gRPC server
(with health and reflection), the shard reconnect loop, the timer loop, the
bulk operation loop and the fan-out loop."""

from __future__ import annotations

import logging
import random

from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc
from ratchet.libs.loops import Loops
from ratchet.libs.rpc.server import Server
from ratchet.libs.shardmap import ShardMap
from ratchet.services.history.config import HistoryConfig
from ratchet.services.history.handlers import HistoryServicer
from ratchet.services.history.loops.bulk import BulkLoop
from ratchet.services.history.loops.fanout import FanoutLoop
from ratchet.services.history.loops.shard_connect import ShardConnectLoop
from ratchet.services.history.loops.timers import TimerLoop
from ratchet.services.history.ready import ReadyHub
from ratchet.services.history.shards import ShardSet
from ratchet.services.history.store import Store
from ratchet.services.history.workflows.fanout import Mesh

log = logging.getLogger(__name__)

SERVICE_NAME = history_pb2.DESCRIPTOR.services_by_name["HistoryService"].full_name


class HistoryServer:
    """A running history service. `await start()`, then `port`; `await stop()`.

    timer_loop=False starts no timer loop: timers fire only when something calls
    `timers.fire(shard)` (tests that race firers by hand); fanout_loop=False likewise starts no
    fan-out delivery loop (`fanout.round(shard)` by hand)."""

    def __init__(self, cfg: HistoryConfig, *, rand: random.Random | None = None, reconnect_interval_s: float = 1.0,
                 timer_loop: bool = True, fanout_loop: bool = True):
        self.cfg = cfg
        self.shards = ShardSet(cfg)
        self.store = Store()
        self.hub = ReadyHub()
        self.bulk = BulkLoop(cfg, self.shards, self.store, self.hub)
        self.servicer = HistoryServicer(cfg, self.shards, self.store, self.hub, rand, on_bulk_start=self.bulk.wake)
        self.timers = TimerLoop(self.shards, self.store, self.hub, cfg.cancel_grace_s, self.servicer.rand)
        self.hub.on_timer = self.timers.due  # a commit's timer wakes its shard's loop, in-process
        # Ids route as the gateway routes them (ShardMap.even over the shard ids).
        self.mesh = Mesh(self.shards, self.store, ShardMap.even(self.shards.ids), self.hub.publish,
                         self.hub.timer_due, cfg.cancel_grace_s)
        self.fanout = FanoutLoop(self.mesh)
        self.store.on_child_end = self.fanout.wake  # a child's end wakes the delivery, in-process
        self.servicer.mesh = self.mesh
        self._timer_loop = timer_loop
        self._fanout_loop = fanout_loop
        self.rpc = Server([(history_pb2_grpc.add_HistoryServiceServicer_to_server, self.servicer)],
                          [SERVICE_NAME], host=cfg.host, port=cfg.grpc_port)
        self.reconnect = ShardConnectLoop(self.shards, reconnect_interval_s, on_connected=self._connected)
        self._loops = Loops("history")

    @property
    def port(self) -> int:
        """The bound gRPC port."""
        return self.rpc.port

    @property
    def address(self) -> str:
        """host:port of the gRPC server."""
        return f"{self.cfg.host}:{self.port}"

    def _connected(self) -> None:
        """A shard connected late: its operations and its timers resume now."""
        self.bulk.wake()
        self.timers.wake_all()
        self.fanout.wake()

    async def start(self) -> None:
        """Migrate and connect every reachable shard, then serve; unreachable shards keep retrying."""
        await self.shards.connect_all()
        self._loops.start("shard-connect", self.reconnect.run)
        if self._timer_loop:
            self._loops.start("timers", self.timers.run)
        self._loops.start("bulk", self.bulk.run)
        if self._fanout_loop:
            self._loops.start("fanout", self.fanout.run)
        await self.rpc.start()
        await self.rpc.set_serving(True)
        log.info("history serving on %s for shards %s", self.address, self.shards.ids)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop serving: end WatchReady and call streams, drain RPCs, close pools."""
        self.hub.close()
        self.servicer.stopping.set()
        await self.rpc.stop(grace)
        await self.servicer.creates.close()
        await self._loops.stop()
        await self.shards.close()
