"""Durable workflow steps (issue 24), measured the same way on every system.

The workload is one workflow whose body is K no-op durable steps (Ratchet: `ctx.step`,
DBOS: `@DBOS.step` calls, Temporal: activities). Its first line and its last line append a
probe ("<key>:b", "<key>:e" and the time, peers/probe.mark) to a file the bench reads, so every
system is timed by this machine's clock at the same two points of the same function:

  workflow_steps     N runs started while no worker runs, then the worker started:
                     steps/s = N x K / (last run's "e" - first run's "b"); commits and WAL
                     bytes per step cover the whole life of the N runs (start, lease, steps,
                     completion) divided by N x K.
  workflow_run_idle  one run at a time on an idle system: run latency = "e" - just before the
                     start call (what a caller waits for K steps); step latency = ("e" - "b") / K
                     (a step's cost without the start's dequeue).

Fan-in latency (issue 24's 1,000-way fan-out) needs ctx.parallel, outside the slice this
benchmark covers: it is a row of the report that says so, not a cell.

This module holds what the systems share: the sizes and the pure figures over probe times
(unit-tested in tests/unit/loadtest/test_workflows.py).
"""

from __future__ import annotations

import dataclasses
import statistics

from loadtest import dbstats

WORKFLOW_TYPE = "steps"
FAN_IN_NOTE = ("not measured: the 1,000-way fan-out needs ctx.parallel, outside the slice this benchmark covers "
               "(steps, one run at a time and many at once); its cell is the next one to add")


@dataclasses.dataclass(frozen=True)
class WorkflowPlan:
    """Sizes of the workflow cells, the same for every system of a run."""

    runs: int        # N runs of the throughput cell
    steps: int       # K no-op steps per run (both cells)
    samples: int     # runs of the idle cell, one at a time
    limit_s: float   # the throughput cell waits at most this long for its runs to end
    sample_timeout_s: float = 10.0


def plan(quick: bool, *, runs: int | None = None, steps: int | None = None,
         samples: int | None = None) -> WorkflowPlan:
    """Quick (`make bench`): 100 runs x 10 steps and 30 idle runs, a bounded share of the run's
    minutes; full: the issue's 200 x 10 and 50 idle runs. The bench's --workflow-* flags
    override each (at least 1)."""
    base = WorkflowPlan(runs=100, steps=10, samples=30, limit_s=60.0) if quick else \
        WorkflowPlan(runs=200, steps=10, samples=50, limit_s=120.0)
    for name, value in (("runs", runs), ("steps", steps), ("samples", samples)):
        if value is not None and value < 1:
            raise ValueError(f"workflow {name} must be at least 1, got {value}")
    return dataclasses.replace(base, runs=runs or base.runs, steps=steps or base.steps,
                               samples=samples or base.samples)


def payload(key: str, steps: int, n: int = 0) -> dict:
    """The workflow's input: how many steps, and the probe key its two marks carry."""
    return {"n": n, "steps": steps, "probe": key}


@dataclasses.dataclass(frozen=True)
class Throughput:
    """What the probes say about N runs drained together."""

    finished: int
    started: int
    span_s: float
    steps: int

    @property
    def rate(self) -> float:
        """Steps per second over the span from the first run's first line to the last run's last."""
        return self.finished * self.steps / self.span_s if self.span_s > 0 else 0.0


def throughput(probes: dict[str, float], keys: list[str], steps: int) -> Throughput:
    """Steps/s of the runs named by keys: runs that reached their last line, over first "b" ->
    last "e" (a run that did not end is counted as started, not as steps done)."""
    begins = [probes[f"{k}:b"] for k in keys if f"{k}:b" in probes]
    ends = [probes[f"{k}:e"] for k in keys if f"{k}:e" in probes]
    span = max(ends) - min(begins) if begins and ends else 0.0
    return Throughput(finished=len(ends), started=len(begins), span_s=span, steps=steps)


