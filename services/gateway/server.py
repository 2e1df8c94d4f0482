"""Wiring: the control DB pool, the history channel, the domain objects, and
the two listeners (gRPC with health + reflection, REST) over one set of handlers."""

from __future__ import annotations

import asyncio
import logging
import pathlib

import grpc
from aiohttp import web
from google.protobuf import descriptor as _descriptor
from google.protobuf import message_factory
from google.protobuf.message import Message

from ratchet.libs.pg import migrate
from ratchet.libs.pg.pool import create_pool
from ratchet.libs.rpc import callstream, errors
from ratchet.libs.rpc.client import aio_channel
from ratchet.libs.rpc.server import Server
from ratchet.libs.shardmap import ShardMap
from ratchet.services.gateway import handlers
from ratchet.services.gateway.auth import Authenticator
from ratchet.services.gateway.breakers import BreakerApi
from ratchet.services.gateway.bulk import BulkApi
from ratchet.services.gateway.bundles import LocalBlobStore
from ratchet.services.gateway.children import ChildrenApi
from ratchet.services.gateway.config import GatewayConfig
from ratchet.services.gateway.deployments import Deployments
from ratchet.services.gateway.history_client import HistoryClient
from ratchet.services.gateway.listing import TaskLister
from ratchet.services.gateway.preflight import Preflight
from ratchet.services.gateway.rest.app import RestServer
from ratchet.services.gateway.schedules import ScheduleApi
from ratchet.services.gateway.store import ControlStore
from ratchet.services.gateway.tasks import TaskApi
from ratchet.services.gateway.workflows import WorkflowApi

