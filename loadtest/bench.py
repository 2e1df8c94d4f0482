"""`python -m loadtest.bench [--quick]`: one benchmark run on this machine.

Starts its own Postgres (durable settings, printed), measures the physical
reference with pgbench and a batched asyncpg loop, then Ratchet's cells on
the same cluster when the platform can be started, prints a table with
ratios and the issue-2 bar, writes one JSON line per cell to
loadtest/results/<run>.jsonl and a Markdown report beside it (and, with
--publish, to docs/benchmarks/latest.md). Everything it starts is stopped
by PID at the end, on Ctrl-C and on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import shutil
import sys
import time
import traceback

from loadtest import machine as machine_mod
from loadtest import report, verdicts, workflows
from loadtest.pgserver import BenchPostgres
from loadtest.physical import Physical
from loadtest.procs import Registry
from loadtest.results import Cell, ResultLog

HERE = pathlib.Path(__file__).parent
REPO = HERE.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short cells (~5-10 s each): the `make bench` run")
    p.add_argument("--only", choices=("all", "phys", "ratchet", "peers", "workflows"), default="all",
                   help="which part to run (default all); workflows: only the workflow cells of Ratchet and "
                        "of the peers that have them (loadtest/workflows.py), one round")
    p.add_argument("--peers", default="all",
                   help="comma-separated peers to run beside Ratchet (procrastinate, dbos, graphile-worker, "
                        "celery, temporal), 'all' (default: every installed one) or 'none'")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds (A B C, C B A, A B C, ...): default 1 with --quick, 3 otherwise")
    p.add_argument("--big-drain", type=int, default=None,
                   help="tasks of the extra round-1 drain (default 100000 without --quick, none with it)")
    p.add_argument("--seconds", type=float, default=None,
                   help="seconds per pgbench/throughput cell (default 5 with --quick, 20 otherwise)")
    p.add_argument("--drain-tasks", type=int, default=None,
                   help="tasks preloaded for the drain cells (default 10000; full mode adds one --big-drain drain)")
    p.add_argument("--workflow-runs", type=int, default=None,
                   help="N runs of the workflow throughput cell (default 100 with --quick, 200 otherwise)")
    p.add_argument("--workflow-steps", type=int, default=None, help="K no-op steps per workflow run (default 10)")
    p.add_argument("--workflow-samples", type=int, default=None,
                   help="runs of the idle workflow latency cell, one at a time (default 30 with --quick, 50 otherwise)")
    p.add_argument("--no-profile", action="store_true", help="skip the py-spy profile of the drain")
    p.add_argument("--native", action="store_true",
                   help="py-spy --native: show time inside C extensions (grpc, asyncpg, protobuf)")
    p.add_argument("--publish", action="store_true",
                   help="also write docs/benchmarks/latest.md and latest.jsonl")
    p.add_argument("--keep-pg", action="store_true", help="keep the Postgres data folder for inspection")
    p.add_argument("--results-dir", default=str(HERE / "results"))
    return p.parse_args(argv)


class Run:
    """State shared by the phases of one run."""

    def __init__(self, args: argparse.Namespace, registry: Registry):
        self.args = args
        self.quick = args.quick
        self.seconds = args.seconds or (5.0 if args.quick else 20.0)
        self.registry = registry
        self.log = ResultLog(pathlib.Path(args.results_dir))
        self.pg = BenchPostgres(registry, keep=args.keep_pg)
        self.machine: dict[str, str] = {}
        self.notes: list[str] = []
        # Extra report sections (title, Markdown lines): statements and profiles.
        self.sections: list[tuple[str, list[str]]] = []
        self.t0 = time.monotonic()
        self.rounds = args.rounds or (1 if args.quick or args.only == "workflows" else 3)  # (workflows: --rounds)
        self.workflow_plan = workflows.plan(args.quick, runs=args.workflow_runs, steps=args.workflow_steps,
                                            samples=args.workflow_samples)
        self.skipped: dict[str, str] = {}  # peer -> why it was not run
        self.peer_info: dict[str, dict[str, str]] = {}  # peer -> label, version, configuration
        self.charts: list[tuple[str, str]] = []  # (title, file name beside the report)

    def say(self, msg: str) -> None:
        print(f"[bench +{time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)

    def record(self, cell: Cell) -> Cell:
        self.log.add(cell)
        lat = cell.latency_ms or {}
        extra = f" p50={lat.get('p50')} p99={lat.get('p99')}" if lat.get("p50") is not None else ""
        amp = f" commits/task={cell.commits_per_task} WAL B/task={cell.wal_bytes_per_task}"
        if cell.ok:
            self.say(f"{cell.key}: {cell.rate} {cell.unit}{extra}{amp}")
        else:
            self.say(f"{cell.key}: FAILED {cell.error}")
        return cell


async def run_physical(run: Run) -> None:
    """PHYS_commit and PHYS_job at 1/8/32 clients, PHYS_batched."""
    clients = (1, 8, 32)
    async with Physical(run.pg, run.registry, seconds=run.seconds) as phys:
        for c in clients:
            run.record(await phys.phys_commit(c))
        for c in clients:
            run.record(await phys.phys_job(c))
        for w in ((2,) if run.quick else (1, 2, 4)):
            rows = 100_000 if run.quick else 500_000
            run.record(await phys.phys_batched(w, 100, rows))
    await quiesce(run, "the reference")


async def quiesce(run: Run, after: str) -> None:
    """Vacuum what `after` left and checkpoint, outside any cell, so its cleanup never
    runs inside the next system's cells (PERFORMANCE.md: same conditions for every system)."""
    try:
        took = await run.pg.quiesce()
        run.say(f"quiesced after {after}: VACUUM ANALYZE of every database + CHECKPOINT in {took:.1f}s")
    except Exception as e:  # noqa: BLE001 - a slow vacuum must not lose the run
        run.notes.append(f"quiesce after {after} failed: {e!r}")
        run.say(f"quiesce after {after} failed: {e!r}")


