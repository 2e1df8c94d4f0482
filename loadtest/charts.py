"""PNG charts of a run (matplotlib, from the `bench` extra): throughput by
system and latency percentiles by load. Skipped with a note when matplotlib
is missing; the figures' data come from compare.py, so charts and tables agree."""

from __future__ import annotations

import pathlib

from loadtest import compare
from loadtest.results import Cell


def available() -> str | None:
    """None when charts can be drawn, else why not."""
    try:
        import matplotlib  # noqa: F401 - imported only to see that it is installed
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'): no charts"
    return None


def throughput_data(cells: list[Cell]) -> dict[str, dict[str, float | None]]:
    """system -> {drain, enqueue_capacity, enqueue_batch} (medians over rounds)."""
    return {s: {k: compare.metric(cells, s, k) for k in ("drain", "enqueue_capacity", "enqueue_batch")}
            for s in compare.systems(cells)}


def latency_data(cells: list[Cell]) -> dict[str, dict[float, dict[str, float]]]:
    """system -> {load fraction -> {p50, p99, p999}} of enqueue ack under open-loop load."""
    out: dict[str, dict[float, dict[str, float]]] = {}
    for s in compare.systems(cells):
        for c in compare.cells_of(cells, s, "enqueue_ack_open_loop"):
            lat = c.latency_ms or {}
            if lat.get("p50") is not None:
                out.setdefault(s, {})[float(c.params.get("fraction"))] = {
                    p: lat[p] for p in ("p50", "p99", "p999") if lat.get(p) is not None}
    return out


def _name(cells: list[Cell], s: str) -> str:
    lab = compare.labels(cells).get(s)
    return f"{s}\n({lab})" if lab and lab != "Postgres" else s


def draw(cells: list[Cell], out_dir: pathlib.Path, prefix: str, subtitle: str) -> list[tuple[str, str]]:
    """Write the PNGs; -> [(title, file name)] for the report."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    charts = []
    data = throughput_data(cells)
    if data:
        names = list(data)
        fig, ax = plt.subplots(figsize=(10, 5.5))
        keys = (("drain", "drain (tasks/s)"), ("enqueue_capacity", "enqueue, single calls"),
                ("enqueue_batch", "enqueue, batches of 100"))
        width = 0.8 / len(keys)
        for i, (k, label) in enumerate(keys):
            vals = [data[s][k] or 0.0 for s in names]
            bars = ax.bar([x + (i - 1) * width for x in range(len(names))], vals, width, label=label)
            for bar, v in zip(bars, vals, strict=True):
                if v:
                    ax.annotate(f"{v:,.0f}", (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom",
                                fontsize=7, rotation=90, xytext=(0, 2), textcoords="offset points")
        ref = compare.reference_rates(cells)
        if ref["phys_job_best"]:
            ax.axhline(ref["phys_job_best"], color="gray", linestyle="--", linewidth=1,
                       label=f"PHYS_job best ({ref['phys_job_best']:,.0f} jobs/s)")
        ax.set_xticks(range(len(names)), [_name(cells, s) for s in names], fontsize=8)
        ax.set_yscale("log")
        top = max([v for s_ in names for v in data[s_].values() if v] + [ref["phys_job_best"] or 0, 10])
        ax.set_ylim(5, top * 4)  # room for the value labels above the tallest bar
        ax.set_ylabel("tasks/s (log scale)")
        ax.set_title(f"Throughput by system, same Postgres, same run\n{subtitle}", fontsize=10)
        ax.legend(fontsize=8, loc="upper left", ncol=2)
        fig.tight_layout()
        name = f"{prefix}-throughput.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        charts.append(("Throughput by system", name))
    lat = latency_data(cells)
    if lat:
        fig, axes = plt.subplots(1, 3, figsize=(12, 4.5), sharey=True)
        for ax, pct in zip(axes, ("p50", "p99", "p999"), strict=True):
            for s, by_load in lat.items():
                xs = sorted(by_load)
                ys = [by_load[x].get(pct) for x in xs]
                ax.plot([x * 100 for x in xs], ys, marker="o", label=s.replace("\n", " "))
            ax.set_title(f"enqueue ack {pct}", fontsize=10)
            ax.set_xlabel("offered load, % of the system's own capacity")
            ax.set_yscale("log")
            ax.set_xlim(0, 100)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("ms (log scale)")
        # Issue 5's bar: enqueue ack p99 <= 50 ms at 75 % of capacity.
        axes[1].axhline(50, color="gray", linestyle="--", linewidth=1, label="bar: p99 <= 50 ms")
        axes[-1].legend(fontsize=8)
        fig.suptitle(f"Enqueue ack latency percentiles by load (open loop, Poisson)\n{subtitle}", fontsize=10)
        fig.tight_layout()
        name = f"{prefix}-latency.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        charts.append(("Latency percentiles by load", name))
    return charts
