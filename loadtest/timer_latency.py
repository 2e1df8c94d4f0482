"""Idle schedule-to-start and timer lateness, one tree against another, interleaved.

`python -m loadtest.timer_latency --one OUT.json`: start the local platform of whatever tree this
interpreter imports (4 shards, its own Postgres in a temporary folder), deploy
loadtest/apps/timers, and measure on the otherwise idle platform, all on the shard clock:

* schedule_to_start: one task at a time, created_at -> started_at (the lease);
* delay_lateness: tasks enqueued with delay=1s, a few in flight (one every 0.1-0.3 s):
  started_at - run_at (the due time);
* retry_lateness: tasks whose first attempt fails, retry base 1 s without jitter: the second
  attempt's started_at - run_at (the retry's due time).

`python -m loadtest.timer_latency --pairs N --tree NAME=PYTHON:DIR ...`: N rounds, each running
--one once per tree, in alternating order (A B, B A, ...), each in its own tree (cwd DIR, its
interpreter); prints per run and the means with their spread, and writes every run to
--results (JSON lines).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

APP_DIR = pathlib.Path(__file__).parent / "apps" / "timers"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELED", "EXPIRED")


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _ms(a, b) -> float:
    return (b.ToNanoseconds() - a.ToNanoseconds()) / 1e6


async def _measure(samples: int, seed: int) -> dict:
    from google.protobuf import duration_pb2

    from loadtest.loadgen import Gateway
    from ratchet.api.tasks.v1 import tasks_pb2
    from ratchet.cli import bundle
    from ratchet.cli.commands import handler_messages
    from ratchet.cli.platform import LocalPlatform
    from ratchet.client import Client
    from ratchet.libs.shardmap import new_task_id

    rng = random.Random(seed)
    state = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-timers-"))
    platform = LocalPlatform(state, shards=4, ready_timeout=90.0, log_level="WARNING")
    await asyncio.to_thread(platform.start)
    try:
        ep = platform.endpoints

        def deploy() -> None:
            data = bundle.package(APP_DIR)
            desc = bundle.describe(data)
            with Client(ep["grpc"], ep["api_key"], timeout=60.0) as c:
                c.create_deployment(ep.get("app") or "default", data, bundle.digest(data),
                                    desc.get("module") or "app", handler_messages(desc))
        await asyncio.to_thread(deploy)
        gw = Gateway(ep["grpc"], ep["api_key"])
        state_name = tasks_pb2.TaskState.Name

        def req(task_type: str, **kw) -> tasks_pb2.EnqueueTaskRequest:
            return tasks_pb2.EnqueueTaskRequest(task_type=task_type, task_id=new_task_id(), payload_json="{}", **kw)

        async def finished(task_id: str, timeout: float = 20.0):
            deadline = time.monotonic() + timeout
            while True:
                t = await gw.get(task_id)
                if state_name(t.state).removeprefix("TASK_STATE_") in TERMINAL or time.monotonic() > deadline:
                    return t
                await asyncio.sleep(0.02)

        # Warm up: a sandbox started and the deployment cached; then let the platform go idle.
        for _ in range(3):
            await finished(await gw.enqueue(req("noop")), 90.0)
            await finished(await gw.enqueue(req("flaky", retry=tasks_pb2.RetryPolicy(
                max_attempts=2, base=duration_pb2.Duration(nanos=100_000_000), jitter=False))), 90.0)
        await asyncio.sleep(3.0)

        s2s = []
        for _ in range(samples):
            t = await finished(await gw.enqueue(req("noop")))
            if t.state == tasks_pb2.TASK_STATE_SUCCEEDED:
                s2s.append(_ms(t.created_at, t.started_at))
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.0)

        async def spaced(make) -> list[str]:
            ids = []
            for _ in range(samples):
                ids.append(await gw.enqueue(make()))
                await asyncio.sleep(rng.uniform(0.1, 0.3))
            return ids

        delayed = await spaced(lambda: req("noop", delay=duration_pb2.Duration(seconds=1)))
        delay_late = []
        for task_id in delayed:
            t = await finished(task_id)
            if t.state == tasks_pb2.TASK_STATE_SUCCEEDED:
                delay_late.append(_ms(t.run_at, t.started_at))
        await asyncio.sleep(2.0)

        retry = tasks_pb2.RetryPolicy(max_attempts=2, base=duration_pb2.Duration(seconds=1), jitter=False)
        retried = await spaced(lambda: req("flaky", retry=retry))
        retry_late = []
        for task_id in retried:
            t = await finished(task_id)
            if t.state == tasks_pb2.TASK_STATE_SUCCEEDED and len(t.attempts) == 2:
                retry_late.append(_ms(t.run_at, t.attempts[1].started_at))
        await gw.close()
    finally:
        await asyncio.to_thread(platform.stop)
        shutil.rmtree(state, ignore_errors=True)
    out = {"samples": samples}
    for name, xs in (("schedule_to_start", s2s), ("delay_lateness", delay_late), ("retry_lateness", retry_late)):
        out[name] = {"n": len(xs), "p50_ms": _pct(xs, 0.5), "p99_ms": _pct(xs, 0.99), "max_ms": max(xs, default=None),
                     "samples_ms": [round(x, 3) for x in xs]}
    return out


def _one(args) -> int:
    result = asyncio.run(_measure(args.samples, args.seed))
    pathlib.Path(args.one).write_text(json.dumps(result))
    print(json.dumps(result))
    return 0


def _pairs(args) -> int:
    trees = []
    for spec in args.tree:
        name, _, rest = spec.partition("=")
        python, _, folder = rest.partition(":")
        trees.append((name, python, folder))
    runs: list[dict] = []
    results = pathlib.Path(args.results)
    for rnd in range(args.pairs):
        order = trees if rnd % 2 == 0 else list(reversed(trees))
        for name, python, folder in order:
            out = pathlib.Path(tempfile.mktemp(suffix=".json"))
            cmd = [python, "-m", "loadtest.timer_latency", "--one", str(out), "--samples", str(args.samples),
                   "--seed", str(args.seed + rnd)]
            t0 = time.monotonic()
            subprocess.run(cmd, cwd=folder, check=True, stdout=subprocess.DEVNULL, timeout=900)
            run = {"tree": name, "round": rnd, "seconds": round(time.monotonic() - t0, 1),
                   **json.loads(out.read_text())}
            runs.append(run)
            with results.open("a") as f:
                f.write(json.dumps(run) + "\n")
            print(f"round {rnd} {name:8s} " + "  ".join(
                f"{k} p50 {run[k]['p50_ms']:.1f} p99 {run[k]['p99_ms']:.1f}"
                for k in ("schedule_to_start", "delay_lateness", "retry_lateness")), flush=True)
    print()
    for name, _, _ in trees:
        mine = [r for r in runs if r["tree"] == name]
        for k in ("schedule_to_start", "delay_lateness", "retry_lateness"):
            for q in ("p50_ms", "p99_ms"):
                xs = [r[k][q] for r in mine if r[k][q] is not None]
                print(f"{name:8s} {k:18s} {q}: mean {statistics.mean(xs):7.1f}  min {min(xs):7.1f}  "
                      f"max {max(xs):7.1f}  (runs {len(xs)})")
            pooled = [x for r in mine for x in r[k]["samples_ms"]]
            print(f"{name:8s} {k:18s} pooled: p50 {_pct(pooled, 0.5):7.1f}  p90 {_pct(pooled, 0.9):7.1f}  "
                  f"p99 {_pct(pooled, 0.99):7.1f}  (samples {len(pooled)})")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--one", metavar="OUT", help="measure this tree once, write JSON to OUT")
    p.add_argument("--pairs", type=int, help="interleaved rounds over the --tree trees")
    p.add_argument("--tree", action="append", default=[], help="NAME=PYTHON:DIR (repeat)")
    p.add_argument("--samples", type=int, default=60, help="tasks per measurement (default 60)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--results", default="timer_latency.jsonl")
    args = p.parse_args(argv)
    if args.one:
        return _one(args)
    if args.pairs and len(args.tree) >= 2:
        return _pairs(args)
    p.error("give --one OUT, or --pairs N with two --tree NAME=PYTHON:DIR")
    return 2


if __name__ == "__main__":
    sys.exit(main())
