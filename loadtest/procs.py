"""Everything the benchmark starts, and stopping exactly that.

The bench shares a 2-core machine with other people's processes, so it never
stops anything by name: each child it starts is recorded by PID (with the
process's start time, so a recycled PID is never signalled), and on exit,
Ctrl-C or an error the recorded cleanups run newest first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable


def proc_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[19])


def pid_alive(pid: int, start_ticks: int | None = None) -> bool:
    """True if pid exists, is not a zombie, and (when given) is the same process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return False
    fields = data[data.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return False
    return start_ticks is None or int(fields[19]) == start_ticks


def stop_pid(pid: int, start_ticks: int | None, *, grace: float = 10.0) -> str:
    """SIGTERM, then SIGKILL after `grace` seconds; only if it is still our process."""
    if not pid_alive(pid, start_ticks):
        return "gone"
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return "gone"
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not pid_alive(pid, start_ticks):
            return "terminated"
        time.sleep(0.05)
    if pid_alive(pid, start_ticks):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return "terminated"
        return "killed"
    return "terminated"


class Registry:
    """Cleanups for everything started, run newest first exactly once."""

    def __init__(self) -> None:
        self._cleanups: list[tuple[str, Callable[[], None]]] = []
        self._old_handlers: dict[int, object] = {}
        self._interrupted = False

    def add(self, label: str, fn: Callable[[], None]) -> None:
        """Register fn to run at cleanup; label names it in the log."""
        self._cleanups.append((label, fn))

    def add_pid(self, label: str, pid: int, *, grace: float = 10.0) -> None:
        """Stop this PID at cleanup (if it is still the process we saw now)."""
        ticks = proc_start_ticks(pid)
        self.add(label, lambda: self._report(label, stop_pid(pid, ticks, grace=grace)))

    def popen(self, label: str, args: list[str], **kwargs) -> subprocess.Popen:
        """Start a child and register it; the caller may also wait on it."""
        proc = subprocess.Popen(args, **kwargs)
        ticks = proc_start_ticks(proc.pid)

        def _stop() -> None:
            if proc.poll() is None:
                self._report(label, stop_pid(proc.pid, ticks, grace=5.0))
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.add(label, _stop)
        return proc

    @staticmethod
    def _report(label: str, outcome: str) -> None:
        if outcome != "gone":
            print(f"[cleanup] {label}: {outcome}", file=sys.stderr)

    def cleanup(self) -> None:
        """Run every registered cleanup, newest first; errors are printed, not raised."""
        while self._cleanups:
            label, fn = self._cleanups.pop()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - cleanup must go on past one failure
                print(f"[cleanup] {label} failed: {e!r}", file=sys.stderr)

    def install_signal_handlers(self) -> None:
        """On SIGINT/SIGTERM/SIGHUP stop every child first, then unwind.

        Stopping first matters: the event loop's shutdown waits for worker
        threads blocked on a child (pgbench, a service starting), which only
        return once that child is gone. Installing our own SIGINT handler also
        makes the run interruptible when it was started with SIGINT ignored
        (a background job of a script), and keeps asyncio from adding its own.
        """
        def _stop(signum, _frame):
            if self._interrupted:
                return  # a second signal while we are already stopping
            self._interrupted = True
            print(f"\n[bench] signal {signum}: stopping everything this run started", file=sys.stderr)
            self.cleanup()
            raise KeyboardInterrupt
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _stop)

    def __enter__(self) -> Registry:
        self.install_signal_handlers()
        return self

    def __exit__(self, *exc) -> None:
        # A signal during this cleanup finds _interrupted set and returns.
        self._interrupted = True
        try:
            self.cleanup()
        finally:
            for sig, handler in self._old_handlers.items():
                signal.signal(sig, handler)
