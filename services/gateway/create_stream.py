"""CreateTasks calls to history as messages on one long-lived stream.

A unary call costs the gateway ~0.4 ms of CPU in grpc.aio and history ~0.5
ms; a message on an open stream ~0.2 ms each (docs/benchmarks/findings.md).
The enqueue path sends one CreateTasks per coalesced group, so it sends them
on history's CreateTasksStream: each call a message with its own call id and
timeout, answered once with its response or the status it failed with.

The stream is opened on first use and again after it ends. Calls the stream
ended before answering fail UNAVAILABLE and say they may have taken effect
(the caller retries with the same task ids and keys, which deduplicate).
A history that does not know the RPC (UNIMPLEMENTED: an older version
during an upgrade) gets unary calls, and the stream is tried again later.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Awaitable, Callable

import grpc

from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc

log = logging.getLogger(__name__)

# The header history's CreateTasksStream sends first, before any answer.
STREAM_HEADER = "ratchet-call-stream"
# After UNIMPLEMENTED, how long unary calls are used before the stream is tried again.
RETRY_STREAM_AFTER_S = 30.0


class StreamBroken(Exception):
    """The stream ended or failed before answering a call; the call may have taken effect."""

    def __init__(self, code: grpc.StatusCode, details: str, unsent: bool = False):
        super().__init__(details)
        # History ended the stream cleanly (OK) without answering this call: by the stream's
        # contract it never started it, so it may be sent again on a new stream.
        self.unsent = unsent
        # Whatever ended the stream, the call's outcome is unknown: UNAVAILABLE to the caller
        # (retry with the same ids and keys), except UNIMPLEMENTED, which selects unary calls.
        self.code = code if code == grpc.StatusCode.UNIMPLEMENTED else grpc.StatusCode.UNAVAILABLE
        self.details = details if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK) \
            else f"{code.name}: {details}"


class CreateStream:
    """One CreateTasksStream to history, shared by every caller; a call is a message."""

    def __init__(self, stub: history_pb2_grpc.HistoryServiceStub,
                 unary: Callable[[history_pb2.CreateTasksRequest, float], Awaitable[history_pb2.CreateTasksResponse]],
                 clock: Callable[[], float] = time.monotonic, enabled: bool = True):
        self._stub = stub
        self._unary = unary
        self._clock = clock
        self._ids = itertools.count(1)
        self._call = None
        self._reader: asyncio.Task | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._on_stream: dict[object, set[int]] = {}  # stream -> ids of the calls written on it
        self._write_lock = asyncio.Lock()
        self._unary_until = 0.0 if enabled else float("inf")  # disabled: unary calls only
        self.opened = 0  # streams opened, for tests
        self.stream_calls = 0  # calls sent as stream messages, for tests

    async def call(self, req: history_pb2.CreateTasksRequest,
                   timeout: float) -> history_pb2.CreateTasksResponse | history_pb2.CallError:
        """The call's response, or the CallError history answered it with.

        Raises StreamBroken (ambiguous: the stream ended first), asyncio.TimeoutError
        (ambiguous: no answer in time) or the unary path's grpc.aio.AioRpcError."""
        deadline = self._clock() + timeout
        for _ in range(3):  # a call history never started goes again, twice at most
            left = deadline - self._clock()
            if left <= 0:
                raise asyncio.TimeoutError()
            if self._clock() < self._unary_until:
                return await self._unary(req, left)
            try:
                return await self._call_once(req, left)
            except StreamBroken as e:
                if e.code == grpc.StatusCode.UNIMPLEMENTED:
                    return await self._fall_back(req, deadline - self._clock())
                if not e.unsent:
                    raise
                last = e
        raise last

    async def _call_once(self, req: history_pb2.CreateTasksRequest, timeout: float):
        call_id = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[call_id] = fut
        msg = history_pb2.CreateTasksStreamRequest(call_id=call_id, request=req,
                                                   timeout_ms=max(1, int(timeout * 1000)))
        try:
            await self._send(msg, timeout)
            self.stream_calls += 1
            # The answer can beat a timeout that history enforces too: allow a little slack.
            async with asyncio.timeout(timeout + 0.05):
                return await fut
        finally:
            self._pending.pop(call_id, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # retrieved: a failure this call already reported another way

    async def _fall_back(self, req, timeout: float):
        log.warning("history does not serve CreateTasksStream (an older version?): unary CreateTasks for "
                    "%.0f s", RETRY_STREAM_AFTER_S)
        self._unary_until = self._clock() + RETRY_STREAM_AFTER_S
        return await self._unary(req, timeout)

    async def _send(self, msg: history_pb2.CreateTasksStreamRequest, timeout: float) -> None:
        call = None
        try:
            async with asyncio.timeout(timeout):  # one deadline for the lock, the open and the write
                async with self._write_lock:
                    if self._call is None:
                        await self._open()
                    call = self._call
                    self._on_stream[call].add(msg.call_id)  # before the write: the stream's end fails it
                    try:
                        await call.write(msg)
                    except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as e:
                        # The stream was over before this write (history stopping or gone): the
                        # message never left, so the call may go out again on a new stream (it is
                        # idempotent by task ids and keys in any case).
                        code, details = await _final_status(call, e)
                        self._ended(call, code, details)
                        raise StreamBroken(code, details, unsent=True) from None
        except TimeoutError:
            if call is not None:
                # History is not reading (stalled, or flow control is full): the stream is no good.
                self._ended(call, grpc.StatusCode.DEADLINE_EXCEEDED, "history did not take the call in time")
            raise

    async def _open(self) -> None:
        """Open the stream and wait for history's headers (sent first thing), so a history
        without the RPC is told apart (UNIMPLEMENTED) before any call is written on it.
        Bounded by the caller's deadline."""
        call = self._stub.CreateTasksStream()
        self.opened += 1
        try:
            headers = await call.initial_metadata()
            if not any(k == STREAM_HEADER for k, _ in (headers or ())):
                # Not history's stream handler: a trailers-only answer (UNIMPLEMENTED from an
                # older history, or an error): its status says which.
                code = await call.code()
                raise StreamBroken(code, (await call.details()) or code.name)
        except grpc.aio.AioRpcError as e:
            call.cancel()
            raise StreamBroken(*_failure(e)) from None
        except BaseException:
            call.cancel()  # out of time (cancelled) or refused: never used
            raise
        self._call = call
        self._on_stream[call] = set()
        self._reader = asyncio.ensure_future(self._read(call))

    async def _read(self, call) -> None:
        code, details, unsent = grpc.StatusCode.UNAVAILABLE, "history ended the enqueue stream", False
        try:
            while True:
                reply = await call.read()
                if reply is grpc.aio.EOF:
                    # A clean end (history stopping) answers every call it started first.
                    unsent = (await call.code()) == grpc.StatusCode.OK
                    break
                self._on_stream.get(call, set()).discard(reply.call_id)
                fut = self._pending.get(reply.call_id)
                if fut is not None and not fut.done():
                    fut.set_result(reply.response if reply.WhichOneof("outcome") == "response" else reply.error)
        except asyncio.CancelledError:
            code, details = grpc.StatusCode.UNAVAILABLE, "the gateway is stopping"
            raise
        except grpc.aio.AioRpcError as e:
            code, details = _failure(e)
        finally:
            self._ended(call, code, details, unsent)

    def _ended(self, call, code: grpc.StatusCode, details: str, unsent: bool = False) -> None:
        """The stream is over: fail every call still waiting on it; the next call opens a new one."""
        if self._call is call:
            self._call = None
        call.cancel()
        for call_id in self._on_stream.pop(call, ()):
            fut = self._pending.get(call_id)
            if fut is not None and not fut.done():
                fut.set_exception(StreamBroken(code, details, unsent))

    async def close(self) -> None:
        """Cancel the stream (gateway shutdown); calls waiting on it fail."""
        call, reader = self._call, self._reader
        self._call = None
        if call is not None:
            call.cancel()
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def _final_status(call, e: BaseException) -> tuple[grpc.StatusCode, str]:
    """Why a write failed: the call's own status when it has ended (a write racing the
    server's answer fails INTERNAL in grpc core, while the call says e.g. UNIMPLEMENTED)."""
    try:
        code = await asyncio.wait_for(call.code(), 1.0)
        if code == grpc.StatusCode.OK:
            return code, "history ended the enqueue stream"
        if code is not None:
            return code, (await call.details()) or code.name
    except (asyncio.TimeoutError, grpc.aio.AioRpcError):
        pass
    return _failure(e)


def _failure(e: BaseException) -> tuple[grpc.StatusCode, str]:
    if isinstance(e, grpc.aio.AioRpcError) and e.code() != grpc.StatusCode.INTERNAL:
        return e.code(), e.details() or e.code().name
    return grpc.StatusCode.UNAVAILABLE, f"the enqueue stream to history failed: {type(e).__name__}"