log = logging.getLogger(__name__)
MIGRATIONS = pathlib.Path(__file__).with_name("migrations")


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    """The call's metadata, keys in lower case (binary values left out)."""
    return {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def _unary(fn: handlers.Handler, rpc_timeout_s: float):
    """A grpc.aio method over a transport-neutral handler."""
    async def call(request, context: grpc.aio.ServicerContext):
        left = context.time_remaining()
        # The caller's deadline bounds ours, so we never work past their giving up.
        timeout = rpc_timeout_s if left is None else max(0.001, min(rpc_timeout_s, left))
        try:
            return await handlers.invoke(fn, request, handlers.Call(_metadata(context), timeout))
        except errors.ServiceError as e:
            if e.http_status >= 500:
                log.warning("%s -> %s: %s", getattr(fn, "__qualname__", fn), e.code.name, e.message)
            await errors.abort(context, e, getattr(fn, "__name__", str(fn)))
    return call


def _error_of(exc: BaseException, method: str) -> errors.ServiceError:
    """A call's failure on a call stream, as the unary RPC would have failed (status_of), except
    the stream's own per-call timeout, which says what to do about the unknown outcome."""
    if isinstance(exc, TimeoutError):
        return errors.DeadlineExceeded(f"the {method} call did not finish within its timeout; it may or may not "
                                       f"have taken effect: retry it with the same idempotency_key or task_id")
    return errors.status_of(exc, method)


Route = tuple[str, handlers.Handler, str]  # (request field, handler, response field)


class _CallStream:
    """A call stream (libs/rpc/callstream) whose calls are calls of unary handlers.

    The request message carries `calls` ({call_id, <one request field>, timeout_ms}), the
    response `answers` ({call_id, <the matching response field> | error}); routes lists
    (request field, handler, response field), the first being a call that sets no field.
    The stream's metadata (the API key) goes with every call; each call is bounded by its
    own timeout_ms and the gateway's rpc timeout, as a unary call is. `serve` is the
    grpc.aio method."""

    def __init__(self, routes: list[Route], m: _descriptor.MethodDescriptor, rpc_timeout_s: float,
                 stopping: asyncio.Event):
        self.routes, self.method, self.rpc_timeout_s, self.stopping = routes, m.name, rpc_timeout_s, stopping
        self.response_cls = message_factory.GetMessageClass(m.output_type)
        self.answer_cls = message_factory.GetMessageClass(m.output_type.fields_by_name["answers"].message_type)

    def route(self, call) -> Route:
        """The route of the one request field the call sets."""
        first = self.routes[0]
        for r in self.routes[1:]:
            if call.HasField(r[0]):
                if call.HasField(first[0]):
                    names = " and ".join(field for field, _, _ in self.routes)
                    raise errors.InvalidArgument(f"a call sets {first[0]} and {r[0]}: set one of {names}")
                return r
        return first

    def timeout_of(self, call) -> float:
        return min(self.rpc_timeout_s, call.timeout_ms / 1000) if call.timeout_ms else self.rpc_timeout_s

    async def handle(self, call, metadata: dict[str, str]) -> tuple[str, Message]:
        """(answer field, response) of the call."""
        field, fn, out = self.route(call)
        return out, await handlers.invoke(fn, getattr(call, field), handlers.Call(metadata, self.timeout_of(call)))

    def answer(self, call, result: tuple[str, Message] | None, err: errors.ServiceError | None):
        if err is None:
            out, response = result
            return self.answer_cls(call_id=call.call_id, **{out: response})
        if err.http_status >= 500:
            log.warning("%s call -> %s: %s", self.method, err.code.name, err.message)
        return self.answer_cls(call_id=call.call_id, error={
            "code": err.code.value[0], "message": err.message,
            "fields": {k: str(v) for k, v in err.fields.items()}})

    async def serve(self, request_iterator, context: grpc.aio.ServicerContext):
        metadata = _metadata(context)
        # Headers first: a caller waits for them before it writes a call on the stream.
        await context.send_initial_metadata(((callstream.STREAM_HEADER, callstream.CONTRACT),))
        async for reply in callstream.serve(
                request_iterator, lambda call: self.handle(call, metadata),
                self.answer, self.timeout_of, self.method, self.stopping, _error_of, calls_of=lambda msg: msg.calls,
                frame=lambda answers: self.response_cls(answers=answers)):
            yield reply


def servicer(h: object, rpc_timeout_s: float, stopping: asyncio.Event) -> object:
    """An object with one coroutine per RPC of h.service, for add_XxxServicer_to_server.

    A streaming RPC must be a call stream of the service's unary RPCs, named in
    h.call_streams (stream method -> (call field, unary method, answer field), ...)."""
    class Servicer:
        pass
    s = Servicer()
    for m in h.service.methods:
        if m.client_streaming or m.server_streaming:
            routes = getattr(h, "call_streams", {}).get(m.name)
            if routes is None:
                raise RuntimeError(f"{type(h).__name__} has no call stream for {m.full_name}")
            setattr(s, m.name, _CallStream([(f, getattr(h, u), a) for f, u, a in routes], m,
                                           rpc_timeout_s, stopping).serve)
        else:
            setattr(s, m.name, _unary(handlers.method(h, m), rpc_timeout_s))
    return s


class Gateway:
    """The whole service; start() then stop(). Ports are known after start()."""

    def __init__(self, config: GatewayConfig):
        self.config = config
        self.grpc_port = 0
        self.rest_port = 0
        self._pool = None
        self._channel = None
        self._history: HistoryClient | None = None
        self._cron_channel = None
        self._dispatcher_channel = None
        self._grpc: Server | None = None
        self._stopping = asyncio.Event()  # set at shutdown: call streams stop reading and end with OK
        self._rest_runner: web.AppRunner | None = None

    async def start(self) -> None:
        c = self.config
        await migrate.apply(c.control_dsn, "gateway", MIGRATIONS)
        self._pool = await create_pool(c.control_dsn, max_size=10,
                                       statement_timeout_ms=int(c.rpc_timeout_s * 1000),
                                       command_timeout=c.rpc_timeout_s + 1)
        store = ControlStore(self._pool, timeout_s=c.rpc_timeout_s)
        auth = Authenticator(store, c.admin_key_sha256, c.host_token_sha256, c.auth_cache_s)
        self._channel = aio_channel(c.history_target)
        # Cron and dispatcher are optional peers: without a target their APIs answer UNAVAILABLE.
        self._cron_channel = aio_channel(c.cron_target) if c.cron_target else None
        self._dispatcher_channel = aio_channel(c.dispatcher_target) if c.dispatcher_target else None
        history = self._history = HistoryClient(self._channel, c.history_target, c.enqueue_stream)
        deployments = Deployments(store, LocalBlobStore(c.blob_dir), c.max_bundle_bytes,
                                  preflight=Preflight(history, c.shard_ids))
        shard_map = ShardMap.even(c.shard_ids)
        task_api = TaskApi(history, shard_map, deployments, c.max_payload_bytes,
                           calls_in_flight=c.enqueue_calls_in_flight)
        workflow_api = WorkflowApi(task_api, history, shard_map, c.shard_ids, deployments, c.max_payload_bytes)
        public = [handlers.TaskHandlers(auth, task_api, TaskLister(history, c.shard_ids),
                                        BulkApi(history, c.shard_ids, deployments)),
                  handlers.WorkflowHandlers(auth, workflow_api),
                  handlers.BreakerHandlers(auth, BreakerApi(self._dispatcher_channel, c.dispatcher_target)),
                  handlers.ScheduleHandlers(auth, ScheduleApi(self._cron_channel, c.cron_target, deployments,
                                                              c.max_payload_bytes)),
                  handlers.AppHandlers(auth, deployments), handlers.TenantHandlers(auth, store)]
        children = ChildrenApi(task_api.creates, history, shard_map, deployments, c.max_payload_bytes)
        internal = [handlers.ControlHandlers(auth, deployments, task_api, children)]
        every = public + internal
        self._grpc = Server([(h.add_to_server, servicer(h, c.rpc_timeout_s, self._stopping))
                             for h in every],
                            [h.service.full_name for h in every], host=c.host, port=c.grpc_port)
        self.grpc_port = self._grpc.port
        rest = RestServer(public, c.rpc_timeout_s, c.max_bundle_bytes)
        self._rest_runner = web.AppRunner(rest.app(), access_log=None)
        await self._rest_runner.setup()
        site = web.TCPSite(self._rest_runner, c.host, c.rest_port)
        await site.start()
        self.rest_port = site._server.sockets[0].getsockname()[1]
        await self._grpc.start()
        await self._grpc.set_serving(True)
        log.info("gateway serving: gRPC %s:%d, REST http://%s:%d (shards %s, history %s, cron %s, dispatcher %s)",
                 c.host, self.grpc_port, c.host, self.rest_port, c.shard_ids, c.history_target,
                 c.cron_target or "-", c.dispatcher_target or "-")

    async def stop(self, grace: float = 5.0) -> None:
        """Stop taking calls, let in-flight ones finish within grace, then release everything."""
        self._stopping.set()
        if self._grpc is not None:
            await self._grpc.stop(grace)
        if self._rest_runner is not None:
            await self._rest_runner.cleanup()
        if self._history is not None:
            await self._history.close()
        for channel in (self._channel, self._cron_channel, self._dispatcher_channel):
            if channel is not None:
                await channel.close()
        if self._pool is not None:
            await self._pool.close()
