"""The workload cells, run the same way against every peer.

Order within one peer's turn (each cell leaves what the next needs):
  schedule_to_start_idle   worker running, one probe task at a time (round 1)
  (worker stopped: what is enqueued from here on waits as the drain's backlog)
  enqueue_single           closed loop, 1/8/32 producers, the peer's single-enqueue call
  enqueue_ack_open_loop    Poisson arrivals at 25/50/75 % of the best single rate (round 1)
  drain                    backlog topped up, worker started; first progress -> empty
  enqueue_batch            the peer's batch call, when it has one, for a time (worker stopped)
  (round 1: a fresh database for the cells below, as the drain and the batch cells leave tasks)
  schedule_to_start_load   probes among a stream at 50 % of the drain rate (round 1)
  timer_lateness           N tasks due over a window; handler start - due time (round 1)
  recovery                 sleeping tasks in flight, worker SIGKILLed, a new one started (round 1)
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from loadtest import cpu, dbstats, loadgen
from loadtest.peers.base import Peer
from loadtest.results import Cell

POLL_S = 0.2


class PeerBench:
    """One peer's turn in one round: measurement around every cell."""

    def __init__(self, run, peer: Peer, round_no: int, admin: asyncpg.Connection):
        self.run, self.peer, self.round, self.admin = run, peer, round_no, admin
        self._cpu_end: cpu.CpuSnapshot | None = None

    def params(self, **p: Any) -> dict:
        return {**p, "round": self.round}

    def mark_cpu_end(self) -> None:
        self._cpu_end = cpu.take(self.peer.cpu_roots())

    async def measure(self, fn: Callable[[], Awaitable[Any]]):
        """Run fn between counter and CPU snapshots -> (result, Delta | None, cpu_ms, wall_s)."""
        pg = self.peer.uses_postgres
        if pg:
            await self.admin.execute("CHECKPOINT", timeout=60)
            snap_a = await dbstats.snapshot(self.admin)
        probes0 = self.peer.probe_queries
        roots_a = self.peer.cpu_roots()
        cpu_a = cpu.take(roots_a)
        self._cpu_end = None
        t0 = time.monotonic()
        result = await fn()
        wall = time.monotonic() - t0
        # A worker started inside fn is charged from its start (its snapshot
        # at `a` is zero); one stopped inside fn must have closed the window first.
        cpu_b = self._cpu_end or cpu.take({**roots_a, **self.peer.cpu_roots()})
        d = None
        if pg:
            # Reopening the producer flushes its connections' statistics at once.
            await self.peer.reconnect()
            snap_b = await dbstats.snapshot(self.admin)
            settled = await dbstats.settle(self.admin, self.peer.dbs, min_wait_s=1.1, limit_s=8.0)
            d = dbstats.delta(snap_a, snap_b, self.peer.dbs, settled)
            own = self.peer.probe_queries - probes0
            d = dbstats.Delta(**{**d.__dict__, "commits": max(0, d.commits - own)})
        return result, d, cpu.diff_ms(cpu_a, cpu_b), wall

    def cell(self, workload: str, params: dict, *, rate: float | None, unit: str, n: int, wall: float,
             d: dbstats.Delta | None = None, cpu_ms: dict | None = None,
             latency: list[float] | None = None, **kw: Any) -> Cell:
        c = Cell(system=self.peer.name, workload=workload, params=params,
                 rate=None if rate is None else round(rate, 1), unit=unit, n=n, duration_s=round(wall, 2),
                 latency_ms=dbstats.percentiles(latency) if latency is not None else None,
                 cpu_ms_per_task=cpu.per_task(cpu_ms or {}, n), **kw)
        if d is not None:
            c.apply_amplification(d.per_task(n))
        c.extra.setdefault("label", self.peer.label)
        c.extra.setdefault("version", self.peer.version)
        return c

    def record(self, c: Cell) -> Cell:
        return self.run.record(c)

    async def guarded(self, workload: str, params: dict, fn: Callable[[], Awaitable[Any]]) -> Any:
        """A failed cell is recorded as failed and the peer's turn goes on."""
        try:
            return await fn()
        except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
            raise
        except Exception as e:  # noqa: BLE001 - one broken cell must not lose the others
            traceback.print_exc()
            self.record(Cell(system=self.peer.name, workload=workload, params=params, ok=False,
                             error=repr(e)[:500], extra={"label": self.peer.label}))
            return None


