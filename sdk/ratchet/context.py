"""What a handler knows about the attempt it runs: `ctx`."""

from __future__ import annotations

import threading
import time
from typing import Callable

# ctx.heartbeat() is meant to be called in tight loops; forward at most this often.
HEARTBEAT_MIN_INTERVAL_S = 1.0


class TaskContext:
    """The first argument of every handler.

    `task_id`, `attempt` (1-based), `max_attempts`, `task_type`, and
    `lease_epoch`: a number that grows with every lease of this task. Pass it
    to your own store as a fencing token (write only if your stored epoch is
    not higher) so a stale attempt cannot overwrite a newer one.
    """

    def __init__(self, *, task_id: str, attempt: int, max_attempts: int, lease_epoch: int, task_type: str,
                 on_heartbeat: Callable[[], None] | None = None, cancel_event: threading.Event | None = None):
        self.task_id = task_id
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.lease_epoch = lease_epoch
        self.task_type = task_type
        self._on_heartbeat = on_heartbeat
        self._cancel = cancel_event or threading.Event()
        self._cancel_seen = False
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

    def cancelled(self) -> bool:
        """True once the platform asked this attempt to stop (a cancel or a
        timeout). Return (or raise) soon after: if you do, the task ends
        CANCELED; if you don't, the sandbox is killed after the grace period."""
        if self._cancel.is_set():
            self._cancel_seen = True
            return True
        return False

    def wait_cancelled(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds, waking early on cancel; returns cancelled()."""
        self._cancel.wait(timeout)
        return self.cancelled()

    @property
    def cancel_observed(self) -> bool:
        """Whether the handler has seen cancelled() return True (decides CANCELED)."""
        return self._cancel_seen

    def _request_cancel(self) -> None:
        self._cancel.set()

    def __repr__(self) -> str:
        return (f"TaskContext(task_id={self.task_id!r}, task_type={self.task_type!r}, "
                f"attempt={self.attempt}/{self.max_attempts}, lease_epoch={self.lease_epoch})")
