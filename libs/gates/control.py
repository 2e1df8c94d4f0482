"""The test side of gates: arm a named point, wait until a server process
reaches it, release it (continue, crash or raise), and fail the test if an
armed gate was never reached.

    g = Gates(tmp_path / "gates")            # start the servers with g.env
    gate = g.arm("history.complete.before_commit")
    ...                                      # drive the client
    hit = gate.wait_reached(timeout=10)      # {"pid": ..., "time": ...}
    ...                                      # do the racing thing
    gate.release()                           # or release(action="crash")
    g.verify()                               # raises GateNotReached for any armed gate never reached
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import time

from . import ENV, check_name


class GateNotReached(AssertionError):
    """An armed gate was not reached in time: the interleaving the test meant to force never happened."""


class Gate:
    """One armed gate."""

    def __init__(self, gates: Gates, name: str, hits: int):
        self.gates, self.name, self.hits = gates, name, hits

    def _path(self, suffix: str) -> pathlib.Path:
        return self.gates.dir / f"{self.name}.{suffix}"

    def hits_reached(self) -> list[dict]:
        """The hits so far, each {"k", "pid", "time"}."""
        out = []
        for k in range(1, self.hits + 1):
            path = self._path(f"hit.{k}")
            if path.exists():
                try:
                    info = json.loads(path.read_text() or "{}")
                except ValueError:  # the server is still writing it
                    info = {}
                out.append({"k": k, **info})
        return out

    def timed_out(self) -> list[int]:
        """Hits whose server side gave up waiting for a release."""
        return [k for k in range(1, self.hits + 1) if self._path(f"timeout.{k}").exists()]

    def wait_reached(self, timeout: float = 10.0, count: int = 1) -> dict:
        """Block until `count` hits arrived; returns the last one. Raises GateNotReached."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hits = self.hits_reached()
            if len(hits) >= count and all("pid" in h for h in hits[:count]):
                return hits[count - 1]
            time.sleep(0.005)
        raise GateNotReached(f"gate {self.name!r} was not reached {count} time(s) within {timeout}s")

    async def wait_reached_async(self, timeout: float = 10.0, count: int = 1) -> dict:
        """The same, without blocking an event loop."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hits = self.hits_reached()
            if len(hits) >= count and all("pid" in h for h in hits[:count]):
                return hits[count - 1]
            await asyncio.sleep(0.005)
        raise GateNotReached(f"gate {self.name!r} was not reached {count} time(s) within {timeout}s")

    def release(self, action: str = "continue", hit: int | None = None) -> None:
        """Let the held caller go on (`continue`), exit at once (`crash`) or raise GateError (`raise`).
        Without `hit`, releases every hit, present and future."""
        if action not in ("continue", "crash", "raise"):
            raise ValueError("action is one of continue, crash, raise")
        suffix = "release" if hit is None else f"release.{hit}"
        _atomic_write(self._path(suffix), {"action": action})

    def disarm(self) -> None:
        """Callers from now on pass through (held ones stay held until released)."""
        self._path("arm").unlink(missing_ok=True)


class Gates:
    """The gates folder shared by a test and the server processes it started."""

    def __init__(self, directory: str | os.PathLike):
        self.dir = pathlib.Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.armed: dict[str, Gate] = {}

    @property
    def env(self) -> dict[str, str]:
        """The environment a server process needs to honour these gates."""
        return {ENV: str(self.dir)}

    def arm(self, name: str, hits: int = 1, timeout_s: float = 30.0) -> Gate:
        """Hold the first `hits` callers of this gate, each for at most timeout_s."""
        check_name(name)
        if name in self.armed:
            raise ValueError(f"gate {name!r} is already armed")
        leftovers = re.compile(re.escape(name) + r"\.(arm|hit\.\d+|release(\.\d+)?|timeout\.\d+)$")
        for stale in self.dir.iterdir():
            if leftovers.match(stale.name):
                stale.unlink()
        gate = Gate(self, name, hits)
        _atomic_write(self.dir / f"{name}.arm", {"hits": hits, "timeout_s": timeout_s})
        self.armed[name] = gate
        return gate

    def release_all(self) -> None:
        """Let every held caller go (test teardown: never leave a server wedged)."""
        for gate in self.armed.values():
            gate.disarm()
            gate.release()

    def verify(self) -> None:
        """Raise GateNotReached naming every armed gate that no server reached."""
        missing = [name for name, gate in self.armed.items() if not gate.hits_reached()]
        if missing:
            raise GateNotReached(f"armed gates never reached: {', '.join(sorted(missing))}")


def _atomic_write(path: pathlib.Path, obj: dict) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)
