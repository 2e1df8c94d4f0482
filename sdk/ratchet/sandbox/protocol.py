"""The wire between a host agent and its sandbox stub: length-prefixed JSON.

Each frame is a 4-byte big-endian length followed by that many bytes of UTF-8
JSON (one object with a "type"). Messages:

  stub -> agent  {"type": "ready", "pid", "handlers": [names]}
                 {"type": "heartbeat", "task_id"}
                 {"type": "checkpoint", "task_id", "value": JSON text (<= 64 KiB)}
                 {"type": "done", "task_id", "outcome": "succeeded"|"failed"|"canceled"|"suspended",
                  "result": JSON text | null, "error": {error_class, message, stack} | null,
                  "fatal": bool, "retry_after_s": float | null,
                  with "suspended" also "suspend_position": int, "wake_after_s": float | null}
                 {"type": "step", "task_id", "call": int (unique within the stub),
                  "op": "begin"|"commit", "position": int, "name": str,
                  "kind": "step"|"version"|"sleep"|"wait"|"parallel"|"child"|"on_cancel"|"compensate",
                  "result": JSON text | null, "error": {error_class, message, stack} | null,
                  "fatal": bool, "duration_s": float | null, "match": JSON text (an object) | null,
                  "version": int | null, "children": [{"task_type", "payload": JSON text}] | null,
                  "on_failure": "collect"|"fail_fast" | null}
                   "children": a fan-out's (kind parallel/child, op begin only; child: exactly one),
                   1..10,000 of them, each payload <= 256 KiB; null or [] for every other kind.
                   "on_failure": a fan-out's policy, null (= collect) for every other kind.
                   kind "on_cancel" (op begin only): registers a compensation; "name" is the given
                   name or the function's, "result" its arguments as JSON text ({"args", "kwargs"})
                   or null when they are not JSON (shown in the log only).
                   kind "compensate" (begin/commit like "step"): one compensation running after a
                   cancel, named "compensate:" + its on_cancel's name (cut to 200 characters).
  agent -> stub  {"type": "run", "task_id", "attempt", "max_attempts", "lease_epoch",
                  "task_type", "payload": JSON text, "last_checkpoint": JSON text | null,
                  "schedule_id": str | null, "scheduled_time": RFC 3339 UTC | null}
                 {"type": "step_reply", "task_id", "call", "status": "run"|"done"|"suspend"|
                  "mismatch"|"absent"|"cancelled"|"lost"|"error", "attempt": int, "result": JSON text | null,
                  "error": {error_class, message, stack} | null, "wake_after_s": float | null,
                  "logged_name": str | null, "logged_kind": str | null, "message": str | null,
                  "children": [{"index": int, "child_id": str, "state": str, "result": JSON text
                  | null, "error": {...} | null}] | null, "fatal": bool, "compensate_from": int | null}
                   (both keys always present) "children": a fan-out's "done": each child's outcome
                   by index, "state" the TaskState name without TASK_STATE_ ("SUCCEEDED",
                   "FAILED", "CANCELED", "EXPIRED"; a state the agent does not know: its number
                   as a string); null otherwise. "fatal": true only with "error": the platform
                   refused for good (an unknown handler, a bad child input, an answer too large
                   to deliver), so the activation fails without a retry. "compensate_from": with
                   "cancelled" only (null otherwise): the position the compensations take from
                   (StepResponse.compensate_from). "ahead": with "done" only (null otherwise, or
                   absent): the completed entries logged right after that position, in order and
                   without a gap, [{"position": int, "name": str, "kind": "step"|"version"|"sleep"|
                   "wait"|"on_cancel", "attempt": int, "result": JSON text | null}] (StepResponse.ahead:
                   at most 500, 1 MiB of results; the agent drops its tail rather than exceed the
                   frame limit). The stub answers its next begins from them without a frame: same
                   name and kind as DONE would (a step's result, a version's branch, a sleep over,
                   a wait's event data, an on_cancel registered); another name or kind as MISMATCH
                   would (a version marker: as ABSENT, and the entry stays for the next call).
                 {"type": "cancel", "task_id"}
                 {"type": "shutdown"}

A workflow's activation sends step frames, one at a time, each blocking its thread
until the step_reply with the same task_id and call (docs/design/workflows-protocol.md
gives the rules the platform answers by). "lost": the lease is gone, the activation
stops and its done frame (outcome "failed", error LeaseLost) is discarded; "error":
the platform could not be reached, the activation fails and is retried (with
"fatal": true it fails for good). A fan-out ("parallel"/"child") is answered
"suspend" once its children are started, and "done" with their outcomes when its
barrier has fired (a fan-out's "run" is never shown to the stub: the agent starts the
children first). "cancelled": the run was cancelled and has compensations; the code stops
at that checkpoint (which wrote nothing), the stub runs the registered compensations, last
first, as "compensate" steps at the positions from compensate_from on (that checkpoint's own
position when the log has nothing there, else the next: a sleep, wait, fan-out or step claim
left open there keeps its entry; absent: that position), and the done frame's
outcome is "canceled" (a compensation's retryable error: "failed", not fatal, and the next
activation runs the unfinished ones; a fatal one is logged FAILED and the others run).

The stub never receives a credential, a lease id or the dispatcher address: the agent
adds the lease it holds for task_id to each step.
"""

