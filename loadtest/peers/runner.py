"""One peer's turn in one round, with the plan for quick and full runs."""

from __future__ import annotations

import dataclasses
import pathlib
import time
import traceback

import asyncpg

from loadtest import sizes
from loadtest.peers import cells, workflow_cells
from loadtest.peers.cells import PeerBench
from loadtest.results import Cell


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes of the peer cells; round-1-only cells are skipped in later rounds."""

    producers: tuple[int, ...]
    enqueue_s: float
    open_loop_fractions: tuple[float, ...]
    batch_seconds: float
    batch_cap: int
    drain_backlog: int
    drain_limit_s: float
    preload_limit_s: float
    s2s_samples: int
    load_s: float
    timer_tasks: int
    timer_window_s: float
    recovery_tasks: int
    recovery_limit_s: float


def plan(quick: bool, seconds: float, drain_tasks: int | None) -> Plan:
    """Quick: capacity (32 producers), batch, a 20 s drain window and idle latency: about a minute a
    peer (DBOS's 1 s poll makes its 100 idle samples ~100 s)."""
    if quick:
        return Plan(producers=(32,), enqueue_s=min(seconds, 5.0), open_loop_fractions=(),
                    batch_seconds=sizes.BATCH_SECONDS_QUICK,
                    batch_cap=sizes.BATCH_CAP_QUICK, drain_backlog=drain_tasks or 10_000, drain_limit_s=20.0,
                    preload_limit_s=20.0, s2s_samples=sizes.PEER_S2S_SAMPLES_QUICK, load_s=0.0, timer_tasks=0,
                    timer_window_s=0.0, recovery_tasks=0, recovery_limit_s=0.0)
    return Plan(producers=(1, 8, 32), enqueue_s=seconds, open_loop_fractions=(0.25, 0.5, 0.75),
                batch_seconds=sizes.BATCH_SECONDS_FULL,
                batch_cap=sizes.BATCH_CAP_FULL, drain_backlog=drain_tasks or 10_000, drain_limit_s=60.0,
                preload_limit_s=90.0, s2s_samples=sizes.PEER_S2S_SAMPLES_FULL, load_s=15.0, timer_tasks=10_000,
                timer_window_s=60.0, recovery_tasks=16, recovery_limit_s=75.0)


async def peer_turn(run, peer_cls, round_no: int, p: Plan, *, big_drain: int = 0) -> None:
    """Set the peer up fresh, run its cells, tear it down (everything it started is stopped)."""
    name = peer_cls.name
    workdir = pathlib.Path(run.pg.root) / "peers" / f"{name}-r{round_no}"
    peer = peer_cls(run.pg, run.registry, workdir)
    admin = await asyncpg.connect(run.pg.dsn("postgres"), timeout=10)
    t0 = time.monotonic()
    try:
        try:
            await peer.setup()
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            traceback.print_exc()
            run.record(Cell(system=name, workload="setup", params={"round": round_no}, ok=False,
                            error=repr(e)[:500], extra={"label": peer.label}))
            return
        run.say(f"{name} (round {round_no}) set up in {time.monotonic() - t0:.1f}s")
        b = PeerBench(run, peer, round_no, admin)
        if run.args.only == "workflows":
            await workflow_cells.turn(b, run.workflow_plan)
        else:
            await _cells(b, p, round_no == 1, big_drain)
    finally:
        try:
            peer.stop_worker()
            await peer.teardown()
        except Exception:  # noqa: BLE001 - stopping must go on
            traceback.print_exc()
        peer.stop_servers()
        peer.remove_workdir()
        await admin.close(timeout=5)
        run.say(f"{name} (round {round_no}) done in {time.monotonic() - t0:.1f}s")


async def _reset(b: PeerBench) -> None:
    """Fresh state for the peer (new database or server), as at the start of its turn."""
    b.peer.stop_worker()
    await b.peer.teardown()
    b.peer.stop_servers()
    await b.peer.setup()


async def _cells(b: PeerBench, p: Plan, first: bool, big_drain: int) -> None:
    peer = b.peer
    if first:
        await b.guarded("schedule_to_start_idle", b.params(), lambda: cells.schedule_to_start_idle(b, p.s2s_samples))
        # On an empty queue with the worker up, as Ratchet's (ratchet_workflows.run_cells).
        await workflow_cells.turn(b, b.run.workflow_plan)
    peer.stop_worker()
    rates = []
    for n in p.producers:
        r = await b.guarded("enqueue_single", b.params(producers=n),
                            lambda n=n: cells.enqueue_single(b, n, p.enqueue_s))
        rates.append(r or 0.0)
    capacity = max(rates) if rates else 0.0
    if first and capacity > 0:
        for frac in p.open_loop_fractions:
            await b.guarded("enqueue_ack_open_loop", b.params(fraction=frac),
                            lambda frac=frac: cells.open_loop(b, capacity, frac, p.enqueue_s + 3))
    drain_rate = await b.guarded("drain", b.params(), lambda: cells.drain(
        b, p.drain_backlog, p.drain_limit_s, p.preload_limit_s))
    if first and big_drain:
        await b.guarded("drain", b.params(), lambda: cells.drain(b, big_drain, 120.0, 180.0))
    # After the drains, as in Ratchet's turn: the time-bounded batch cells leave 100k+ tasks,
    # which would otherwise be the drain's backlog (bigger for a faster enqueuer).
    batch_rate = 0.0
    if peer.supports_batch:
        peer.stop_worker()
        for n in sizes.BATCH_PRODUCERS:  # (as Ratchet's: ratchet_cells.batch_cells)
            rate = await b.guarded("enqueue_batch", b.params(batch=100, producers=n), lambda n=n: cells.enqueue_batch(
                b, 100, n, p.batch_seconds, p.batch_cap))
            batch_rate = max(batch_rate, rate or 0.0)
        if first:  # as Ratchet's round-1 cells: calls of 1,000 from 2 producers
            await b.guarded("enqueue_batch", b.params(batch=1000), lambda: cells.enqueue_batch(
                b, 1000, 2, p.batch_seconds, p.batch_cap))
    if not first:
        return
    # A drain window may leave a backlog; the latency cells need an empty queue: start afresh.
    await _reset(b)
    if p.load_s and drain_rate:
        # 50 % of what the system sustains end to end: the lower of its enqueue and drain rates.
        await b.guarded("schedule_to_start_load", b.params(), lambda: cells.schedule_to_start_load(
            b, 0.5 * min(drain_rate, capacity or drain_rate), p.load_s))
    if p.timer_tasks:
        # A peer that cannot even enqueue the timers in half the window gets fewer (recorded).
        rate = batch_rate if peer.batch_with_delays and batch_rate else capacity
        n = max(100, min(p.timer_tasks, int(rate * p.timer_window_s / 2)))
        lead = 5.0 + 1.5 * n / max(rate, 1.0)  # every timer enqueued before the first is due
        await b.guarded("timer_lateness", b.params(), lambda: cells.timer_lateness(b, n, p.timer_window_s, lead))
    if p.recovery_tasks:
        await b.guarded("recovery", b.params(), lambda: cells.recovery(b, p.recovery_tasks, 2.0, p.recovery_limit_s))
    peer.stop_worker()
