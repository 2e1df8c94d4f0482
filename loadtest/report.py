"""The Markdown report of one run: machine, Postgres settings, the physical
reference, Ratchet's cells with ratios, the bar verdicts, the profile."""

from __future__ import annotations

from typing import Any

from loadtest.results import Cell

PROC_ORDER = ("gateway", "dispatcher", "history", "hostagent", "sandboxes", "postgres",
              "bench_driver", "load_client")


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.{digits}f}"
    return str(v)


def _esc(text: str) -> str:
    """Safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _params(c: Cell) -> str:
    return ", ".join(f"{k}={v}" for k, v in c.params.items())


def _cpu(c: Cell) -> str:
    names = [k for k in PROC_ORDER if k in c.cpu_ms_per_task]
    names += sorted(k for k in c.cpu_ms_per_task if k not in PROC_ORDER and k != "machine_busy_pct")
    parts = [f"{k} {c.cpu_ms_per_task[k]:.3f}" for k in names]
    if "machine_busy_pct" in c.cpu_ms_per_task:
        parts.append(f"(machine {c.cpu_ms_per_task['machine_busy_pct']:.0f}% busy)")
    return "; ".join(parts) or "–"


def cell_table(cells: list[Cell]) -> list[str]:
    """Rate, latency, amplification and CPU per task for each cell."""
    out = ["| system | workload | params | rate | p50 ms | p99 ms | p999 ms | n | commits/task | "
           "write xacts/task | WAL B/task | WAL syncs/task | CPU ms/task by process |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        lat = c.latency_ms or {}
        rate = f"{_fmt(c.rate)} {c.unit}" if c.ok else f"FAILED: {_esc(c.error[:160])}"
        out.append(f"| {c.system} | {c.workload} | {_params(c)} | {rate} | {_fmt(lat.get('p50'), 2)} | "
                   f"{_fmt(lat.get('p99'), 2)} | {_fmt(lat.get('p999'), 2)} | {c.n} | "
                   f"{_fmt(c.commits_per_task, 2)} | {_fmt(c.write_xacts_per_task, 2)} | "
                   f"{_fmt(c.wal_bytes_per_task, 0)} | {_fmt(c.wal_syncs_per_task, 3)} | {_cpu(c)} |")
    return out


def render(*, title: str, machine: dict[str, str], pg_settings: dict[str, str], cells: list[Cell],
           ratios: list[dict], verdicts: list[dict], sections: list[tuple[str, list[str]]],
           notes: list[str], mode: str, lead_sections: list[tuple[str, list[str]]] | None = None) -> str:
    """The whole report as Markdown; lead_sections (the side-by-side comparison) go first."""
    lines = [f"# {title}", "", f"Run {machine.get('date_utc', '?')}, mode `{mode}`, produced by "
             "`make bench` (`python -m loadtest.bench`).", "", "## Machine", "",
             "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in machine.items()]
    for title_, body in lead_sections or []:
        lines += ["", f"## {title_}", ""] + body
    lines += ["", "## Postgres (the bench's own cluster, effective settings)", "", "| setting | value |",
              "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in pg_settings.items()]
    lines += ["", "Session settings on top of these: Ratchet's history connections set `wal_compression = lz4` "
              "on its shard databases (its default, HistoryConfig.wal_compression: full-page images "
              "compressed); the reference and the peers run with the server's setting above."]
    if verdicts:
        lines += ["", "## Issue-2 bar", "", "| bar | measured | threshold | verdict |", "|---|---|---|---|"]
        lines += [f"| {v['bar']} | {v['measured']} | {v['threshold']} | **{v['verdict']}** |" for v in verdicts]
    if ratios:
        lines += ["", "## Ratios (same run, same cluster)", "", "| ratio | value | how |", "|---|---|---|"]
        lines += [f"| {r['name']} | {r['value']} | {r['how']} |" for r in ratios]
    phys = [c for c in cells if c.system == "postgres"]
    ours = [c for c in cells if c.system == "ratchet"]
    peers = [c for c in cells if c.system not in ("postgres", "ratchet")]
    if ours:
        lines += ["", "## Ratchet cells", ""] + cell_table(ours)
    if peers:
        lines += ["", "## Peer cells", ""] + cell_table(peers)
    lines += ["", "## Physical reference (raw Postgres, same cluster)", ""] + cell_table(phys)
    for title, body in sections:
        lines += ["", f"## {title}", ""] + body
    if notes:
        lines += ["", "## Method and caveats", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
