"""The one thing a peer's no-op handler does besides returning: when the
payload carries "probe", append "<probe> <unix time>" to the file named by
RATCHET_BENCH_PROBE, so the bench learns when the handler started (schedule to
start, timer lateness); when it carries "sleep_s", sleep that long (the
recovery cell needs tasks that are in flight when the worker dies).

Throughput cells send neither, so there the handler is a pure no-op. The
parsing half is pure and unit-tested.
"""

from __future__ import annotations

import os
import time

ENV = "RATCHET_BENCH_PROBE"


def record(payload) -> None:
    """Called first thing by every peer's handler (Python peers)."""
    if not isinstance(payload, dict):
        return
    probe = payload.get("probe")
    if probe is not None:
        path = os.environ.get(ENV)
        if path:
            # O_APPEND writes of one short line are atomic between threads and processes.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{probe} {time.time():.6f}\n".encode())
            finally:
                os.close(fd)
    sleep_s = payload.get("sleep_s")
    if sleep_s:
        time.sleep(float(sleep_s))


def mark(payload, suffix: str) -> None:
    """A workflow's checkpoint of its own progress: append "<probe>:<suffix> <unix time>" when
    the payload carries "probe" ("b" on the workflow's first line, "e" on its last: the bench's
    workflow cells time a run's steps between them, the same way on every system)."""
    if isinstance(payload, dict) and payload.get("probe") is not None:
        record({"probe": f"{payload['probe']}:{suffix}"})


async def record_async(payload) -> None:
    """The same for async handlers: the sleep must not block the worker's event loop."""
    import asyncio
    if isinstance(payload, dict) and payload.get("sleep_s"):
        record({k: v for k, v in payload.items() if k != "sleep_s"})
        await asyncio.sleep(float(payload["sleep_s"]))
    else:
        record(payload)


def parse(text: str) -> dict[str, float]:
    """'<probe> <unix time>' lines -> {probe: earliest time}; malformed lines are skipped
    (a task run twice, e.g. after a worker was killed, keeps its first start)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            ts = float(parts[1])
        except ValueError:
            continue
        if parts[0] not in out or ts < out[parts[0]]:
            out[parts[0]] = ts
    return out


class ProbeFile:
    """The driver's side: a fresh file per peer, read incrementally."""

    def __init__(self, path: str):
        self.path = path
        open(path, "w").close()
        os.chmod(path, 0o666)  # peers may run as another user (never here, but cheap)
        self._offset = 0

    def read_new(self) -> dict[str, float]:
        """Probes written since the last call."""
        with open(self.path) as f:
            f.seek(self._offset)
            text = f.read()
        # Only whole lines: a line being written stays for the next read.
        cut = text.rfind("\n") + 1
        self._offset += len(text[:cut].encode())
        return parse(text[:cut])