from __future__ import annotations

import json
import socket
import struct

HEADER = struct.Struct(">I")
# A 256 KiB payload or result is escaped inside a JSON string; leave room for that and a stack.
MAX_FRAME_BYTES = 4 * 1024 * 1024
# What the stub accepts from the agent: a fan-out's step_reply carries up to 10,000 children's
# results, bounded by the gRPC message it came in (libs/rpc: 64 MiB). The agent is the
# trusted end; the agent keeps MAX_FRAME_BYTES for what sandboxes send it.
MAX_AGENT_FRAME_BYTES = 64 * 1024 * 1024

OUTCOMES = ("succeeded", "failed", "canceled", "suspended")


class ProtocolError(Exception):
    """A frame is malformed, oversized, or the peer hung up mid-frame."""


# One encoder for every frame: json.dumps with any non-default option builds a JSONEncoder per
# call, a sixth of a frame's cost for the small run and done frames (one of each per task).
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def encode(message: dict, limit: int = MAX_FRAME_BYTES) -> bytes:
    """One frame holding message (the agent passes MAX_AGENT_FRAME_BYTES for a fan-out's reply)."""
    body = _ENCODE(message).encode("utf-8")
    if len(body) > limit:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds the {limit}-byte limit")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict:
    """The message in a frame body; ProtocolError unless it is a JSON object with a type."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"frame is not UTF-8 JSON: {e}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("frame is not a JSON object with a string 'type'")
    return message


def check_length(length: int, limit: int = MAX_FRAME_BYTES) -> int:
    """length, unless it exceeds the frame limit."""
    if length > limit:
        raise ProtocolError(f"peer announced a {length}-byte frame, over the {limit}-byte limit")
    return length


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            if got:
                raise ProtocolError("peer closed the socket in the middle of a frame")
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> dict | None:
    """The next message from a blocking socket, or None on a clean end of stream."""
    header = _recv_exact(sock, HEADER.size)
    if header is None:
        return None
    body = _recv_exact(sock, check_length(HEADER.unpack(header)[0]))
    if body is None:
        raise ProtocolError("peer closed the socket in the middle of a frame")
    return decode_body(body)


async def read_frame(reader) -> dict | None:
    """The next message from an asyncio StreamReader, or None on a clean end of stream."""
    import asyncio

    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise ProtocolError("peer closed the socket in the middle of a frame") from None
        return None
    try:
        body = await reader.readexactly(check_length(HEADER.unpack(header)[0]))
    except asyncio.IncompleteReadError:
        raise ProtocolError("peer closed the socket in the middle of a frame") from None
    return decode_body(body)
