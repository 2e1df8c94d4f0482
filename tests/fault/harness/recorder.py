"""The history stream: every client operation and every nemesis action, one
JSON line each, in the order they happened."""

from __future__ import annotations

import json
import os
import pathlib
import threading
import time
from typing import Any


class Recorder:
    """Appends {process, type, f, value, time} lines; `time` is seconds since the
    run started on this process's monotonic clock (not skewed by the nemesis)."""

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        self.wall0 = time.time()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def event(self, process: str, type_: str, f: str, value: Any = None) -> float:
        """Append one event; returns its time."""
        with self._lock:
            t = self.now()
            line = json.dumps({"process": process, "type": type_, "f": f, "value": value, "time": t},
                              default=str)
            os.write(self._fd, (line + "\n").encode())
            return t

    def nemesis(self, f: str, value: Any = None, type_: str = "info") -> float:
        return self.event("nemesis", type_, f, value)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