async def run_physical_again(run: Run) -> None:
    """PHYS_job once more after the platform stopped (A B A): drift on a shared machine shows,
    and the bar divides by the best PHYS_job of either pass."""
    async with Physical(run.pg, run.registry, seconds=run.seconds) as phys:
        for c in (8, 32):
            cell = await phys.phys_job(c)
            cell.params["pass"] = 2
            run.record(cell)


async def run_ratchet(run: Run, round_no: int | None = None) -> None:
    """Ratchet's cells, when the platform is importable and starts."""
    try:
        from loadtest import ratchet_cells
    except ImportError as e:
        run.notes.append(f"Ratchet cells skipped: {e}")
        run.say(f"Ratchet cells skipped: {e}")
        return
    await ratchet_cells.run_all(run, round_no)


def selected_peers(run: Run) -> list:
    """Peer classes to run: the requested ones that are installed; the others are noted as skipped."""
    from loadtest import peers
    if run.args.peers == "none" or run.args.only in ("phys", "ratchet"):
        return []
    names = list(peers.PEER_MODULES) if run.args.peers == "all" else [
        n.strip() for n in run.args.peers.split(",") if n.strip()]
    out = []
    for name in names:
        if name not in peers.PEER_MODULES:
            raise SystemExit(f"unknown peer {name!r}; known: {', '.join(peers.PEER_MODULES)}")
        try:
            cls = peers.load(name)
            if run.args.only == "workflows" and not cls.supports_workflows:
                continue
            out.append(cls)
            run.peer_info[name] = {"label": cls.label, "version": cls.version, "config": cls.config_note,
                                   "recovery": cls.recovery_note}
        except Exception as e:  # noqa: BLE001 - PeerUnavailable or a broken install: skip, say why
            msg = f"peer {name} skipped: {e}"
            run.notes.append(msg)
            run.skipped[name] = str(e)
            run.say(msg)
    return out


