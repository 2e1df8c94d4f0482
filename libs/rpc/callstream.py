"""Unary calls carried as messages on one bidirectional stream.

grpc.aio spends several times more CPU on a unary call, on both ends, than on
a message on an open stream (docs/benchmarks/findings.md: call streams). Two
hot paths therefore send their calls as messages on a long-lived stream: the gateway's CreateTasks to history
(CreateTasksStream) and the SDK's enqueues to the gateway (EnqueueTaskStream).
Both follow one contract, implemented here once for both sides:

* A call is `{call_id, request, timeout_ms}`: the call_id is the caller's,
  unique among its calls in flight on the stream; timeout_ms bounds the call
  from when it was sent (0: no limit but the stream's). A message carries one
  or more calls, and an answer message one or more answers (the calls that
  gathered during the previous write; see CallStream).
* The caller opens the stream with the metadata `ratchet-call-stream: 1`, and
  the server sends the same header before anything else, so a caller tells a
  server that does not serve the stream (UNIMPLEMENTED, or any error status)
  apart before it writes a call; that call fails with the server's status.
* Each call is answered once, in completion order, with the response or the
  status the unary RPC would have returned (a CallError). A call past its
  timeout is abandoned and answered DEADLINE_EXCEEDED, as a unary deadline is.
* When the caller ends the stream, calls in flight finish and are answered;
  when the server stops, it stops reading, answers what it started and ends
  with OK, so calls it never answered were never started and may be sent
  again. When the stream breaks, calls in flight are ambiguous (UNAVAILABLE:
  retry with the same ids and keys, which deduplicate).

`serve` is the server side, `CallStream` the caller's.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import grpc

# Calls one stream may have running at once; past it the stream is not read
# (HTTP/2 flow control pushes back on the sender) until one finishes.
MAX_IN_FLIGHT = 2048
# Most calls (or answers) one message carries, and about the most bytes of requests a
# caller packs into one (a single larger request still goes, alone).
MAX_FRAME_CALLS = 256
MAX_FRAME_BYTES = 1 << 20
# A request larger than this goes as a unary call: over gRPC's message limit (64 MiB) it
# would fail the whole stream (RESOURCE_EXHAUSTED ends the call), turning one caller's
# oversized request into every caller's ambiguous UNAVAILABLE, and itself into a retry
# loop; alone on a unary call it fails RESOURCE_EXHAUSTED, the error that says what to fix.
MAX_STREAM_CALL_BYTES = 32 << 20


async def serve(requests: AsyncIterator[Any], handle: Callable[[Any], Awaitable[Any]],
                answer: Callable[[Any, Any, Any], Any],
                timeout_s: Callable[[Any], float | None], method: str, stopping: asyncio.Event,
                error_of: Callable[[BaseException, str], Any], *,
                calls_of: Callable[[Any], Iterable[Any]], frame: Callable[[list[Any]], Any],
                max_in_flight: int = MAX_IN_FLIGHT) -> AsyncIterator[Any]:
    """Yield the answers of the calls read from `requests`: answer(call, result, None), or
    answer(call, None, error_of(exc, method)) when the call raised exc (what error_of returns
    is the caller's: history's (code, message), the gateway's error object). A call past
    timeout_s(call) raises asyncio.TimeoutError into error_of.

    calls_of(message) lists the calls one message carries; the answers ready at once go out
    together as frame(answers), up to MAX_FRAME_CALLS per message.

    Once `stopping` is set (server shutdown) no further request is read; the calls
    running are answered and the stream ends with OK. The caller treats calls it
    sent but never saw answered as ambiguous and sends them again (to the next server).
    """
    served = _Served(handle, answer, timeout_s, method, error_of, calls_of, max_in_flight)
    reader = asyncio.ensure_future(served.read(requests))
    stopper = asyncio.ensure_future(served.stop_reading(stopping, reader))
    try:
        async for batch in served.answers():
            yield frame(batch)
        if not served.stopped:
            await reader  # re-raises what broke the read side
    finally:
        stopper.cancel()
        if not reader.done():
            reader.cancel()
        for task in list(served.running):
            task.cancel()


class _Served:
    """One served call stream's state (see serve): the calls running and the answers ready."""

    def __init__(self, handle, answer, timeout_s, method: str, error_of, calls_of, max_in_flight: int):
        self._handle, self._answer, self._timeout_s = handle, answer, timeout_s
        self._method, self._error_of, self._calls_of = method, error_of, calls_of
        self._done: asyncio.Queue = asyncio.Queue()  # answers, then None: the stream's end
        self._slots = asyncio.Semaphore(max_in_flight)
        self.running: set[asyncio.Task] = set()
        # Whether this stream stopped because of `stopping` (set by stop_reading). Read instead
        # of the event itself: a server that clears it to serve again (a test's) must not make
        # this stream await the reader it cancelled: the CancelledError then ended the RPC
        # without a status, and the caller's next call waited on a stream nobody read (seen
        # once in CI).
        self.stopped = False

    async def _one(self, call) -> None:
        try:
            limit = self._timeout_s(call)
            if limit:
                async with asyncio.timeout(limit):  # (this is a task already: no wait_for task)
                    result = await self._handle(call)
            else:
                result = await self._handle(call)
            reply = self._answer(call, result, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the call's own answer
            reply = self._answer(call, None, self._error_of(exc, self._method))
        finally:
            self._slots.release()
        self._done.put_nowait(reply)

    async def read(self, requests: AsyncIterator[Any]) -> None:
        try:
            async for msg in requests:
                for call in self._calls_of(msg):
                    await self._slots.acquire()
                    task = asyncio.ensure_future(self._one(call))
                    self.running.add(task)
                    task.add_done_callback(self.running.discard)
            if self.running:
                await asyncio.wait(list(self.running))  # (wait, unlike gather, never cancels them)
        finally:
            if not self.stopped:
                self._done.put_nowait(None)

    async def stop_reading(self, stopping: asyncio.Event, reader: asyncio.Future) -> None:
        await stopping.wait()
        self.stopped = True
        if not reader.done():
            reader.cancel()  # an abandoned read: what it had started still runs and is answered
        if self.running:
            await asyncio.wait(list(self.running))
        self._done.put_nowait(None)

    async def answers(self) -> AsyncIterator[list[Any]]:
        """The answers ready at once, up to MAX_FRAME_CALLS a message, until the end."""
        ended = False
        while not ended:
            reply = await self._done.get()
            if reply is None:
                return
            batch = [reply]
            while not self._done.empty() and len(batch) < MAX_FRAME_CALLS:
                more = self._done.get_nowait()
                if more is None:
                    ended = True
                    break
                batch.append(more)
            yield batch


# The header a call stream's server sends first, before any answer, and the metadata its
# caller opens it with: the call-stream contract. It changes only with a change adjacent
# releases cannot share; what a release adds within it is declared in the protos
# (docs/contracts.md: the skew rule).
STREAM_HEADER = "ratchet-call-stream"
CONTRACT = "1"


class StreamBroken(Exception):
    """The stream ended or failed before answering a call; the call may have taken effect."""

    def __init__(self, code: grpc.StatusCode, details: str, unsent: bool = False):
        super().__init__(details)
        # The server ended the stream cleanly (OK) without answering this call: by the stream's
        # contract it never started it, so it may be sent again on a new stream.
        self.unsent = unsent
        # Whatever ended the stream, the call's outcome is unknown: UNAVAILABLE to the caller
        # (retry with the same ids and keys), except UNIMPLEMENTED: the server does not serve
        # the stream (a misconfigured target), which no retry changes.
        self.code = code if code == grpc.StatusCode.UNIMPLEMENTED else grpc.StatusCode.UNAVAILABLE
        self.details = details if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK) \
            else f"{code.name}: {details}"


class _GoUnary(Exception):
    """The call goes as a unary call: it is too large for a stream message
    (MAX_STREAM_CALL_BYTES)."""


class CallStream:
    """One call stream to a server, shared by every caller; a call is a message, or a
    part of one.

    open(metadata) starts the streaming RPC (a grpc.aio stream-stream call) with that
    metadata; wrap(calls) builds one request message from calls, a list of (call_id,
    request, timeout_ms); answers(reply) lists a reply's (call_id, outcome) pairs;
    unary(request, timeout) is the same call as a unary RPC, used for a request over
    MAX_STREAM_CALL_BYTES and when the stream is not enabled (a caller's choice, e.g. a
    forked process). `peer` and `method` name the two in errors.

    Callers put their calls in an outbox; one writer sends what has gathered there
    while the previous write was in progress as one message (natural batching: no
    added wait when idle, fewer and larger writes under load, where a grpc.aio write
    costs far more than the bytes it carries).
    """

    def __init__(self, open: Callable[[tuple], Any], wrap: Callable[[list[tuple[int, Any, int]]], Any],
                 answers: Callable[[Any], Iterable[tuple[int, Any]]],
                 unary: Callable[[Any, float], Awaitable[Any]], *, peer: str, method: str,
                 clock: Callable[[], float] = time.monotonic, enabled: bool = True):
        self._open_rpc = open
        self._wrap = wrap
        self._answers = answers
        self._unary = unary
        self.peer, self.method = peer, method
        self._clock = clock
        self._ids = itertools.count(1)
        self._call: grpc.aio.StreamStreamCall | None = None
        self._enabled = enabled
        self._reader: asyncio.Task | None = None
        self._writer: asyncio.Task | None = None
        self._outbox: dict[int, tuple[Any, float]] = {}  # call id -> (request, deadline): not yet written
        self._pending: dict[int, asyncio.Future] = {}
        self._on_stream: dict[object, set[int]] = {}  # stream -> ids of the calls written on it
        self.opened = 0  # streams opened, for tests
        self.stream_calls = 0  # calls sent on the stream, for tests
        self.writes = 0  # messages written, for tests

    async def call(self, req: Any, timeout: float) -> Any:
        """The call's response, or the CallError the server answered it with.

        Raises StreamBroken (ambiguous: the stream ended first; UNIMPLEMENTED: the server
        does not serve it), asyncio.TimeoutError (ambiguous: no answer in time) or the
        unary path's grpc.aio.AioRpcError."""
        deadline = self._clock() + timeout
        if not self._enabled:
            return await self._unary(req, timeout)
        for _ in range(3):  # a call the server never started goes again, twice at most
            left = deadline - self._clock()
            if left <= 0:
                raise TimeoutError()
            try:
                return await self._call_once(req, left)
            except _GoUnary:
                return await self._unary(req, deadline - self._clock())
            except StreamBroken as e:
                if not e.unsent:
                    raise
                last = e
        raise last

    async def _call_once(self, req: Any, timeout: float):
        call_id = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[call_id] = fut
        self._outbox[call_id] = (req, self._clock() + timeout)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write_loop())
        try:
            # The answer can beat a timeout that the server enforces too: allow a little slack.
            async with asyncio.timeout(timeout + 0.05):
                return await fut
        finally:
            self._outbox.pop(call_id, None)  # out of time before it was written: it never leaves
            self._pending.pop(call_id, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # retrieved: a failure this call already reported another way

    def _fail(self, ids, exc: BaseException) -> None:
        for call_id in ids:
            fut = self._pending.get(call_id)
            if fut is not None and not fut.done():
                fut.set_exception(exc)

    async def _write_loop(self) -> None:
        """Write the outbox until it is empty: each turn, what gathered as one message."""
        while self._outbox:
            if self._call is None and not await self._opened():
                continue
            call = self._call
            assert call is not None  # _opened() set it, or failed every waiting call
            batch = self._take_batch(self._clock())
            if batch:  # (else every caller gave up while the stream was opening)
                await self._write(call, batch)

    async def _opened(self) -> bool:
        """Open the stream, bounded by the longest-waiting caller; False (each waiting call
        failed with the reason) when it could not be."""
        budget = max(self._outbox.values(), key=lambda v: v[1])[1] - self._clock()
        try:
            async with asyncio.timeout(max(0.001, budget)):
                await self._open()
            return True
        except (StreamBroken, TimeoutError) as e:
            ids = list(self._outbox)
            self._outbox.clear()
            self._fail(ids, e if isinstance(e, StreamBroken) else TimeoutError())
            return False

    def _take_batch(self, now: float) -> list[tuple[int, Any, int]]:
        """The next message's calls, (call_id, request, timeout_ms), out of the outbox: up to
        MAX_FRAME_CALLS or about MAX_FRAME_BYTES; an oversized one is sent back to go unary."""
        batch: list[tuple[int, Any, int]] = []
        size = 0
        for call_id, (req, deadline) in list(self._outbox.items()):
            if batch and (len(batch) >= MAX_FRAME_CALLS or size >= MAX_FRAME_BYTES):
                break
            del self._outbox[call_id]
            req_size = req.ByteSize()
            if req_size > MAX_STREAM_CALL_BYTES:
                self._fail((call_id,), _GoUnary())  # its caller sends it as a unary call
                continue
            batch.append((call_id, req, max(1, int((deadline - now) * 1000))))
            size += req_size
        return batch

    async def _write(self, call, batch: list[tuple[int, Any, int]]) -> None:
        ids = [b[0] for b in batch]
        self._on_stream[call].update(ids)  # before the write: the stream's end fails them
        try:
            async with asyncio.timeout(max(b[2] for b in batch) / 1000):
                await call.write(self._wrap(batch))
        except TimeoutError:
            # The server is not reading (stalled, or flow control is full): the stream is no good.
            self._ended(call, grpc.StatusCode.DEADLINE_EXCEEDED, f"the {self.peer} did not take the call in time")
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as e:
            # The stream was over before this write (the server stopping or gone): the
            # message never left, so its calls may go out again on a new stream (they are
            # idempotent by ids and keys in any case).
            self._on_stream.get(call, set()).difference_update(ids)  # (before the await below)
            code, details = await _final_status(call, e, self.peer)
            self._fail(ids, StreamBroken(code, details, unsent=True))
            self._ended(call, code, details)
        else:
            self.writes += 1
            self.stream_calls += len(batch)

    async def _open(self) -> None:
        """Open the stream and wait for the server's headers (sent first thing), so a server
        without the RPC is told apart (UNIMPLEMENTED) before any call is written on it."""
        call = self._open_rpc(((STREAM_HEADER, CONTRACT),))
        self.opened += 1
        try:
            headers = await call.initial_metadata()
            if not any(k == STREAM_HEADER for k, _ in (headers or ())):
                # Not a call-stream handler: a trailers-only answer (UNIMPLEMENTED, or an
                # error): its status says which.
                code = await call.code()
                raise StreamBroken(code, (await call.details()) or code.name)
        except grpc.aio.AioRpcError as e:
            call.cancel()
            raise StreamBroken(*_failure(e, self.peer)) from None
        except BaseException:
            call.cancel()  # out of time (cancelled) or refused: never used
            raise
        self._call = call
        self._on_stream[call] = set()
        self._reader = asyncio.ensure_future(self._read(call))

    async def _read(self, call) -> None:
        code, details, unsent = grpc.StatusCode.UNAVAILABLE, f"the {self.peer} ended the {self.method} stream", False
        try:
            while True:
                reply = await call.read()
                if reply is grpc.aio.EOF:
                    # A clean end (the server stopping) answers every call it started first.
                    unsent = (await call.code()) == grpc.StatusCode.OK
                    break
                on_stream = self._on_stream.get(call, set())
                for call_id, outcome in self._answers(reply):
                    on_stream.discard(call_id)
                    fut = self._pending.get(call_id)
                    if fut is not None and not fut.done():
                        fut.set_result(outcome)
        except asyncio.CancelledError:
            code, details = grpc.StatusCode.UNAVAILABLE, "the caller is closing the stream"
            raise
        except grpc.aio.AioRpcError as e:
            code, details = _failure(e, self.peer)
        finally:
            self._ended(call, code, details, unsent)

    def _ended(self, call, code: grpc.StatusCode, details: str, unsent: bool = False) -> None:
        """The stream is over: fail every call still waiting on it; the next call opens a new one."""
        if self._call is call:
            self._call = None
        call.cancel()
        self._fail(self._on_stream.pop(call, ()), StreamBroken(code, details, unsent))

    async def close(self) -> None:
        """Cancel the stream (the caller shutting down); calls waiting on it fail."""
        call, reader, writer = self._call, self._reader, self._writer
        self._call = None
        if writer is not None and not writer.done():
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
        unsent = list(self._outbox)
        self._outbox.clear()
        self._fail(unsent, StreamBroken(grpc.StatusCode.UNAVAILABLE, "the caller is closing the stream"))
        if call is not None:
            call.cancel()
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def _final_status(call, e: BaseException, peer: str) -> tuple[grpc.StatusCode, str]:
    """Why a write failed: the call's own status when it has ended (a write racing the
    server's answer fails INTERNAL in grpc core, while the call says e.g. UNIMPLEMENTED)."""
    try:
        code = await asyncio.wait_for(call.code(), 1.0)
        if code == grpc.StatusCode.OK:
            return code, f"the {peer} ended the call stream"
        if code is not None:
            return code, (await call.details()) or code.name
    except (TimeoutError, grpc.aio.AioRpcError):
        pass
    return _failure(e, peer)


def _failure(e: BaseException, peer: str) -> tuple[grpc.StatusCode, str]:
    if isinstance(e, grpc.aio.AioRpcError) and e.code() != grpc.StatusCode.INTERNAL:
        return e.code(), e.details() or e.code().name
    return grpc.StatusCode.UNAVAILABLE, f"the call stream to the {peer} failed: {type(e).__name__}"
