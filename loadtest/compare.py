"""Side-by-side comparison (issue 5), pure functions over cells: interleaving
order, aggregation over rounds, Ratchet ÷ peer and Ratchet ÷ reference ratios,
the issue-5 bar verdicts, and their Markdown. Unit-tested (tests/unit/loadtest)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from loadtest.results import Cell

REFERENCE = "postgres"
RATCHET = "ratchet"


def round_orders(systems: list[str], rounds: int) -> list[list[str]]:
    """A B C, C B A, A B C, ...: every system in turn, alternating direction, so a drift
    of the shared machine over the run does not always favour the same system."""
    return [list(systems) if r % 2 == 0 else list(reversed(systems)) for r in range(max(0, rounds))]


def _matches(c: Cell, system: str, workload: str, params: dict[str, Any]) -> bool:
    return (c.ok and c.system == system and c.workload == workload
            and all(c.params.get(k) == v for k, v in params.items()))


def cells_of(cells: Iterable[Cell], system: str, workload: str, **params: Any) -> list[Cell]:
    """Successful cells of one system and workload whose params include `params`."""
    return [c for c in cells if _matches(c, system, workload, params)]


def median_rate(cells: Iterable[Cell], system: str, workload: str, **params: Any) -> tuple[float | None, int]:
    """Median rate over the rounds (and whatever other params vary), and how many cells it had."""
    rates = [c.rate for c in cells_of(cells, system, workload, **params) if c.rate is not None]
    return (statistics.median(rates), len(rates)) if rates else (None, 0)


def best_rate(cells: Iterable[Cell], system: str, workload: str, *, by: str, **params: Any) -> tuple[float | None, Any]:
    """Over the values of param `by` (e.g. producers), the best of the per-value medians."""
    found = cells_of(cells, system, workload, **params)
    best, arg = None, None
    for value in sorted({c.params.get(by) for c in found}, key=str):
        m, _ = median_rate(found, system, workload, **{by: value})
        if m is not None and (best is None or m > best):
            best, arg = m, value
    return best, arg


def latency(cells: Iterable[Cell], system: str, workload: str, pct: str = "p50", **params: Any) -> float | None:
    """A latency percentile of the first matching cell (latency cells run once, in round 1)."""
    for c in cells_of(cells, system, workload, **params):
        v = (c.latency_ms or {}).get(pct)
        if v is not None:
            return float(v)
    return None


def median_field(cells: Iterable[Cell], system: str, workload: str, field: str, **params: Any) -> float | None:
    """Median of a per-task figure (commits_per_task, wal_bytes_per_task) over matching cells."""
    vals = [getattr(c, field) for c in cells_of(cells, system, workload, **params) if getattr(c, field) is not None]
    return statistics.median(vals) if vals else None


def systems(cells: Iterable[Cell]) -> list[str]:
    """Ratchet first, then peers in order of appearance (the reference is not a system here)."""
    seen: list[str] = []
    for c in cells:
        if c.system not in seen and c.system != REFERENCE:
            seen.append(c.system)
    return sorted(seen, key=lambda s: (s != RATCHET, seen.index(s)))


def labels(cells: Iterable[Cell]) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in cells:
        lab = (c.extra or {}).get("label")
        if lab:
            out[c.system] = lab
    return out


def recovery_s(cells: Iterable[Cell], system: str) -> tuple[float | None, str]:
    """Seconds from the kill until every task finished, or None and why."""
    for c in cells_of(cells, system, "recovery"):
        if c.rate is not None:
            return float(c.rate), ""
        return None, f"not finished in {c.extra.get('limit_s')} s"
    return None, "not measured"


# The rows of the comparison: (key, title, higher_is_better)
METRICS = (
    ("drain", "drain, tasks/s (median over rounds)", True),
    ("drain_big", "drain of a 100k backlog, tasks/s (120 s window)", True),
    ("enqueue_capacity", "enqueue capacity, single calls, tasks/s (best producer count)", True),
    ("enqueue_unary", "enqueue capacity, Ratchet's unary gRPC EnqueueTask (no SDK), 32 producers", True),
    ("enqueue_rest", "enqueue capacity, Ratchet's REST POST /v1/tasks (no SDK), 32 producers", True),
    ("enqueue_batch", "enqueue capacity, batch calls of 100, tasks/s (best producer count)", True),
    ("enqueue_batch_1000", "enqueue, batch calls of 1,000, tasks/s", True),
    ("s2s_idle_p50", "schedule-to-start idle p50, ms", False),
    ("s2s_idle_p99", "schedule-to-start idle p99, ms", False),
    ("s2s_load_p50", "schedule-to-start at 50 % load p50, ms", False),
    ("ack_p99_75", "enqueue ack p99 at 75 % of capacity, ms", False),
    ("timer_p50", "timer lateness p50, ms", False),
    ("timer_p99", "timer lateness p99, ms", False),
    ("recovery", "recovery after a killed worker, s", False),
    ("commits", "commits per task (drain)", False),
    ("wal", "WAL bytes per task (drain)", False),
)


# Ratchet's enqueue cells for clients without the SDK: metric key -> workload.
_NO_SDK_CELLS = {"enqueue_unary": "enqueue_single_unary", "enqueue_rest": "enqueue_single_rest"}


def metric(cells: list[Cell], system: str, key: str) -> float | None:
    """One figure of one system, as the comparison table shows it."""
    if key == "drain":
        return median_rate(regular_drains(cells, system), system, "drain")[0]
    if key == "drain_big":
        big = [c.rate for c in cells_of(cells, system, "drain") if is_big_drain(c) and c.rate]
        return big[0] if big else None
    if key == "enqueue_capacity":
        return best_rate(cells, system, "enqueue_single", by="producers")[0]
    if key in _NO_SDK_CELLS:
        found = [c.rate for c in cells_of(cells, system, _NO_SDK_CELLS[key]) if c.rate]
        return found[0] if found else None
    if key == "enqueue_batch":
        return best_rate(cells, system, "enqueue_batch", by="producers", batch=100)[0]
    if key == "enqueue_batch_1000":
        return median_rate(cells, system, "enqueue_batch", batch=1000)[0]
    if key == "s2s_idle_p50":
        return latency(cells, system, "schedule_to_start_idle", "p50")
    if key == "s2s_idle_p99":
        return latency(cells, system, "schedule_to_start_idle", "p99")
    if key == "s2s_load_p50":
        return latency(cells, system, "schedule_to_start_load", "p50")
    if key == "ack_p99_75":
        return latency(cells, system, "enqueue_ack_open_loop", "p99", fraction=0.75)
    if key == "timer_p50":
        return latency(cells, system, "timer_lateness", "p50")
    if key == "timer_p99":
        return latency(cells, system, "timer_lateness", "p99")
    if key == "recovery":
        return recovery_s(cells, system)[0]
    if key == "commits":
        return median_field(cells, system, "drain", "commits_per_task")
    if key == "wal":
        return median_field(cells, system, "drain", "wal_bytes_per_task")
    raise KeyError(key)


def is_big_drain(c: Cell) -> bool:
    """The full mode's extra 100k drain (a steady-state window), kept out of the rounds' median."""
    requested = (c.extra or {}).get("requested_backlog")
    if requested is not None:
        return requested >= 50_000
    return c.params.get("backlog", 0) >= 100_000


def regular_drains(cells: Iterable[Cell], system: str) -> list[Cell]:
    """Each round's drain (a backlog of at least 10k: what the enqueue cells left, topped up)."""
    return [c for c in cells_of(cells, system, "drain") if not is_big_drain(c)]


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours ÷ theirs, None when either is missing or theirs is 0."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def fmt_num(v: float | None) -> str:
    if v is None:
        return "–"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def fmt_ratio(r: float | None, higher_is_better: bool) -> str:
    """'1.52×' with a mark of who leads: ▲ Ratchet better, ▼ peer better."""
    if r is None:
        return "–"
    better = r > 1 if higher_is_better else r < 1
    mark = "" if abs(r - 1) < 0.005 else (" ▲" if better else " ▼")
    return f"{r:.2f}×{mark}"