def ended(probes: dict[str, float], keys: list[str]) -> int:
    """How many of the runs reached their last line."""
    return sum(1 for k in keys if f"{k}:e" in probes)


@dataclasses.dataclass
class IdleSamples:
    """One run at a time: per run, start call -> last line, and its steps' share."""

    run_ms: list[float] = dataclasses.field(default_factory=list)
    step_ms: list[float] = dataclasses.field(default_factory=list)
    start_ms: list[float] = dataclasses.field(default_factory=list)
    missed: int = 0

    def add(self, sent: float, probes: dict[str, float], key: str, steps: int) -> None:
        """One sample from its send time (time.time() just before the start call) and probes."""
        b, e = probes.get(f"{key}:b"), probes.get(f"{key}:e")
        if b is None or e is None:
            self.missed += 1
            return
        self.run_ms.append((e - sent) * 1000)
        self.step_ms.append((e - b) * 1000 / max(1, steps))
        self.start_ms.append((b - sent) * 1000)

    def extra(self) -> dict:
        """The figures besides the run latency, for the cell's extra."""
        return {"step_ms": dbstats.percentiles(self.step_ms), "start_to_first_line_ms":
                dbstats.percentiles(self.start_ms), "missed": self.missed}


def per_run(value: float | None, steps: int) -> float | None:
    """A per-step figure times K: the same figure per run."""
    return None if value is None else round(value * steps, 2)


# -- the report's section -------------------------------------------------------------------
# With --rounds (bench --only workflows) a system has one cell of each workload per round:
# every figure below is the median over them.
def _median(values) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _cpu_sum(by_process: dict | None) -> float | None:
    """CPU ms summed over every process charged (the machine's busy share left out)."""
    parts = [v for k, v in (by_process or {}).items() if k != "machine_busy_pct"]
    return sum(parts) if parts else None


def _steps(cells, system: str, fig) -> float | None:
    from loadtest import compare
    return _median(fig(c) for c in compare.cells_of(cells, system, "workflow_steps"))


def _idle_pct(cells, system: str, field: str, pct: str) -> float | None:
    from loadtest import compare
    return _median(((c.latency_ms if field == "run" else (c.extra or {}).get(field)) or {}).get(pct)
                   for c in compare.cells_of(cells, system, "workflow_run_idle"))


def _idle_cpu(cells, system: str) -> float | None:
    from loadtest import compare
    return _median(_cpu_sum((c.extra or {}).get("cpu_ms_per_step"))
                   for c in compare.cells_of(cells, system, "workflow_run_idle"))


# (title, higher is better, figure of one system)
ROWS = (
    ("steps/s: N runs of K no-op steps drained together", True, lambda cells, s: _steps(cells, s, lambda c: c.rate)),
    ("run latency idle p50, ms (start call -> last line)", False, lambda cells, s: _idle_pct(cells, s, "run", "p50")),
    ("run latency idle p99, ms", False, lambda cells, s: _idle_pct(cells, s, "run", "p99")),
    ("step latency idle p50, ms ((last line - first line) / K)", False,
     lambda cells, s: _idle_pct(cells, s, "step_ms", "p50")),
    ("step latency idle p99, ms", False, lambda cells, s: _idle_pct(cells, s, "step_ms", "p99")),
    ("start call -> first line idle p50, ms", False,
     lambda cells, s: _idle_pct(cells, s, "start_to_first_line_ms", "p50")),
    ("commits per step (whole runs, starts included)", False,
     lambda cells, s: _steps(cells, s, lambda c: c.commits_per_task)),
    ("write transactions per step (durable commits)", False,
     lambda cells, s: _steps(cells, s, lambda c: c.write_xacts_per_task)),
    ("WAL bytes per step (whole runs, starts included)", False,
     lambda cells, s: _steps(cells, s, lambda c: c.wal_bytes_per_task)),
    ("CPU ms per step, every process charged", False,
     lambda cells, s: _steps(cells, s, lambda c: _cpu_sum(c.cpu_ms_per_task))),
    ("CPU ms per step at idle (one run at a time), every process", False, lambda cells, s: _idle_cpu(cells, s)),
)


