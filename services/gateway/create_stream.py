"""CreateTasks calls to history as messages on one long-lived stream.

A unary call costs the gateway ~0.4 ms of CPU in grpc.aio and history ~0.5
ms; a message on an open stream ~0.2 ms each (docs/benchmarks/findings.md).
The enqueue path sends one CreateTasks per coalesced group, so it sends them
on history's CreateTasksStream: each call a message with its own call id and
timeout, answered once with its response or the status it failed with.

The stream is opened on first use and again after it ends. Calls the stream
ended before answering fail UNAVAILABLE and say they may have taken effect
(the caller retries with the same task ids and keys, which deduplicate).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc
from ratchet.libs.rpc.callstream import STREAM_HEADER, CallStream, StreamBroken

__all__ = ["STREAM_HEADER", "CreateStream", "StreamBroken"]


class CreateStream(CallStream):
    """One CreateTasksStream to history, shared by every caller; calls ready together
    share a message."""

    def __init__(self, stub: history_pb2_grpc.HistoryServiceStub,
                 unary: Callable[[history_pb2.CreateTasksRequest, float], Awaitable[history_pb2.CreateTasksResponse]],
                 clock: Callable[[], float] = time.monotonic, enabled: bool = True):
        super().__init__(lambda metadata: stub.CreateTasksStream(metadata=metadata), _wrap, _answers,
                         unary, peer="history", method="CreateTasks", clock=clock, enabled=enabled)


def _wrap(calls: list[tuple[int, history_pb2.CreateTasksRequest, int]]) -> history_pb2.CreateTasksStreamRequest:
    return history_pb2.CreateTasksStreamRequest(calls=[
        history_pb2.CreateTasksCall(call_id=c, request=r, timeout_ms=t) for c, r, t in calls])


def _answers(reply: history_pb2.CreateTasksStreamResponse):
    for a in reply.answers:
        yield a.call_id, (a.response if a.WhichOneof("outcome") == "response" else a.error)
