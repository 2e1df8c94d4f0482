"""The client's wire plumbing: one retry loop every call goes through, and
the one table that turns gRPC status codes into typed exceptions."""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import grpc

from ratchet.libs.rpc.client import sync_channel
from ratchet.libs.rpc.status import http_status


class RatchetError(Exception):
    """A request failed. `code` is the gRPC status name, `http_status` its REST twin."""

    def __init__(self, message: str, code: str = "UNKNOWN"):
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status(getattr(grpc.StatusCode, code, grpc.StatusCode.UNKNOWN))


class InvalidArgument(RatchetError):
    """The request was refused as invalid and changed nothing; the message says what to fix."""


class NotFound(RatchetError):
    """No such task (or it belongs to another tenant), app, deployment, schedule or operation."""


class Conflict(RatchetError):
    """The idempotency key (or name) is taken by a different request; `task_id` is the original."""

    def __init__(self, message: str, code: str = "ALREADY_EXISTS", task_id: str | None = None):
        super().__init__(message, code)
        self.task_id = task_id


class Unauthenticated(RatchetError):
    """The API key (or admin key) is missing, unknown or revoked."""


class PermissionDenied(RatchetError):
    """The key is valid but may not do this (for example, another app's deployment)."""


class PayloadTooLarge(RatchetError):
    """The payload, batch or bundle is over its limit; nothing was written."""


class Unavailable(RatchetError):
    """The platform (or the task's shard) could not be reached; safe to retry with the same key."""


class DeadlineExceeded(RatchetError):
    """No answer in time: the request may or may not have taken effect."""


_ERRORS: dict[grpc.StatusCode, type[RatchetError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: Conflict,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: PayloadTooLarge,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
# For calls that must not run twice (no request id): only a refused connection is surely unsent.
UNSENT = frozenset({grpc.StatusCode.UNAVAILABLE})
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


def error_from_rpc(err: grpc.RpcError) -> RatchetError:
    """The typed exception for a failed call; the one place codes are mapped."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else None) or code.name.lower()
    original = _trailer_task_id(err) if _ERRORS.get(code) is Conflict else None
    return error_from_status(code, message, original)


def error_from_status(code: grpc.StatusCode, message: str, original_task_id: str | None = None) -> RatchetError:
    """The typed exception for a status (a failed call, or one call's error on a call stream)."""
    cls = _ERRORS.get(code, RatchetError)
    if cls is Conflict:
        if original_task_id is None:
            # Servers that do not name it in a field still quote it in the message.
            m = _UUID.search(message)
            original_task_id = m.group(0).lower() if m else None
        return Conflict(message, code.name, task_id=original_task_id)
    return cls(message, code.name)


_CODES = {c.value[0]: c for c in grpc.StatusCode}


def status_code(value: int) -> grpc.StatusCode:
    """The grpc.StatusCode of a numeric code (UNKNOWN for a number this grpc does not know)."""
    return _CODES.get(value, grpc.StatusCode.UNKNOWN)


def invalid(message: str) -> InvalidArgument:
    """An InvalidArgument raised by the client itself, before sending anything."""
    return InvalidArgument(message, "INVALID_ARGUMENT")


def _trailer_task_id(err: grpc.RpcError) -> str | None:
    """The original task the gateway names in trailing metadata, if it does."""
    try:
        # (grpc's stub types the items as objects; they are (key, value) pairs in grpc and grpc.aio)
        for item in err.trailing_metadata() or ():
            key, value = cast("tuple[str, Any]", item)
            if key.endswith("task-id") and isinstance(value, str):
                return value
    except Exception:  # noqa: BLE001 - a fake or cancelled call may have no trailers
        pass
    return None


class _Transport:
    """A channel plus the one retry loop every call goes through."""

    def __init__(self, endpoint: str, key: str, timeout: float, max_retries: int):
        if not endpoint:
            raise ValueError("endpoint must be 'host:port'")
        self.endpoint = endpoint.split("://", 1)[-1].rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.metadata = (("authorization", f"Bearer {key}"),)
        self.channel = sync_channel(self.endpoint)
        self.sleep: Callable[[float], None] = time.sleep

    def call(self, method: Callable, request: Any, retry_on: frozenset = TRANSIENT,
             done_after_retry: frozenset = frozenset()) -> Any:
        """Call with a deadline; retry transient failures with capped, jittered backoff.

        The request is resent unchanged, so an enqueue keeps its idempotency
        key and a bulk call its request id. A code in done_after_retry, seen
        only after an ambiguous failure, means the first try took effect
        (a delete answering NOT_FOUND): the call returns None.
        """
        delay = 0.1
        for attempt in range(self.max_retries + 1):
            try:
                return method(request, timeout=self.timeout, metadata=self.metadata)
            except grpc.RpcError as e:
                if attempt > 0 and e.code() in done_after_retry:
                    return None
                if e.code() not in retry_on or attempt == self.max_retries:
                    raise error_from_rpc(e) from None
            self.sleep(random.uniform(delay / 2, delay))
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.channel.close()


def new_idempotency_key() -> str:
    """The key the SDK mints for one logical enqueue call."""
    return f"sdk-{uuid.uuid4()}"


def new_request_id() -> str:
    """The request id the SDK mints for one logical bulk or create call, resent on its retries."""
    return f"sdk-{uuid.uuid4()}"