def _load_cell(b: PeerBench, workload: str, params: dict, res: loadgen.LoadResult, d, cpu_ms) -> Cell:
    c = b.cell(workload, params, rate=res.rate, unit="tasks/s", n=res.acked, wall=res.wall_s, d=d,
               cpu_ms=cpu_ms, latency=res.latency_ms)
    c.extra.update({"calls": res.calls, "errors": dict(res.errors)})
    if res.errors:
        c.notes = f"errors: {dict(res.errors)}"
    return c


async def enqueue_single(b: PeerBench, producers: int, seconds: float) -> float:
    res, d, cpu_ms, _ = await b.measure(lambda: loadgen.closed_loop_fn(b.peer.send, producers, seconds))
    b.record(_load_cell(b, "enqueue_single", b.params(producers=producers), res, d, cpu_ms))
    return res.rate


async def open_loop(b: PeerBench, capacity: float, fraction: float, seconds: float) -> None:
    rate = max(1.0, capacity * fraction)
    res, d, cpu_ms, _ = await b.measure(lambda: loadgen.open_loop_fn(b.peer.send, rate, seconds))
    c = _load_cell(b, "enqueue_ack_open_loop", b.params(fraction=fraction, target_rate=round(rate)),
                   res, d, cpu_ms)
    c.extra.update({"capacity": round(capacity, 1), "dropped": res.dropped,
                    "send_lag_ms": dbstats.percentiles(res.send_lag_ms)})
    c.notes = (c.notes + "; " if c.notes else "") + f"offered {rate:.0f}/s, achieved {res.rate:.0f}/s"
    b.record(c)


async def enqueue_batch(b: PeerBench, batch: int, producers: int, seconds: float, cap: int) -> float:
    # One call per producer first, not measured, as for Ratchet (ratchet_cells.cell_enqueue_batch).
    await loadgen.batches_fn(b.peer.send_batch, batch, producers, batch * producers)
    res, d, cpu_ms, _ = await b.measure(lambda: loadgen.batches_fn(b.peer.send_batch, batch, producers, cap,
                                                                   seconds=seconds))
    c = _load_cell(b, "enqueue_batch", b.params(batch=batch, producers=producers), res, d, cpu_ms)
    c.extra.update({"seconds": seconds, "cap": cap})
    c.notes = ((c.notes + "; " if c.notes else "") + f"calls started for {seconds:g} s (at most {cap} tasks); "
               "latency is per call; after one unmeasured call per producer")
    b.record(c)
    return res.rate


async def remaining(b: PeerBench) -> int:
    return await b.peer.remaining()


async def top_up(b: PeerBench, want: int, limit_s: float) -> int:
    """At least `want` tasks waiting, or as many as the peer takes in limit_s (recorded)."""
    have = await remaining(b)
    need = want - have
    if need <= 0:
        return have
    if b.peer.supports_batch:
        await loadgen.batches_fn(b.peer.send_batch, 1000, 2, need)
    else:
        await loadgen.closed_loop_fn(b.peer.send, 32, limit_s, max_tasks=need)
    return await remaining(b)


async def wait_empty(b: PeerBench, backlog: int, limit_s: float) -> tuple[float | None, float, int]:
    """Poll remaining() until 0 or limit_s; -> (first-progress time, end time, left)."""
    t0 = time.monotonic()
    first = None
    prev_t = t0
    left = backlog
    while time.monotonic() - t0 < limit_s:
        await asyncio.sleep(POLL_S)
        left = await remaining(b)
        now = time.monotonic()
        if first is None and left < backlog:
            first = (prev_t + now) / 2  # progress began between the two polls
        prev_t = now
        if left == 0:
            break
        if b.peer.worker is not None and b.peer.worker.poll() is not None:
            raise RuntimeError(f"{b.peer.name} worker died during the drain: {b.peer.worker_log_tail()}")
    return first, time.monotonic(), left


