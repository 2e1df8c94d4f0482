"""History's side of call streams (CreateTasksStream): libs/rpc/callstream.serve
with the status each call would have had as a unary call.

The contract (call ids, per-call timeouts, answers in completion order, what
a stopping server or a broken stream means) is documented there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from ratchet.libs.rpc import callstream as _lib
from ratchet.libs.rpc.callstream import CONTRACT, MAX_IN_FLIGHT, STREAM_HEADER
from ratchet.libs.rpc.errors import status_of

__all__ = ["CONTRACT", "MAX_IN_FLIGHT", "STREAM_HEADER", "error_of", "serve"]


def error_of(exc: BaseException, method: str) -> tuple[grpc.StatusCode, str]:
    """The status a unary handler would have aborted with (libs/rpc/errors.rpc)."""
    err = status_of(exc, method)
    return err.code, err.message


def serve(requests: AsyncIterator[Any], handle: Callable[[Any], Awaitable[Any]],
          answer: Callable[[Any, Any, tuple[grpc.StatusCode, str] | None], Any],
          timeout_s: Callable[[Any], float | None], method: str, stopping: asyncio.Event, *,
          calls_of: Callable[[Any], Any], frame: Callable[[list[Any]], Any],
          max_in_flight: int = MAX_IN_FLIGHT) -> AsyncIterator[Any]:
    """libs/rpc/callstream.serve, each call's failure answered as libs/rpc/errors.rpc would."""
    return _lib.serve(requests, handle, answer, timeout_s, method, stopping, error_of, calls_of=calls_of,
                      frame=frame, max_in_flight=max_in_flight)
