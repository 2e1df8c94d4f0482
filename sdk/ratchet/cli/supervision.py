"""Restart services that die, with backoff, like a process supervisor would.

A thread of the process that owns the services (the `ratchet dev up`
supervisor, or a test's LocalPlatform). It only restarts services that died
on their own: one stopped with stop_service() stays down.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ratchet.cli.platform import LocalPlatform

log = logging.getLogger("ratchet.dev")

BACKOFF_FIRST_S = 0.5
BACKOFF_CAP_S = 10.0
# A service that stayed up this long is healthy again: its backoff resets.
STABLE_AFTER_S = 30.0


class Supervisor:
    """Watches the platform's service processes every 200 ms."""

    def __init__(self, platform: LocalPlatform, interval: float = 0.2):
        self.platform = platform
        self.interval = interval
        self.restarts: dict[str, int] = {}
        self._backoff: dict[str, float] = {}
        self._due: dict[str, float] = {}
        self._started_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._stop.clear()
        now = time.monotonic()
        self._started_at = dict.fromkeys(self.platform.procs, now)
        self._thread = threading.Thread(target=self._run, name="ratchet-supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception:
                log.exception("supervisor round failed")

    def check(self) -> None:
        """One round: note deaths, restart the ones whose backoff has passed."""
        p = self.platform
        now = time.monotonic()
        with p._lock:
            for name, proc in list(p.procs.items()):
                if name in p._held or proc.poll() is None:
                    continue
                if name not in self._due:
                    self._schedule(name, proc.returncode, now)
                elif now >= self._due[name]:
                    del self._due[name]
                    p._spawn(name)
                    self._started_at[name] = now
                    self.restarts[name] = self.restarts.get(name, 0) + 1
                    log.warning("restarted %s (pid %s)", name, p.procs[name].pid)

    def _schedule(self, name: str, code: int | None, now: float) -> None:
        up_for = now - self._started_at.get(name, now)
        backoff = BACKOFF_FIRST_S if up_for >= STABLE_AFTER_S else self._backoff.get(name, BACKOFF_FIRST_S / 2) * 2
        backoff = min(backoff, BACKOFF_CAP_S)
        self._backoff[name] = backoff
        self._due[name] = now + backoff
        log.warning("%s exited with code %s after %.1fs; restarting in %.1fs", name, code, up_for, backoff)