async def drain(b: PeerBench, want: int, limit_s: float, preload_limit_s: float) -> float:
    """Start the worker on a backlog; rate = finished / (empty or limit - first progress)."""
    b.peer.stop_worker()
    backlog = await top_up(b, want, preload_limit_s)
    b.run.say(f"{b.peer.name} drain: {backlog} tasks waiting; starting the worker (at most {limit_s:g}s)")

    async def go():
        b.peer.start_worker()
        first, end, left = await wait_empty(b, backlog, limit_s)
        b.mark_cpu_end()
        b.peer.stop_worker()
        return first, end, left
    (first, end, left), d, cpu_ms, wall = await b.measure(go)
    done = backlog - left
    span = (end - first) if first is not None else 0.0
    rate = done / span if span > 0 else 0.0
    c = b.cell("drain", b.params(backlog=backlog, concurrency=b.peer.concurrency), rate=rate, unit="tasks/s",
               n=done, wall=span, d=d, cpu_ms=cpu_ms,
               notes="rate = finished / (queue empty - first progress), polled every 0.2 s")
    c.extra.update({"left_unfinished": left, "wall_s_from_worker_start": round(wall, 2),
                    "requested_backlog": want})
    if left:
        c.notes += f"; stopped after {limit_s:g}s with {left} still waiting (a steady-state window)"
    b.record(c)
    return rate


async def schedule_to_start_idle(b: PeerBench, samples: int, timeout_s: float = 10.0) -> None:
    """One probe at a time on an idle queue: handler start - send time (one clock: this machine's)."""
    b.peer.start_worker()
    await b.peer.wait_ready()
    lat, missed = [], 0
    t0 = time.monotonic()
    for i in range(samples):
        key = f"s2s{b.round}-{i}-{time.time_ns()}"
        sent = time.time()
        await b.peer.send(i, probe=key)
        deadline = time.monotonic() + timeout_s
        got = None
        while got is None and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
            got = b.peer.probes.read_new().get(key)
        if got is None:
            missed += 1
        else:
            lat.append((got - sent) * 1000)
        await asyncio.sleep(0.05)
    c = b.cell("schedule_to_start_idle", b.params(samples=samples), rate=None, unit="", n=len(lat),
               wall=time.monotonic() - t0, latency=lat,
               notes="latency = handler start - just before the enqueue call (this machine's clock)")
    c.extra["missed"] = missed
    b.record(c)


async def schedule_to_start_load(b: PeerBench, rate: float, seconds: float, probes_per_s: float = 10.0) -> None:
    """Probes sent among no-op tasks arriving at `rate`/s (Poisson) with the worker running."""
    b.peer.start_worker()
    await b.peer.wait_ready()
    sent: dict[str, float] = {}

    async def probe_loop():
        i = 0
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            key = f"s2l{b.round}-{i}-{time.time_ns()}"
            sent[key] = time.time()
            await b.peer.send(i, probe=key)
            i += 1
            await asyncio.sleep(1.0 / probes_per_s)

    async def go():
        res, _ = await asyncio.gather(loadgen.open_loop_fn(b.peer.send, rate, seconds), probe_loop())
        deadline = time.monotonic() + 30
        seen: dict[str, float] = {}
        while time.monotonic() < deadline and len(seen) < len(sent):
            seen.update(b.peer.probes.read_new())
            await asyncio.sleep(0.1)
        return res, seen
    (res, seen), d, cpu_ms, wall = await b.measure(go)
    lat = [(seen[k] - t) * 1000 for k, t in sent.items() if k in seen]
    c = b.cell("schedule_to_start_load", b.params(target_rate=round(rate)), rate=res.rate, unit="tasks/s",
               n=res.acked, wall=wall, d=d, cpu_ms=cpu_ms, latency=lat,
               notes="load = 50 % of min(drain, enqueue capacity) of this system; "
                     "latency of probes sent among the load")
    c.extra.update({"probes": len(sent), "probes_missed": len(sent) - len(lat)})
    b.record(c)


