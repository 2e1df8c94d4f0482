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
    ("grpc", "grpc"), ("asyncpg", "asyncpg"), ("google/protobuf", "protobuf"), ("asyncio/", "asyncio"),
    ("json/", "json"), ("logging/", "logging"), ("selectors", "selectors (idle wait)"),
    ("subprocess", "subprocess"), ("socket", "socket"), ("uuid", "uuid"),
)


def py_spy_path() -> str | None:
    """py-spy next to this interpreter (the bench target installs it), else on PATH."""
    cand = pathlib.Path(sys.executable).parent / "py-spy"
    return str(cand) if cand.exists() else shutil.which("py-spy")


def area(filename: str) -> str:
    for needle, name in _AREAS:
        if needle in filename:
            return name
    return filename.split("/", 1)[0] if "/" in filename else filename


@dataclasses.dataclass
class Profile:
    """Folded samples of one process (or a group, like all sandboxes)."""

    name: str
    samples: int = 0
    self_by_func: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    incl_by_func: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    self_by_area: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def add(self, frames: list[str], count: int) -> None:
        self.samples += count
        seen = set()
        for fr in frames:
            m = _FRAME.match(fr)
            func, fname = (m.group(1), m.group(2)) if m else (fr, "?")
            key = f"{func} ({fname})"
            if key not in seen:
                self.incl_by_func[key] += count
                seen.add(key)
        if frames:
            m = _FRAME.match(frames[-1])
            func, fname = (m.group(1), m.group(2)) if m else (frames[-1], "?")
            self.self_by_func[f"{func} ({fname})"] += count
            self.self_by_area[area(fname)] += count

    def summary(self, top: int = 8) -> dict:
        def pct(c: collections.Counter) -> list[tuple[str, float]]:
            return [(k, round(100.0 * v / self.samples, 1)) for k, v in c.most_common(top)] if self.samples else []
        # Inclusive lists are dominated by the event loop's entry frames; skip
        # frames present in almost every sample, they say nothing.
        incl = collections.Counter({k: v for k, v in self.incl_by_func.items() if v < 0.9 * self.samples})
        return {"process": self.name, "samples": self.samples, "self_by_area": pct(self.self_by_area),
                "self_by_function": pct(self.self_by_func), "inclusive_by_function": pct(incl)}


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

    def __init__(self, registry: Registry, out_dir: pathlib.Path, rate: int = 50):
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
                    "--rate", str(self.rate), "--format", "raw", "--nonblocking", "-o", str(out)]
            if name in subprocesses:
                args.append("--subprocesses")
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


def markdown(profiles: list[Profile], seconds: float, rate: int) -> list[str]:
    """Per-process tables: where the busy samples went, by area and by function."""
    lines = [f"py-spy {rate} Hz for {seconds:.0f} s per process, idle threads excluded; "
             "busy share ≈ samples / (seconds × rate). Self = the sampled frame itself; "
             "inclusive = anywhere on the stack (frames on ≥90 % of stacks omitted).", ""]
    for p in sorted(profiles, key=lambda p: -p.samples):
        s = p.summary()
        busy = 100.0 * p.samples / (seconds * rate) if seconds else 0
        lines.append(f"### {p.name}: {p.samples} samples (≈{busy:.0f} % of one core)")
        lines.append("")
        lines.append("| self by area | % | self by function | % | inclusive by function | % |")
        lines.append("|---|---|---|---|---|---|")
        rows = max(len(s["self_by_area"]), len(s["self_by_function"]), len(s["inclusive_by_function"]))
        for i in range(rows):
            cells = []
            for key in ("self_by_area", "self_by_function", "inclusive_by_function"):
                item = s[key][i] if i < len(s[key]) else ("", "")
                cells += [f"`{item[0]}`" if item[0] else "", str(item[1])]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines
