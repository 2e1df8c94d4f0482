"""One measured cell = one JSON line. The same shape serves the physical
reference, Ratchet and (issue 5) every peer, so a report is a fold over lines."""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
from typing import Any


@dataclasses.dataclass
class Cell:
    """A measurement of one system under one workload with one set of parameters.

    system:   "postgres" (the physical reference), "ratchet", or a peer name.
    workload: PHYS_commit | PHYS_job | PHYS_batched | enqueue_single | enqueue_batch |
              drain | schedule_to_start_idle | enqueue_ack_open_loop | ...
    rate/unit: the headline number (e.g. 1234.5 "jobs/s"); None for latency-only cells.
    latency_ms: percentiles from dbstats.percentiles, when the cell measures latency.
    cpu_ms_per_task: per process (see cpu.diff_ms), plus machine_busy_pct.
    """

    system: str
    workload: str
    params: dict[str, Any]
    rate: float | None = None
    unit: str = ""
    n: int = 0
    duration_s: float = 0.0
    latency_ms: dict[str, Any] | None = None
    commits_per_task: float | None = None
    write_xacts_per_task: float | None = None
    wal_bytes_per_task: float | None = None
    wal_syncs_per_task: float | None = None
    cpu_ms_per_task: dict[str, float] = dataclasses.field(default_factory=dict)
    ok: bool = True
    error: str = ""
    notes: str = ""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> str:
        """system/workload[param=value,...] for tables and lookups."""
        ps = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.system}/{self.workload}[{ps}]"

    def apply_amplification(self, figures: dict[str, float | None]) -> None:
        """Copy the per-task figures of dbstats.Delta.per_task onto the cell."""
        for k, v in figures.items():
            setattr(self, k, v)


class ResultLog:
    """Appends each cell as it is measured, so an interrupted run keeps what it got."""

    def __init__(self, directory: pathlib.Path, run_id: str | None = None):
        self.run_id = run_id or datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{self.run_id}.jsonl"
        self.cells: list[Cell] = []

    def add(self, cell: Cell) -> Cell:
        self.cells.append(cell)
        line = {"run_id": self.run_id, "at": datetime.datetime.now().isoformat(timespec="seconds"),
                **dataclasses.asdict(cell)}
        with self.path.open("a") as f:
            f.write(json.dumps(line, sort_keys=False) + "\n")
        return cell

    def find(self, system: str, workload: str, **params: Any) -> list[Cell]:
        """Successful cells matching system, workload and the given params."""
        return [c for c in self.cells if c.ok and c.system == system and c.workload == workload
                and all(c.params.get(k) == v for k, v in params.items())]


def load(path: pathlib.Path) -> list[Cell]:
    """Read a .jsonl back into cells (for re-rendering a report)."""
    fields = {f.name for f in dataclasses.fields(Cell)}
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            out.append(Cell(**{k: v for k, v in d.items() if k in fields}))
    return out