async def timer_lateness(b: PeerBench, n: int, window_s: float, lead_s: float = 5.0,
                         wait_s: float = 120.0) -> None:
    """n tasks due uniformly over [now+lead, now+lead+window]; lateness = handler start - due."""
    b.peer.start_worker()
    await b.peer.wait_ready()
    base = time.time() + lead_s
    due = {f"tm{b.round}-{i}": base + window_s * i / n for i in range(n)}
    keys = list(due)

    async def go():
        t0 = time.time()
        if b.peer.batch_with_delays:
            for start in range(0, n, 500):
                part = keys[start:start + 500]
                await b.peer.send_batch(start, len(part), delays=[due[k] - time.time() for k in part],
                                        probes=part)
        else:
            it = iter(range(n))

            async def one(_):
                i = next(it, None)
                if i is not None:
                    await b.peer.send(i, probe=keys[i], delay_s=due[keys[i]] - time.time())
            await loadgen.closed_loop_fn(one, 16, lead_s + window_s, max_tasks=n)
        enqueue_s = time.time() - t0
        seen: dict[str, float] = {}
        deadline = time.monotonic() + lead_s + window_s + wait_s
        while time.monotonic() < deadline and len(seen) < n:
            seen.update(b.peer.probes.read_new())
            await asyncio.sleep(0.2)
        return enqueue_s, seen
    (enqueue_s, seen), d, cpu_ms, wall = await b.measure(go)
    late = [(seen[k] - due[k]) * 1000 for k in keys if k in seen]
    c = b.cell("timer_lateness", b.params(tasks=n, window_s=window_s), rate=None, unit="", n=len(late),
               wall=wall, d=d, cpu_ms=cpu_ms, latency=late,
               notes="latency = handler start - due time; due times spread evenly over the window")
    c.extra.update({"missing": n - len(late), "enqueue_s": round(enqueue_s, 2), "lead_s": round(lead_s, 1),
                    "early": sum(1 for x in late if x < 0)})
    if enqueue_s > lead_s:
        c.notes += f"; enqueueing took {enqueue_s:.1f}s, longer than the {lead_s:g}s lead"
    b.record(c)


async def recovery(b: PeerBench, tasks: int, sleep_s: float, limit_s: float) -> None:
    """`tasks` handlers sleeping sleep_s each; SIGKILL the worker while they run, start a
    new one at once; recovery = kill -> every task finished (bounded by limit_s)."""
    b.peer.start_worker()
    await b.peer.wait_ready()
    keys = [f"rc{b.round}-{i}" for i in range(tasks)]
    for i, k in enumerate(keys):
        await b.peer.send(i, probe=k, sleep_s=sleep_s)
    started: dict[str, float] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not started:
        started.update(b.peer.probes.read_new())
        await asyncio.sleep(0.05)
    in_flight = len(started)
    t_kill = time.monotonic()
    b.peer.kill_worker()
    b.peer.start_worker()
    left = await remaining(b)
    while left and time.monotonic() - t_kill < limit_s:
        await asyncio.sleep(POLL_S)
        left = await remaining(b)
    took = time.monotonic() - t_kill
    c = b.cell("recovery", b.params(tasks=tasks, sleep_s=sleep_s), rate=None if left else round(took, 2),
               unit="s until all done", n=tasks - left, wall=took, notes=b.peer.recovery_note)
    c.extra.update({"recovery_s": round(took, 2) if not left else None, "left_unfinished": left,
                    "started_before_kill": in_flight, "limit_s": limit_s})
    if left:
        c.notes = (c.notes + "; " if c.notes else "") + f"{left} tasks not finished {limit_s:g}s after the kill"
    b.record(c)
    b.peer.stop_worker()