def comparison_table(cells: list[Cell]) -> list[str]:
    """Markdown: one row per metric, each system's value, and Ratchet ÷ each peer."""
    names = systems(cells)
    labs = labels(cells)
    peers = [s for s in names if s != RATCHET]
    head = [f"{s} ({labs[s]})" if s in labs else s for s in names]
    out = ["| metric | " + " | ".join(head) + " | " + " | ".join(f"Ratchet ÷ {p}" for p in peers) + " |",
           "|---|" + "---|" * (len(names) + len(peers))]
    for key, title, hib in METRICS:
        vals = {s: metric(cells, s, key) for s in names}
        if all(v is None for v in vals.values()):
            continue
        ours = vals.get(RATCHET)
        row = [_shown(cells, s, key, vals[s]) for s in names] + [fmt_ratio(ratio(ours, vals[p]), hib) for p in peers]
        out.append(f"| {title} | " + " | ".join(row) + " |")
    return out


def _shown(cells: list[Cell], system: str, key: str, v: float | None) -> str:
    """A table value; a recovery that did not finish says so instead of a dash."""
    if v is None and key == "recovery":
        _, why = recovery_s(cells, system)
        return why.replace("not finished in", "not done in") if why != "not measured" else "–"
    return fmt_num(v)


def reference_rates(cells: list[Cell]) -> dict[str, float | None]:
    """The physical reference figures the bar divides by."""
    job = [c for c in cells_of(cells, REFERENCE, "PHYS_job") if c.rate]
    best = max(job, key=lambda c: c.rate) if job else None
    commit = [c for c in cells_of(cells, REFERENCE, "PHYS_commit") if c.rate]
    return {
        "phys_job_best": best.rate if best else None,
        "phys_job_commits": best.commits_per_task if best else None,
        "phys_job_wal": best.wal_bytes_per_task if best else None,
        "phys_commit_best": max((c.rate for c in commit), default=None),
        "phys_batched_best": max((c.rate for c in cells_of(cells, REFERENCE, "PHYS_batched") if c.rate),
                                 default=None),
    }