async def run_rounds(run: Run) -> None:
    """Every system in turn, interleaved (A B C, C B A, A B C): Ratchet's full issue-2 cells
    in round 1, its capacity and drain cells in later rounds; each peer fresh every round."""
    from loadtest import compare, ratchet_rounds
    from loadtest.peers import runner
    peer_classes = selected_peers(run)
    # Sync producer APIs (DBOS's enqueue_async, Celery's delay) run in the default
    # executor: give 32 producers 32 threads instead of asyncio's min(32, cores + 4).
    import concurrent.futures
    asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(64))
    systems = ([] if run.args.only == "peers" else ["ratchet"]) + [c.name for c in peer_classes]
    by_name = {c.name: c for c in peer_classes}
    p = runner.plan(run.quick, run.seconds, None)
    big = 0 if run.quick else (run.args.big_drain if run.args.big_drain is not None else 100_000)
    if run.args.only == "all":
        # The reference's pgbench cells leave dead rows and dirty pages too: the first
        # system of round 1 starts on a quiesced cluster like every one after it.
        await quiesce(run, "the physical reference")
    for r, order in enumerate(compare.round_orders(systems, run.rounds), start=1):
        run.say(f"round {r}: {' -> '.join(order)}")
        for system in order:
            try:
                if system == "ratchet":
                    # --only workflows repeats Ratchet's (workflow) turn on a fresh platform every round.
                    await (run_ratchet(run, r) if r == 1 or run.args.only == "workflows"
                           else ratchet_rounds.ratchet_round(run, r))
                else:
                    await runner.peer_turn(run, by_name[system], r, p, big_drain=big)
            except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
                raise
            except Exception as e:  # noqa: BLE001 - one system must not lose the others' cells
                run.notes.append(f"{system} in round {r} failed: {e!r}")
                traceback.print_exc()
            await quiesce(run, f"{system} (round {r})")
    if "ratchet" in systems and not run.quick and run.args.only != "workflows":
        await ratchet_rounds.shard_sweep(run)


async def main_async(run: Run) -> int:
    run.pg.start()
    run.machine = machine_mod.describe(str(run.pg.root))
    run.say("machine: " + ", ".join(f"{k}={v}" for k, v in run.machine.items()))
    print(run.pg.describe(), flush=True)
    failed = False
    parts = (("phys", run_physical), ("rounds", run_rounds), ("phys_again", run_physical_again))
    for part, fn in parts:
        only = run.args.only
        if part == "phys" and only not in ("all", "phys"):
            continue
        if part == "rounds" and only not in ("all", "ratchet", "peers", "workflows"):
            continue
        if part == "phys_again" and only != "all":
            continue
        try:
            await fn(run)
        except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
            raise
        except Exception as e:  # noqa: BLE001 - one broken part must not lose the other's cells
            failed = True
            run.notes.append(f"{part} part failed: {e!r}")
            traceback.print_exc()
    write_report(run)
    # Bar verdicts are findings, not errors; a cell that could not be measured is an error.
    failed = failed or any(not c.ok for c in run.log.cells)
    return 1 if failed else 0


def comparison_sections(run: Run, cells: list[Cell], chart_prefix: str) -> list[tuple[str, list[str]]]:
    """Issue 5: the bar, Ratchet ÷ each peer, every system ÷ the reference, the rounds, the charts."""
    from loadtest import compare
    systems = compare.systems(cells)
    if not systems:
        return []
    out = [("Bars against the peers", compare.bar_table(compare.peer_bars(cells)) + [
        "", "Ratchet's figures are medians over the interleaved rounds where a workload ran in every "
            "round (drain, enqueue capacity), single round-1 cells otherwise. PASS/FAIL are measurements, "
            "not goals met by this suite."])]
    if len(systems) > 1:
        out.append(("Side by side: Ratchet ÷ each peer", compare.comparison_table(cells) + [
            "", "▲: Ratchet better on that row, ▼: the peer better (for throughput a ratio above 1 is better, "
                "for latency, recovery and amplification below 1). Celery's broker is Redis with persistence "
                "off (not durable); Temporal's dev server keeps its state in SQLite, not on this Postgres."]))
    wf = workflows.report_table(cells)
    if wf:
        out.append(("Workflows: durable no-op steps (issue 24)", wf))
    out.append(("Every system ÷ the physical reference", compare.reference_table(cells)))
    shards = compare.shards_table(cells)
    if shards:
        out.append(("Ratchet with 1, 2 and 4 shards (same machine, fresh platform each)", shards))
    rounds = compare.rounds_table(cells)
    if rounds:
        out.append(("Interleaved rounds (drain and best single-call enqueue, tasks/s)", rounds))
    if run.peer_info or run.skipped:
        lines = ["| peer | label | version | configuration | recovery |", "|---|---|---|---|---|"]
        lines += [f"| {n} | {i['label']} | {i['version']} | {i['config']} | {i['recovery']} |"
                  for n, i in run.peer_info.items()]
        lines += [f"| {n} | – | – | **skipped**: {why} | – |" for n, why in run.skipped.items()]
        out.append(("Peers: how each was run", lines))
    if run.charts:
        out.append(("Charts", [f"![{t}]({chart_prefix}-{f.split('-', 1)[1]})" for t, f in run.charts]))
    return out