def rounds_table(cells, names: list[str]) -> list[str]:
    """steps/s and idle step p50 of every round, when there was more than one."""
    from loadtest import compare
    rounds = sorted({c.params.get("round", 1) for c in cells if c.workload == "workflow_steps" and c.ok})
    if len(rounds) < 2:
        return []

    def of(system: str, r: int, workload: str, fig) -> str:
        found = [fig(c) for c in compare.cells_of(cells, system, workload) if c.params.get("round", 1) == r]
        return compare.fmt_num(found[0] if found else None)
    out = ["| system | " + " | ".join(f"steps/s r{r}" for r in rounds) + " | "
           + " | ".join(f"step p50 ms r{r}" for r in rounds) + " |", "|---|" + "---|" * (2 * len(rounds))]
    for s in names:
        out.append(f"| {s} | " + " | ".join(of(s, r, "workflow_steps", lambda c: c.rate) for r in rounds) + " | "
                   + " | ".join(of(s, r, "workflow_run_idle", lambda c: (c.extra.get("step_ms") or {}).get("p50"))
                                for r in rounds) + " |")
    return ["", "Every round (medians above):", "", *out]


def report_table(cells) -> list[str]:
    """Markdown: the workflow figures of every system that has them, Ratchet ÷ each peer, the
    fan-in row that this slice cannot measure, and how each system ran. [] without cells."""
    from loadtest import compare
    names = [s for s in compare.systems(cells) if compare.cells_of(cells, s, "workflow_steps")
             or compare.cells_of(cells, s, "workflow_run_idle")]
    if not names:
        return []
    peers = [s for s in names if s != compare.RATCHET]
    labs = compare.labels(cells)
    out = ["| metric | " + " | ".join(f"{s} ({labs[s]})" if s in labs else s for s in names) + " | "
           + " | ".join(f"Ratchet ÷ {p}" for p in peers) + " |", "|---|" + "---|" * (len(names) + len(peers))]
    for title, hib, fig in ROWS:
        vals = {s: fig(cells, s) for s in names}
        ours = vals.get(compare.RATCHET)
        out.append(f"| {title} | " + " | ".join(compare.fmt_num(vals[s]) for s in names) + " | "
                   + " | ".join(compare.fmt_ratio(compare.ratio(ours, vals[p]), hib) for p in peers) + " |")
    out.append("| fan-in latency, 1,000-way fan-out | " + " | ".join("not measured" for _ in names)
               + " | " + " | ".join("–" for _ in peers) + " |")
    return out + [*rounds_table(cells, names), "", f"Fan-in: {FAN_IN_NOTE}.", "", *_sizes_line(cells),
                  *_how(cells, names)]


def _sizes_line(cells) -> list[str]:
    c = next((c for c in cells if c.ok and c.workload == "workflow_steps"), None)
    if c is None:
        return []
    return [f"N = {c.params.get('runs')} runs of K = {c.params.get('steps')} steps each, started while no worker "
            "ran, then drained; the idle rows time one run at a time. Every system's two probes are its "
            "workflow function's first and last lines (this machine's clock). Per-step amplification is the "
            "whole cell's commits (the system's own databases) and WAL (cluster-wide) divided by N x K.", ""]


def _how(cells, names: list[str]) -> list[str]:
    notes = {}
    for s in names:
        for c in cells:
            if c.system == s and (c.extra or {}).get("workflow_note"):
                notes[s] = c.extra["workflow_note"]
    notes.setdefault("ratchet", "`@workflow` calling `ctx.step` K times (each step a begin and a commit: two "
                                "round trips sandbox -> host agent -> dispatcher -> history), started with "
                                "WorkflowService.StartWorkflow over gRPC; host agent defaults (512 slots)")
    return [f"- {s}: {notes[s]}" for s in names if s in notes]
