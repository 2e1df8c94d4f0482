"""What a handler knows about the attempt it runs: `ctx`."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from ratchet.errors import CheckpointNotSerializable, CheckpointTooLarge

# ctx.heartbeat() is meant to be called in tight loops; forward at most this often.
HEARTBEAT_MIN_INTERVAL_S = 1.0
MAX_CHECKPOINT_BYTES = 64 * 1024


def encode_checkpoint(value: Any) -> str:
    """value as compact JSON text; CheckpointNotSerializable / CheckpointTooLarge otherwise."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise CheckpointNotSerializable(
            f"ctx.checkpoint() needs a JSON value ({e}); pass dicts, lists, strings, numbers, booleans "
            f"or None") from None
    size = len(text.encode("utf-8"))
    if size > MAX_CHECKPOINT_BYTES:
        raise CheckpointTooLarge(
            f"the checkpoint is {size} bytes of JSON, over the {MAX_CHECKPOINT_BYTES}-byte limit; keep a "
            f"cursor (an id, an offset) and store bulky state elsewhere")
    return text


def utc(when: dt.datetime) -> dt.datetime:
    """when as an aware UTC datetime (a naive one is taken to be UTC already)."""
    if when.tzinfo is None:
        return when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC)


class TaskContext:
    """The first argument of every handler.

    `task_id`, `attempt` (1-based), `max_attempts`, `task_type`, and
    `lease_epoch`: a number that grows with every lease of this task. Pass it
    to your own store as a fencing token (write only if your stored epoch is
    not higher) so a stale attempt cannot overwrite a newer one.

    `last_checkpoint`: the value last stored with `checkpoint()` (by an
    earlier attempt, or this one), or None. `schedule_id` and
    `scheduled_time` (a UTC datetime: the slot, not when the task started)
    are set when a schedule fired the task, else None.
    """

    def __init__(self, *, task_id: str, attempt: int, max_attempts: int, lease_epoch: int, task_type: str,
                 on_heartbeat: Callable[[], None] | None = None, cancel_event: threading.Event | None = None,
                 last_checkpoint: Any = None, schedule_id: str | None = None,
                 scheduled_time: dt.datetime | None = None, on_checkpoint: Callable[[str], None] | None = None):
        self.task_id = task_id
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.lease_epoch = lease_epoch
        self.task_type = task_type
        self.last_checkpoint = last_checkpoint
        self.schedule_id = schedule_id or None
        self.scheduled_time = scheduled_time
        self._on_heartbeat = on_heartbeat
        self._on_checkpoint = on_checkpoint
        # The cancel event is made on first use (a wait, or the cancel itself): an Event is a
        # Condition and a Lock, ~1/10 of the sandbox's CPU per no-op task, and most attempts
        # are never cancelled nor wait for one.
        self._cancel: threading.Event | None = cancel_event
        self._cancel_seen = False
        self._ended = False
        self._last_beat = float("-inf")
        self._lock = threading.Lock()

    def heartbeat(self) -> None:
        """Say the handler is alive. Cheap: calls are coalesced to at most one
        message per second. Lease renewal does not depend on it (the host agent
        renews leases), so call it when it helps, not on a schedule."""
        now = time.monotonic()
        with self._lock:
            if now - self._last_beat < HEARTBEAT_MIN_INTERVAL_S:
                return
            self._last_beat = now
        if self._on_heartbeat is not None:
            self._on_heartbeat()

    def checkpoint(self, value: Any) -> None:
        """Record progress (any JSON value up to 64 KiB, e.g. a cursor) so the
        next attempt resumes from it as `ctx.last_checkpoint`.

        It travels with the next lease heartbeat (sent within about a second)
        and is stored under the lease's fence: a stale attempt cannot
        overwrite a newer one's. Only the latest value is kept. Raises
        CheckpointNotSerializable or CheckpointTooLarge (both fatal if not
        caught) for a value the platform cannot store.
        """
        text = encode_checkpoint(value)
        with self._lock:
            if self._ended:
                raise RuntimeError(f"ctx.checkpoint() called after attempt {self.attempt} of task "
                                   f"{self.task_id} ended; checkpoint from the handler itself")
            # A decoded copy: later mutation of `value` by the handler must not change what was stored.
            self.last_checkpoint = json.loads(text)
        if self._on_checkpoint is not None:
            self._on_checkpoint(text)

    def cancelled(self) -> bool:
        """True once the platform asked this attempt to stop (a cancel or a
        timeout). Return (or raise) soon after: if you do, the task ends
        CANCELED; if you don't, the sandbox is killed after the grace period."""
        cancel = self._cancel
        if cancel is not None and cancel.is_set():
            self._cancel_seen = True
            return True
        return False

    def wait_cancelled(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds, waking early on cancel; returns cancelled()."""
        self._cancel_event().wait(timeout)
        return self.cancelled()

    @property
    def cancel_observed(self) -> bool:
        """Whether the handler has seen cancelled() return True (decides CANCELED)."""
        return self._cancel_seen

    def _cancel_event(self) -> threading.Event:
        with self._lock:
            if self._cancel is None:
                self._cancel = threading.Event()
            return self._cancel

    def _request_cancel(self) -> None:
        self._cancel_event().set()

    def _end(self) -> None:
        """The attempt is over: later checkpoints (from threads the handler left behind) are refused."""
        with self._lock:
            self._ended = True

    def __repr__(self) -> str:
        return (f"TaskContext(task_id={self.task_id!r}, task_type={self.task_type!r}, "
                f"attempt={self.attempt}/{self.max_attempts}, lease_epoch={self.lease_epoch})")
