"""py-spy profiles of the platform's processes during a drain, folded into
per-process hot spots for the report.

py-spy samples each process from outside (`--nonblocking`: the target is
never paused) and skips idle threads, so a process's sample count is roughly
its busy time × the rate. The host agent is recorded with `--subprocesses`,
so its sandboxes are profiled too and reported under "sandboxes".
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import re
import shutil
import subprocess
import sys

from loadtest.procs import Registry

_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")
_PROCESS = re.compile(r"^process (\d+):")

# Where a frame's file lives, most specific first: the report groups self
# time by these so "40 % in protobuf" stands out from a list of functions.
_AREAS = (
    ("services/gateway/", "ratchet.gateway"), ("services/history/", "ratchet.history"),
    ("services/dispatcher/", "ratchet.dispatcher"), ("services/hostagent/", "ratchet.hostagent"),
    ("libs/", "ratchet.libs"), ("ratchet/sandbox", "ratchet.sandbox"), ("ratchet/", "ratchet sdk/gen"),
    ("grpc", "grpc"), ("asyncpg", "asyncpg"), ("google/protobuf", "protobuf"), ("_upb", "protobuf"),
    ("asyncio/", "asyncio"), ("json/", "json"), ("logging/", "logging"), ("importlib", "imports"),
    ("threading", "threading"), ("subprocess", "subprocess"), ("socket", "socket"), ("uuid", "uuid"),
    ("libc.so", "libc"), ("libpython", "CPython"), ("python3", "CPython"),
)
# Leaf frames that mean "waiting", not working. py-spy's idle filter misses
# an event loop in epoll_wait with a short timeout, so we drop these too.
_IDLE_LEAVES = re.compile(r"^(EpollSelector\.select|select|poll|epoll_wait|Condition\.wait|Event\.wait|"
                          r"_recv_exact|recv_into|sleep|__futex\w*|pthread_cond_\w*|futex\w*|_wait_for_tstate_lock|"
                          r"Lock\.acquire|read|accept)$")
# Frames that only say "this is a Python program with an event loop".
_ENTRY = ("<frozen runpy>", "asyncio/runners.py", "asyncio/base_events.py", "__main__.py", "threading.py",
          "asyncio/events.py")
_OURS = ("services/", "libs/", "ratchet/")


def py_spy_path() -> str | None:
    """py-spy next to this interpreter (the bench target installs it), else on PATH."""
    cand = pathlib.Path(sys.executable).parent / "py-spy"
    return str(cand) if cand.exists() else shutil.which("py-spy")


def area(filename: str) -> str:
    for needle, name in _AREAS:
        if needle in filename:
            return name
    return filename.split("/", 1)[0] if "/" in filename else filename


def _split(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame)
    return (m.group(1), m.group(2)) if m else (frame, "?")


@dataclasses.dataclass
class Profile:
    """Folded samples of one process (or a group, like all sandboxes)."""

    name: str
    samples: int = 0
    idle: int = 0
    self_by_func: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    ours_incl: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    self_by_area: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    @property
    def busy(self) -> int:
        return self.samples - self.idle

    def add(self, frames: list[str], count: int) -> None:
        self.samples += count
        if not frames:
            return
        func, fname = _split(frames[-1])
        if _IDLE_LEAVES.match(func):
            self.idle += count
            return
        self.self_by_func[f"{func} ({fname})"] += count
        self.self_by_area[area(fname)] += count
        seen = set()
        for fr in frames:
            f, fn = _split(fr)
            key = f"{f} ({fn})"
            if any(o in fn for o in _OURS) and not any(e in fn for e in _ENTRY) and key not in seen:
                self.ours_incl[key] += count
                seen.add(key)

    def summary(self, top: int = 10) -> dict:
        def pct(c: collections.Counter) -> list[tuple[str, float]]:
            return [(k, round(100.0 * v / self.busy, 1)) for k, v in c.most_common(top)] if self.busy else []
        return {"process": self.name, "samples": self.samples, "idle_samples": self.idle,
                "self_by_area": pct(self.self_by_area), "self_by_function": pct(self.self_by_func),
                "ratchet_inclusive": pct(self.ours_incl)}


def fold(raw: str, name: str, root_pid: int | None = None, children_name: str = "sandboxes") -> list[Profile]:
    """Parse py-spy raw output; with --subprocesses, split the root from its children."""
    own, kids = Profile(name), Profile(children_name)
    for line in raw.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        frames, count = m.group(1).split(";"), int(m.group(2))
        procs = [f for f in frames if _PROCESS.match(f)]
        frames = [f for f in frames if not _PROCESS.match(f)]
        leaf_pid = int(_PROCESS.match(procs[-1]).group(1)) if procs else root_pid
        (own if root_pid is None or leaf_pid == root_pid else kids).add(frames, count)
    return [p for p in (own, kids) if p.samples]


class Recorder:
    """Run one py-spy per service for a fixed duration, then fold the output."""

    def __init__(self, registry: Registry, out_dir: pathlib.Path, rate: int = 50, native: bool = False):
        self.native = native
        self.registry = registry
        self.out_dir = out_dir
        self.rate = rate
        self.exe = py_spy_path()
        self.running: list[tuple[str, int, pathlib.Path, subprocess.Popen]] = []

    def start(self, pids: dict[str, int], seconds: float, subprocesses: tuple[str, ...] = ("hostagent",)) -> None:
        if not self.exe:
            raise RuntimeError("py-spy not found: `make bench` installs it (pip install py-spy)")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name, pid in pids.items():
            out = self.out_dir / f"{name}.raw"
            args = [self.exe, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
                    "--rate", str(self.rate), "--format", "raw", "-o", str(out)]
            if name in subprocesses:
                args.append("--subprocesses")
            # py-spy refuses native stacks of a target it does not pause: --native samples blocking
            # (each sample stops the process briefly, so the rates of that run are lower).
            args.append("--native" if self.native else "--nonblocking")
            proc = self.registry.popen(f"py-spy {name}", args, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True)
            self.running.append((name, pid, out, proc))

    def finish(self, timeout: float) -> tuple[list[Profile], list[str]]:
        """Wait for every recorder; returns the folded profiles and any errors."""
        profiles, errors = [], []
        for name, pid, out, proc in self.running:
            try:
                _, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate(timeout=10)
            if not out.exists():
                errors.append(f"{name}: py-spy wrote nothing ({(err or '').strip()[-300:]})")
                continue
            profiles += fold(out.read_text(), name, pid)
        self.running = []
        return profiles, errors


def markdown(profiles: list[Profile], seconds: float, rate: int, native: bool = False, when: str = "") -> list[str]:
    """Per-process tables: where the busy samples went, by area, by function, by our code."""
    mode = " with native frames" if native else ""
    lines = [f"py-spy {rate} Hz{mode} for {seconds:.0f} s per process{when}. Samples whose leaf is a wait "
             "(epoll, condition, socket read) are counted as idle and left out; percentages are of the "
             "busy samples. busy ≈ busy samples / (seconds × rate) of one core. Self = the sampled frame; "
             "time inside C extensions (grpc's Cython core, asyncpg's protocol, protobuf's upb) shows as "
             "the Python frame that called it (often `Handle._run` or `Thread.run`) unless --native is on. "
             "`ratchet code (inclusive)` = share of busy samples with that function of ours on the stack.", ""]
    for p in sorted(profiles, key=lambda p: -p.busy):
        s = p.summary()
        busy = 100.0 * p.busy / (seconds * rate) if seconds else 0
        lines.append(f"### {p.name}: {p.busy} busy samples of {p.samples} (busy ≈ {busy:.0f} % of one core)")
        lines.append("")
        lines.append("| self by area | % | self by function | % | ratchet code (inclusive) | % |")
        lines.append("|---|---|---|---|---|---|")
        keys = ("self_by_area", "self_by_function", "ratchet_inclusive")
        for i in range(max(len(s[k]) for k in keys)):
            cells = []
            for key in keys:
                item = s[key][i] if i < len(s[key]) else ("", "")
                cells += [f"`{item[0]}`" if item[0] else "", str(item[1])]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines
