"""Unary calls carried as messages on one bidirectional stream.

grpc.aio spends ~0.4 ms of client CPU and ~0.5 ms of server CPU on a unary
call here, against ~0.2 ms each for a message on an open stream (measured
on the 2-core bench machine; docs/benchmarks/findings.md). The enqueue path
makes one history call per coalesced group, so it sends them as messages on
a long-lived stream (CreateTasksStream) instead.

`serve` runs each request as its own task, concurrently, as the server runs
unary calls; answers go out in completion order, one write at a time. A
call's own failure is its answer (the status the unary RPC would have
returned), never the stream's. A call past its timeout is abandoned and
answered DEADLINE_EXCEEDED, exactly what a unary deadline does (a group
commit the call had joined but not yet sent drops it; one already sent may
have taken effect). When the caller ends the stream, calls in flight finish
and are answered; when the stream breaks, they are cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc

from ratchet.services.history.errors import HistoryError

log = logging.getLogger(__name__)

# Calls one stream may have running at once; past it the stream is not read
# (HTTP/2 flow control pushes back on the sender) until one finishes.
MAX_IN_FLIGHT = 2048


def error_of(exc: BaseException, method: str) -> tuple[grpc.StatusCode, str]:
    """The status a unary handler would have aborted with (errors.rpc)."""
    if isinstance(exc, HistoryError):
        return exc.code, str(exc)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return grpc.StatusCode.DEADLINE_EXCEEDED, f"{method} did not finish within the call's timeout"
    log.error("unexpected error in %s", method, exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal error in {method}: {type(exc).__name__}"


async def serve(requests: AsyncIterator[Any], handle: Callable[[Any], Awaitable[Any]],
                answer: Callable[[Any, Any, tuple[grpc.StatusCode, str] | None], Any],
                timeout_s: Callable[[Any], float | None], method: str, stopping: asyncio.Event,
                max_in_flight: int = MAX_IN_FLIGHT) -> AsyncIterator[Any]:
    """Yield one answer per request: answer(request, result, None) or answer(request, None, (code, msg)).

    Once `stopping` is set (server shutdown) no further request is read; the calls
    running are answered and the stream ends with OK. The caller treats calls it
    sent but never saw answered as ambiguous and sends them again (to the next server).
    """
    done: asyncio.Queue = asyncio.Queue()
    slots = asyncio.Semaphore(max_in_flight)
    running: set[asyncio.Task] = set()

    async def one(req) -> None:
        try:
            limit = timeout_s(req)
            result = await (asyncio.wait_for(handle(req), limit) if limit else handle(req))
            reply = answer(req, result, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the call's own answer
            reply = answer(req, None, error_of(exc, method))
        finally:
            slots.release()
        done.put_nowait(reply)

    async def read() -> None:
        try:
            async for req in requests:
                await slots.acquire()
                task = asyncio.ensure_future(one(req))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.wait(list(running))  # (wait, unlike gather, never cancels them)
        finally:
            if not stopping.is_set():
                done.put_nowait(None)

    async def stop_reading() -> None:
        await stopping.wait()
        if not reader.done():
            reader.cancel()  # an abandoned read: what it had started still runs and is answered
        if running:
            await asyncio.wait(list(running))
        done.put_nowait(None)

    reader = asyncio.ensure_future(read())
    stopper = asyncio.ensure_future(stop_reading())
    try:
        while True:
            reply = await done.get()
            if reply is None:
                break
            yield reply
        if not stopping.is_set():
            await reader  # re-raises what broke the read side
    finally:
        stopper.cancel()
        if not reader.done():
            reader.cancel()
        for task in list(running):
            task.cancel()
