"""gRPC server bootstrap shared by every service: health checking, server
reflection, message limits, and a graceful stop on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Allocations between young-generation collections (CPython's default is 700).
GC_GEN0_THRESHOLD = 20_000

SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.so_reuseport", 0),
]


class Server:
    """A grpc.aio server with health and reflection for the given services.

    `register` pairs are (add_XxxServicer_to_server, servicer); `full_names`
    are the fully qualified service names, used for health and reflection.
    """

    def __init__(self, register: Iterable[tuple[Callable, object]], full_names: list[str],
                 host: str = "127.0.0.1", port: int = 0, interceptors: list | None = None):
        self.server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=interceptors or [])
        for add, servicer in register:
            add(servicer, self.server)
        self.health = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.full_names = list(full_names)
        reflection.enable_server_reflection(
            [*self.full_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
             reflection.SERVICE_NAME], self.server)
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise RuntimeError(f"could not bind gRPC port {host}:{port}")

    async def start(self) -> None:
        await self.server.start()

    async def set_serving(self, serving: bool = True) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ["", *self.full_names]:
            result = self.health.set(name, status)
            if asyncio.iscoroutine(result):
                await result

    async def stop(self, grace: float = 5.0) -> None:
        await self.set_serving(False)
        await self.server.stop(grace)


PARENT_PID_ENV = "RATCHET_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """If started by a supervisor that set RATCHET_PARENT_PID, get SIGTERM when
    it dies (and exit now if it is already gone).

    Done here, after exec, rather than in a preexec_fn: Python code between
    fork and exec in a process running gRPC threads can crash or deadlock the
    child (seen as hung and SIGSEGV'd service starts).
    """
    parent = os.environ.get(PARENT_PID_ENV)
    if not parent:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the supervisor's stop() still cleans up
        return
    if os.getppid() != int(parent):
        raise SystemExit(f"supervisor {parent} is gone; exiting")


def tune_gc() -> None:
    """Make the cyclic garbage collector cheap for a long-running service.

    Everything alive once the service has started (modules, descriptors, pools) is frozen
    out of the collector, and the young generation is larger: a request allocates
    hundreds of objects but almost no cycles, so CPython's defaults (a collection every
    700 allocations, a full one every 100 of those) walked every long-lived object over
    and over, stalling every request in flight while they ran.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 50, 100)


async def run_until_signal(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run main(stop_event); SIGTERM or SIGINT sets the event."""
    die_with_parent()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await main(stop)


def setup_logging(service: str, level: str = "INFO") -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")