def reference_table(cells: list[Cell]) -> list[str]:
    """Markdown: every system ÷ the physical reference, for drain and enqueue."""
    ref = reference_rates(cells)
    out = ["| system | drain ÷ PHYS_job (best) | drain ÷ PHYS_batched | enqueue capacity ÷ PHYS_commit (best) | "
           "commits/task ÷ PHYS_job's | WAL B/task ÷ PHYS_job's |", "|---|---|---|---|---|---|"]
    for s in systems(cells):
        drain, enq = metric(cells, s, "drain"), metric(cells, s, "enqueue_capacity")
        cols = [ratio(drain, ref["phys_job_best"]), ratio(drain, ref["phys_batched_best"]),
                ratio(enq, ref["phys_commit_best"]), ratio(metric(cells, s, "commits"), ref["phys_job_commits"]),
                ratio(metric(cells, s, "wal"), ref["phys_job_wal"])]
        out.append(f"| {s} | " + " | ".join("–" if v is None else f"{v:.3f}" for v in cols) + " |")
    return out


def postgres_peers(cells: list[Cell]) -> list[str]:
    """Peers whose cells carry Postgres amplification (Celery and Temporal do not use it)."""
    labs = labels(cells)
    return [s for s in systems(cells) if s != RATCHET and labs.get(s, "") in ("", "Postgres")]


def _verdict(ok: bool | None) -> str:
    return "NOT MEASURED" if ok is None else ("PASS" if ok else "FAIL")