def write_report(run: Run) -> pathlib.Path:
    """Render, print the summary tables, write the report next to the JSONL (and publish)."""
    from loadtest import charts
    cells = run.log.cells
    ratios = verdicts.ratios(cells)
    bars = verdicts.reference_bars(cells)
    why_not = charts.available()
    if why_not:
        run.notes.append(why_not)
    else:
        try:
            subtitle = f"{run.machine.get('date_utc', '')}, {run.machine.get('cores', '?')} cores, run {run.log.run_id}"
            run.charts = charts.draw(cells, run.log.path.parent, run.log.run_id, subtitle)
        except Exception as e:  # noqa: BLE001 - a chart must not lose the report
            traceback.print_exc()
            run.notes.append(f"charts failed: {e!r}")

    def lead(prefix: str) -> list[tuple[str, list[str]]]:
        try:
            return comparison_sections(run, cells, prefix)
        except Exception as e:  # noqa: BLE001 - the cells and the issue-2 report must survive
            traceback.print_exc()
            return [("Comparison", [f"could not be rendered: {e!r}"])]

    def render(prefix: str) -> str:
        return report.render(title="Ratchet benchmark", machine=run.machine, pg_settings=run.pg.settings,
                             cells=cells, ratios=ratios, verdicts=bars, sections=run.sections,
                             notes=run.notes + verdicts.METHOD_NOTES + PEER_NOTES,
                             mode="quick" if run.quick else "full",
                             lead_sections=lead(prefix))
    path = run.log.path.with_suffix(".md")
    path.write_text(render(run.log.run_id))
    print("\n" + "\n".join(report.cell_table(cells)))
    if ratios:
        print("\n" + "\n".join(f"{r['name']}: {r['value']}  ({r['how']})" for r in ratios))
    for b in bars:
        print(f"BAR {b['bar']}: {b['measured']} vs {b['threshold']} -> {b['verdict']}")
    from loadtest import compare
    try:
        wf = workflows.report_table(cells)
        if wf:
            print("\n" + "\n".join(wf))
        if compare.systems(cells):
            print("\n" + "\n".join(compare.comparison_table(cells)))
            for b in compare.peer_bars(cells):
                print(f"BAR5 {b['bar']}: {b['measured']} vs {b['threshold']} -> {b['verdict']}")
    except Exception:  # noqa: BLE001 - printed in the report's place already
        traceback.print_exc()
    print(f"\ncells: {run.log.path}\nreport: {path}")
    if run.args.publish:
        dest = REPO / "docs" / "benchmarks"
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "latest.md").write_text(render("latest"))
        shutil.copyfile(run.log.path, dest / "latest.jsonl")
        for _, name in run.charts:
            shutil.copyfile(run.log.path.parent / name, dest / f"latest-{name.split('-', 1)[1]}")
        print(f"published: {dest / 'latest.md'}")
    return path


PEER_NOTES = [
    "Peers (issue 5): each runs the same no-op workload through its own public API, its producer in this "
    "process (as Ratchet's load generator is), one worker process consuming, on its own database of the same "
    "Postgres cluster (Celery: its own redis-server; Temporal: its dev server's SQLite). Each peer starts "
    "fresh (new database or server) in every round.",
    "Peer drain rate = tasks finished / (queue empty, or the window's end - first progress), from polling the "
    "peer's own count of unfinished tasks every 0.2 s; Ratchet's uses the shards' own timings.",
    "Schedule-to-start and timer lateness for peers: the handler appends its start time (time.time()) for "
    "probe tasks only; latency = that - the time just before the enqueue call (or the due time). Ratchet's "
    "comparable figure is started_at (shard clock, set at lease) - send time (extra send_to_started_ms for "
    "the idle cell); its issue-2 cell keeps created_at -> started_at.",
    "CPU ms/task for peers: <peer>_worker is its worker process tree, postgres the cluster, bench_driver the "
    "producer (this process), redis / temporal_server their servers. A worker started inside a cell is "
    "charged from its start (imports included), as Ratchet's host agent is in its drain.",
]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with Registry() as registry:
        run = Run(args, registry)
        try:
            return asyncio.run(main_async(run))
        except KeyboardInterrupt:
            print("\ninterrupted: stopping everything this run started", file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(main())
