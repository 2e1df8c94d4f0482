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

import time
from collections.abc import Awaitable, Callable

from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc
from ratchet.libs.rpc.callstream import RETRY_STREAM_AFTER_S, STREAM_HEADER, CallStream, StreamBroken

__all__ = ["RETRY_STREAM_AFTER_S", "STREAM_HEADER", "CreateStream", "StreamBroken"]


class CreateStream(CallStream):
    """One CreateTasksStream to history, shared by every caller; calls ready together
    share a message when history reads framing version 2."""

    def __init__(self, stub: history_pb2_grpc.HistoryServiceStub,
                 unary: Callable[[history_pb2.CreateTasksRequest, float], Awaitable[history_pb2.CreateTasksResponse]],
                 clock: Callable[[], float] = time.monotonic, enabled: bool = True):
        super().__init__(lambda metadata: stub.CreateTasksStream(metadata=metadata), _wrap, _answers,
                         unary, peer="history", method="CreateTasks", clock=clock, enabled=enabled)


# The call-stream versions from which history reads CreateTasksRequest.shared, and .plain.
SHARED_SINCE = 3
PLAIN_SINCE = 4


def unplain(req: history_pb2.CreateTasksRequest) -> history_pb2.CreateTasksRequest:
    """req with its plain columns as tasks (each an id and a payload; the rest stays in
    `shared`), for a history older than them."""
    if not req.HasField("plain"):
        return req
    out = history_pb2.CreateTasksRequest(shard_id=req.shard_id, shared=req.shared)
    add = out.tasks.add
    for task_id, payload in zip(req.plain.task_ids, req.plain.payloads_json, strict=True):
        add(task_id=task_id, payload_json=payload)
    return out


def unshared(req: history_pb2.CreateTasksRequest) -> history_pb2.CreateTasksRequest:
    """req with its `shared` fields on every task instead (and no plain columns), for a
    history older than them."""
    req = unplain(req)
    if not req.HasField("shared"):
        return req
    out = history_pb2.CreateTasksRequest(shard_id=req.shard_id, tasks=req.tasks)
    for task in out.tasks:
        task.MergeFrom(req.shared)  # (the fields are disjoint: the gateway set each in one place)
    return out


def _wrap(calls: list[tuple[int, history_pb2.CreateTasksRequest, int]], version: int):
    if version < SHARED_SINCE:
        calls = [(c, unshared(r), t) for c, r, t in calls]
    elif version < PLAIN_SINCE:
        calls = [(c, unplain(r), t) for c, r, t in calls]
    if len(calls) == 1:
        call_id, req, timeout_ms = calls[0]
        return history_pb2.CreateTasksStreamRequest(call_id=call_id, request=req, timeout_ms=timeout_ms)
    return history_pb2.CreateTasksStreamRequest(calls=[
        history_pb2.CreateTasksStreamRequest(call_id=c, request=r, timeout_ms=t) for c, r, t in calls])


def _answers(reply: history_pb2.CreateTasksStreamResponse):
    for a in (reply.answers or (reply,)):
        yield a.call_id, (a.response if a.WhichOneof("outcome") == "response" else a.error)