def peer_bars(cells: list[Cell]) -> list[dict]:
    """The numeric bars of issue 5, each PASS, FAIL or NOT MEASURED."""
    ref = reference_rates(cells)
    out = []
    drain = metric(cells, RATCHET, "drain")
    pg_peers = postgres_peers(cells)
    # Enqueue capacity is single calls and batch calls (issue 5's workloads): a row for each.
    for key, what in (("drain", "drain"), ("enqueue_capacity", "enqueue capacity, single calls"),
                      ("enqueue_batch", "enqueue capacity, batch calls of 100"),
                      ("enqueue_batch_1000", "enqueue capacity, batch calls of 1,000")):
        ours = metric(cells, RATCHET, key)
        theirs = {p: metric(cells, p, key) for p in pg_peers}
        theirs = {p: v for p, v in theirs.items() if v is not None}
        if ours is None or not theirs:
            out.append({"bar": f"{what} ahead of every Postgres-backed peer", "measured": "–",
                        "threshold": "> every peer", "verdict": "NOT MEASURED"})
            continue
        lead, lv = max(theirs.items(), key=lambda kv: kv[1])
        out.append({"bar": f"{what} ahead of every Postgres-backed peer",
                    "measured": f"{fmt_num(ours)} vs best peer {lead} {fmt_num(lv)} ({ours / lv:.2f}×)",
                    "threshold": "> 1.00× of the best", "verdict": _verdict(ours > lv)})
    r = ratio(drain, ref["phys_job_best"])
    out.append({"bar": "drain >= 1.0 x PHYS_job (unbatched reference)",
                "measured": "–" if r is None else f"{r:.2f}× ({fmt_num(drain)} vs {fmt_num(ref['phys_job_best'])})",
                "threshold": ">= 1.00×", "verdict": _verdict(None if r is None else r >= 1.0)})
    for key, title, limit in (("s2s_idle_p50", "idle schedule-to-start p50", 20.0),
                              ("s2s_idle_p99", "idle schedule-to-start p99", 100.0),
                              ("ack_p99_75", "enqueue ack p99 at 75 % of capacity", 50.0)):
        v = metric(cells, RATCHET, key)
        out.append({"bar": title, "measured": "–" if v is None else f"{v:.1f} ms",
                    "threshold": f"<= {limit:g} ms", "verdict": _verdict(None if v is None else v <= limit)})
    commits = metric(cells, RATCHET, "commits")
    out.append({"bar": "commits per task", "measured": "–" if commits is None else f"{commits:.2f}",
                "threshold": "<= 3", "verdict": _verdict(None if commits is None else commits <= 3)})
    wal = metric(cells, RATCHET, "wal")
    wr = ratio(wal, ref["phys_job_wal"])
    out.append({"bar": "WAL bytes per task <= 2 x the reference's (drain only)",
                "measured": "–" if wr is None else f"{wr:.2f}× ({wal:,.0f} vs {ref['phys_job_wal']:,.0f} B)",
                "threshold": "<= 2.00×", "verdict": _verdict(None if wr is None else wr <= 2.0)})
    # PHYS_job's figure is a whole life (insert, claim, complete); the drain row above counts
    # only lease and completion. The whole-life row adds the enqueue's WAL (32 producers).
    enq_wal = [c.wal_bytes_per_task for c in cells_of(cells, RATCHET, "enqueue_single")
               if c.params.get("producers") == 32 and c.wal_bytes_per_task]
    life = wal + enq_wal[0] if wal is not None and enq_wal else None
    lr = ratio(life, ref["phys_job_wal"])
    out.append({"bar": "WAL bytes per task <= 2 x the reference's (whole life: enqueue + drain)",
                "measured": "–" if lr is None else f"{lr:.2f}× ({life:,.0f} vs {ref['phys_job_wal']:,.0f} B)",
                "threshold": "<= 2.00×", "verdict": _verdict(None if lr is None else lr <= 2.0)})
    return out


def bar_table(bars: list[dict]) -> list[str]:
    out = ["| bar | measured | threshold | verdict |", "|---|---|---|---|"]
    out += [f"| {b['bar']} | {b['measured']} | {b['threshold']} | **{b['verdict']}** |" for b in bars]
    return out


def rounds_table(cells: list[Cell]) -> list[str]:
    """The interleaved rounds side by side: drain and best enqueue per round, per system."""
    names = systems(cells)
    rounds = sorted({c.params.get("round", 1) for c in cells if c.system in names and c.workload == "drain"})
    if len(rounds) < 2:
        return []
    out = ["| system | " + " | ".join(f"drain r{r}" for r in rounds) + " | "
           + " | ".join(f"enqueue r{r}" for r in rounds) + " |", "|---|" + "---|" * (2 * len(rounds))]
    for s in names:
        d = [_round_rate(cells, s, "drain", r) for r in rounds]
        e = [_round_best(cells, s, r) for r in rounds]
        out.append(f"| {s} | " + " | ".join(fmt_num(v) for v in d + e) + " |")
    return out


def _round_rate(cells: list[Cell], system: str, workload: str, r: int) -> float | None:
    found = [c.rate for c in regular_drains(cells, system) if c.params.get("round", 1) == r and c.rate]
    return found[0] if found else None


def _round_best(cells: list[Cell], system: str, r: int) -> float | None:
    found = [c.rate for c in cells_of(cells, system, "enqueue_single") if c.params.get("round", 1) == r and c.rate]
    return max(found) if found else None


def shards_table(cells: list[Cell]) -> list[str]:
    """Ratchet with 1, 2 and 4 shards (fresh platform each): enqueue and drain, and the gain over 1 shard."""
    rows = []
    base_d = base_e = None
    for n in sorted({c.params.get("shards") for c in cells if c.system == RATCHET and "shards" in c.params}):
        d = median_rate(cells, RATCHET, "shards_drain", shards=n)[0]
        e = median_rate(cells, RATCHET, "shards_enqueue", shards=n)[0]
        if n == 1:
            base_d, base_e = d, e
        rows.append(f"| {n} | {fmt_num(e)} | {fmt_num(d)} | {fmt_ratio(ratio(e, base_e), True)} | "
                    f"{fmt_ratio(ratio(d, base_d), True)} |")
    if not rows:
        return []
    return ["| shards | enqueue, 32 producers, tasks/s | drain, tasks/s | enqueue ÷ 1 shard | drain ÷ 1 shard |",
            "|---|---|---|---|---|"] + rows
