"""Enqueues from synchronous code as calls on the enqueue stream.

A unary EnqueueTask costs the caller and the gateway several times the CPU, in
gRPC alone, of a call on the enqueue stream (`TaskService.EnqueueTaskStream`,
libs/rpc/callstream), and calls made at once share one message
(docs/benchmarks/findings.md: call streams). The asyncio client has used the stream
since it was written; this gives it to `Client`: one background thread per
client, started on the first enqueue, runs an event loop with an `AsyncClient`,
and `Client.enqueue` hands its request to that loop and blocks for the answer.
Threads that enqueue at once (a threaded web server's request handlers) share
messages exactly as coroutines do. Answers, errors and retries are
`AsyncClient`'s, unchanged.

Fork: grpc.aio does not survive fork(). Before every fork() the process ends
its clients' streams and stops their threads (os.register_at_fork; the next
enqueue starts them again): forking while they ran made about 2 children in 5
die of SIGSEGV in gRPC. A process forked from one that had started a stream
cannot open streams of its own (its calls hung until their deadline), so
clients there send unary calls, which gRPC's fork support carries over
(`available()` says which). A child of a process that made its clients but
never enqueued (a pre-forking server that builds its client at import) starts
its own stream on its first enqueue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import weakref
from typing import TYPE_CHECKING

from ratchet._transport import DeadlineExceeded, RatchetError
from ratchet.api.tasks.v1 import tasks_pb2

if TYPE_CHECKING:
    from ratchet.aio import AsyncClient

# How long close() waits for the loop to end the stream and stop.
_CLOSE_S = 5.0

class _Process:
    """What this process knows about its enqueue streams. Process-wide by nature, so the one
    module-level object here: fork hooks are per process (os.register_at_fork), and grpc.aio
    works only in the process that first started it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aio_pid: int | None = None  # the process that started a stream thread first
        self.clients: weakref.WeakSet[StreamEnqueuer] = weakref.WeakSet()  # to pause before fork()

    def may_use_aio(self) -> bool:
        return self._aio_pid is None or self._aio_pid == os.getpid()

    def using_aio(self) -> None:
        with self._lock:
            if self._aio_pid is None:
                self._aio_pid = os.getpid()

    def before_fork(self) -> None:
        for enq in list(self.clients):
            enq._pause()


_PROCESS = _Process()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_PROCESS.before_fork)


class StreamEnqueuer:
    """Sends EnqueueTaskRequests on one enqueue stream from any thread (see the module docstring)."""

    def __init__(self, endpoint: str, api_key: str, timeout: float, max_retries: int):
        self._endpoint, self._api_key = endpoint, api_key
        self._timeout, self._max_retries = timeout, max_retries
        # The longest an enqueue can take in AsyncClient: every attempt out of time (the call's own
        # timeout and a little slack) plus the capped backoff between them, and a margin.
        self._budget = (max_retries + 1) * (timeout + 0.1) + 2.0 * max_retries + 5.0
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: AsyncClient | None = None
        self._closed = False
        _PROCESS.clients.add(self)

    def send(self, req: tasks_pb2.EnqueueTaskRequest) -> tasks_pb2.EnqueueTaskResponse:
        """The gateway's answer to req, or the RatchetError it failed with (after retries)."""
        loop, client = self._running()
        future = asyncio.run_coroutine_threadsafe(client.send_enqueue(req), loop)
        try:
            return future.result(self._budget)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise DeadlineExceeded(f"no answer from the gateway within {self._budget:g}s; the task may or may "
                                   f"not have been committed", "DEADLINE_EXCEEDED") from None
        except concurrent.futures.CancelledError:
            raise RatchetError("the client was closed before the enqueue was answered; the task may or may "
                               "not have been committed", "CANCELLED") from None

    def available(self) -> bool:
        """False in a process forked from one that had started a stream (see the module
        docstring): send unary calls there."""
        return _PROCESS.may_use_aio()

    @property
    def stream(self):
        """The CallStream in use (tests read its counters), or None before the first enqueue."""
        return self._client._stream if self._client is not None else None

    def _running(self):
        with self._lock:
            if self._closed:
                raise RatchetError("the client is closed: make a new one", "FAILED_PRECONDITION")
            if self._loop is not None and self._pid == os.getpid():
                return self._loop, self._client
            if not self.available():
                raise RatchetError("this process was forked from one that had started an enqueue stream; "
                                   "grpc.aio cannot run here: send unary calls", "FAILED_PRECONDITION")
            from ratchet.aio import AsyncClient  # (aio imports client, which imports this module)

            _PROCESS.using_aio()

            loop = asyncio.new_event_loop()
            started = threading.Event()
            thread = threading.Thread(target=_serve, args=(loop, started), name="ratchet-enqueue-stream",
                                      daemon=True)
            thread.start()
            if not started.wait(_CLOSE_S):
                raise RatchetError("the client's enqueue thread did not start", "UNAVAILABLE")
            self._loop, self._thread, self._pid = loop, thread, os.getpid()
            self._client = AsyncClient(self._endpoint, self._api_key, timeout=self._timeout,
                                       max_retries=self._max_retries)
            return self._loop, self._client

    def _pause(self) -> None:
        """Before fork(): end the stream and stop the thread; the next enqueue starts them again."""
        self._stop(closing=False)

    def close(self) -> None:
        """End the stream and stop the thread (enqueues still waiting fail); idempotent."""
        self._stop(closing=True)

    def _stop(self, closing: bool) -> None:
        with self._lock:
            self._closed = self._closed or closing
            loop, thread, client, pid = self._loop, self._thread, self._client, self._pid
            self._loop = self._thread = None
        if loop is None or thread is None or client is None or pid != os.getpid():
            return
        try:
            asyncio.run_coroutine_threadsafe(client.close(), loop).result(_CLOSE_S)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass  # the loop is stopping or stuck: it is stopped below either way
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_CLOSE_S)


def _serve(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(started.set)
    try:
        loop.run_forever()
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
