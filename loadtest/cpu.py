"""CPU time per process from /proc, so each cell can say how many CPU ms a
task cost in the gateway, the dispatcher, history, the host agent, its
sandboxes and Postgres.

A process's cost is its own utime+stime plus cutime+cstime (children it has
already reaped); summing that over a live process tree and differencing two
snapshots counts children that were born and died in between, as long as a
process inside the tree reaped them (the postmaster reaps its backends, the
host agent its sandboxes).
"""

from __future__ import annotations

import dataclasses
import os
import resource

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    start: int
    own: int       # utime + stime, ticks
    reaped: int    # cutime + cstime, ticks


def read_stat(pid: int) -> ProcStat | None:
    """One /proc/<pid>/stat, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    f = data[data.rindex(")") + 2:].split()
    # Fields after the command: state=0 ppid=1 ... utime=11 stime=12 cutime=13 cstime=14 starttime=19
    return ProcStat(pid=pid, ppid=int(f[1]), start=int(f[19]), own=int(f[11]) + int(f[12]),
                    reaped=int(f[13]) + int(f[14]))


def all_procs() -> dict[int, ProcStat]:
    """Every readable process on the machine."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = read_stat(int(name))
            if st is not None:
                out[st.pid] = st
    return out


def _tree(root: int, procs: dict[int, ProcStat]) -> list[ProcStat]:
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        if pid in procs:
            out.append(procs[pid])
            stack.extend(children.get(pid, []))
    return out


@dataclasses.dataclass(frozen=True)
class CpuSnapshot:
    """Per named root: (own ticks of the root, ticks of everything below it)."""

    roots: dict[str, tuple[int, int]]
    machine_busy: int
    machine_total: int
    driver: float


def _machine_ticks() -> tuple[int, int]:
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    total = sum(parts[:8])
    return total - idle, total


def _driver_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def take(roots: dict[str, int]) -> CpuSnapshot:
    """Snapshot the trees under each named root PID (a missing root counts 0)."""
    procs = all_procs()
    out = {}
    for name, pid in roots.items():
        tree = _tree(pid, procs)
        own = sum(p.own + p.reaped for p in tree if p.pid == pid)
        below = sum(p.own + p.reaped for p in tree if p.pid != pid)
        out[name] = (own, below)
    busy, total = _machine_ticks()
    return CpuSnapshot(roots=out, machine_busy=busy, machine_total=total, driver=_driver_seconds())


def diff_ms(a: CpuSnapshot, b: CpuSnapshot, *, children_label: dict[str, str] | None = None) -> dict[str, float]:
    """CPU ms per process between snapshots; children of a root are reported
    under children_label[root] (e.g. hostagent -> sandboxes) or folded into the root."""
    labels = children_label or {}
    ms = 1000.0 / CLK_TCK
    out: dict[str, float] = {}
    for name, (own_b, below_b) in b.roots.items():
        own_a, below_a = a.roots.get(name, (0, 0))
        # A child reaped between snapshots moves from `below` into the root's
        # cutime, so the tree total is exact and the split is approximate.
        total = max(0, (own_b + below_b) - (own_a + below_a)) * ms
        below = min(total, max(0, below_b - below_a) * ms)
        own = total - below
        if name in labels:
            out[name] = round(own, 1)
            out[labels[name]] = round(out.get(labels[name], 0.0) + below, 1)
        else:
            out[name] = round(own + below, 1)
    out["bench_driver"] = round((b.driver - a.driver) * 1000.0, 1)
    total = b.machine_total - a.machine_total
    out["machine_busy_pct"] = round(100.0 * (b.machine_busy - a.machine_busy) / total, 1) if total else 0.0
    return out


def per_task(cpu_ms: dict[str, float], tasks: int) -> dict[str, float]:
    """CPU ms per task for each process (machine_busy_pct passes through)."""
    if tasks <= 0:
        return {}
    return {k: (v if k == "machine_busy_pct" else round(v / tasks, 4)) for k, v in cpu_ms.items()}
