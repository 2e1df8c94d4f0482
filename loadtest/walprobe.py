"""`python -m loadtest.walprobe`: WAL bytes per task, by relation and by record type.

Starts its own Postgres cluster (the bench's settings: synchronous_commit on,
full_page_writes on; fsync on unless --no-fsync, which changes no WAL volume),
measures the physical reference (pgbench PHYS_job, 8 clients) and then the
real platform as the bench runs it (LocalPlatform, 4 shards, the no-op app):

  enqueue_keyed   N single enqueues over gRPC, 8 producers, each with an
                  idempotency key (a caller's key; the SDK's own enqueues carry a
                  task id it mints instead since session 4, which writes no key row)
  enqueue_batch   N unkeyed tasks in calls of 100
  drain           the host agent started on the 2N tasks, until none is left

Each phase is measured twice: a `cold` round that starts every phase right
after a CHECKPOINT (what the bench's cells see: every page a phase touches
first costs a full-page image), and a `warm` round with no checkpoint at all
(the same work, FPIs only where a page is touched for the first time since
the cold round's last checkpoint). Between the phase's two LSNs pg_walinspect
reads every record; a record is charged to the relation of its first block
reference (relfilenode mapped back to table/index names in each database,
the shards folded together), records without one (commits) to their resource
manager. The report also gives commits per task (pg_stat_database, the
probe's own reads taken out), write transactions per task (xids) and COMMIT
records per task.

Prints Markdown tables (pasted into docs/benchmarks/findings.md) and writes
the raw numbers to loadtest/results/walprobe-<time>.json. Everything started
is stopped by PID at the end, on Ctrl-C and on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import datetime as dt
import json
import pathlib
import sys
import time

import asyncpg

from loadtest import dbstats, loadgen
from loadtest.pgserver import BenchPostgres
from loadtest.physical import DB as PHYS_DB
from loadtest.physical import Physical
from loadtest.platform_run import PlatformUnderTest
from loadtest.procs import Registry
from ratchet.libs.pg.queries import load_queries

HERE = pathlib.Path(__file__).parent
Q = load_queries(HERE / "sql" / "walprobe.sql")
PLATFORM_SETTLE_S = 10.5  # see dbstats: pooled connections report their last second late
CATALOGS = "(system catalogs: autovacuum, ANALYZE)"


@dataclasses.dataclass
class Phase:
    """One measured phase: its WAL records grouped, and the counters around it."""

    name: str
    round: str
    tasks: int
    wal_lsn_bytes: int
    groups: list[dict]  # rmgr, record_type, relation, records, bytes, fpi_bytes, fpi_records
    commits: int | None = None
    write_xacts: int | None = None
    wall_s: float = 0.0

    def per_task(self, value: float) -> float:
        return value / self.tasks if self.tasks else 0.0

    def total(self, key: str = "bytes", *, catalogs: bool = True) -> int:
        """Sum over the phase's records; catalogs=False leaves out autovacuum's work on the system
        catalogs (ANALYZE after the migrations' DDL lands in whichever phase it happens to run in)."""
        return sum(g[key] for g in self.groups if catalogs or g["relation"] != CATALOGS)

    def commit_records(self) -> int:
        return sum(g["records"] for g in self.groups if g["rmgr"] == "Transaction" and g["record_type"] == "COMMIT")

    def by(self, field: str) -> list[tuple[str, dict]]:
        out: dict[str, collections.Counter] = {}
        for g in self.groups:
            c = out.setdefault(g[field], collections.Counter())
            for k in ("records", "bytes", "fpi_bytes", "fpi_records"):
                c[k] += g[k]
        return sorted(out.items(), key=lambda kv: -kv[1]["bytes"])

    def to_json(self) -> dict:
        return {"name": self.name, "round": self.round, "tasks": self.tasks, "wal_lsn_bytes": self.wal_lsn_bytes,
                "record_bytes": self.total(), "fpi_bytes": self.total("fpi_bytes"), "commits": self.commits,
                "write_xacts": self.write_xacts, "commit_records": self.commit_records(),
                "wall_s": round(self.wall_s, 2), "groups": self.groups}


class Names:
    """(database oid, relfilenode) -> a printable relation name."""

    def __init__(self, pg: BenchPostgres, shard_dbs: list[str]):
        self.pg = pg
        self.shard_dbs = set(shard_dbs)
        self.db_names: dict[int, str] = {}
        self.rels: dict[int, dict[int, str]] = {}

    async def load(self, admin: asyncpg.Connection) -> None:
        """(Re)read every database's relation file nodes (tables may have been recreated)."""
        self.db_names = {int(r["oid"]): r["datname"] for r in await admin.fetch(Q["database_oids"], timeout=10)}
        self.rels = {}
        for oid, name in self.db_names.items():
            if name == "template0":
                continue
            try:
                conn = await asyncpg.connect(self.pg.dsn(name), timeout=10)
            except (OSError, asyncpg.PostgresError):
                continue
            try:
                self.rels[oid] = {int(r["relfilenode"]): r["relname"]
                                  for r in await conn.fetch(Q["relation_filenodes"], timeout=30)}
            finally:
                await conn.close(timeout=5)

    def label(self, rmgr: str, db_oid, relfilenode, fork) -> str:
        if relfilenode is None:
            return {"Transaction": "(transaction: commit records)"}.get(rmgr, f"({rmgr}, no relation)")
        db = self.db_names.get(int(db_oid), f"db {db_oid}") if db_oid else "shared"
        rel = self.rels.get(int(db_oid), {}).get(int(relfilenode), f"relfilenode {relfilenode}") if db_oid else \
            f"shared relfilenode {relfilenode}"
        if rel.startswith("pg_") or not db_oid:
            return CATALOGS
        name = rel if db in self.shard_dbs else f"{db}: {rel}"
        return name if fork in (None, "main") else f"{name} [{fork}]"


async def _grouped(admin: asyncpg.Connection, names: Names, lsn0, lsn1) -> list[dict]:
    rows = await admin.fetch(Q["wal_records_grouped"], lsn0, lsn1, timeout=300)
    folded: dict[tuple[str, str, str], collections.Counter] = {}
    for r in rows:
        key = (r["rmgr"], r["record_type"], names.label(r["rmgr"], r["db_oid"], r["relfilenode"], r["fork"]))
        c = folded.setdefault(key, collections.Counter())
        for k in ("records", "bytes", "fpi_bytes", "fpi_records"):
            c[k] += int(r[k] or 0)
    return [{"rmgr": k[0], "record_type": k[1], "relation": k[2], **dict(c)} for k, c in folded.items()]


class Probe:
    def __init__(self, args: argparse.Namespace, registry: Registry):
        self.args = args
        self.registry = registry
        self.pg = BenchPostgres(registry, keep=args.keep_pg)
        # Enough WAL kept that pg_walinspect can read a whole phase; no checkpoint we did not ask for.
        self.pg.cluster.settings.update({"fsync": "off" if args.no_fsync else "on", "wal_keep_size": "4GB",
                                         "max_wal_size": "8GB", "checkpoint_timeout": "1h"})
        self.admin: asyncpg.Connection | None = None
        self.phases: list[Phase] = []
        self.probe_reads = 0

    def say(self, text: str) -> None:
        print(f"[walprobe {time.strftime('%H:%M:%S')}] {text}", flush=True)

    async def measure(self, name: str, rnd: str, tasks_fn, names: Names, dbs: list[str], *,
                      checkpoint: bool, settle_s: float) -> Phase:
        """Run tasks_fn (returns the task count) between two LSNs and read the WAL in between."""
        if checkpoint:
            await self.admin.execute("CHECKPOINT", timeout=120)
        reads0 = self.probe_reads
        snap_a = await dbstats.snapshot(self.admin)
        lsn0 = await self.admin.fetchval(Q["wal_insert_lsn"], timeout=10)
        t0 = time.monotonic()
        tasks = await tasks_fn()
        wall = time.monotonic() - t0
        lsn1 = await self.admin.fetchval(Q["wal_insert_lsn"], timeout=10)
        snap_b = await dbstats.snapshot(self.admin)
        await self.admin.fetchval(Q["wal_flush_now"], timeout=10)
        settled = await dbstats.settle(self.admin, dbs, min_wait_s=settle_s)
        d = dbstats.delta(snap_a, snap_b, dbs, settled)
        await names.load(self.admin)
        groups = await _grouped(self.admin, names, lsn0, lsn1)
        phase = Phase(name=name, round=rnd, tasks=tasks, wal_lsn_bytes=_lsn(lsn1) - _lsn(lsn0), groups=groups,
                      commits=d.commits - (self.probe_reads - reads0), write_xacts=d.write_xacts, wall_s=wall)
        self.phases.append(phase)
        self.say(f"{rnd} {name}: {tasks} tasks in {wall:.1f}s, {phase.per_task(phase.total()):.0f} B/task "
                 f"({phase.per_task(phase.total('fpi_bytes')):.0f} of it FPI), "
                 f"{phase.per_task(phase.commits or 0):.2f} commits/task")
        return phase

    # -- the physical reference ---------------------------------------------
    async def reference(self) -> None:
        phys = Physical(self.pg, self.registry, seconds=self.args.ref_seconds)
        async with phys:
            names = Names(self.pg, [])
            for rnd in ("cold", "warm"):
                await phys._reset()
                if rnd == "warm":
                    # Touch every page the run will touch once more, so the measured run takes no FPI
                    # for them: a first pgbench run (unmeasured), without the reset's checkpoint after it.
                    await asyncio.to_thread(phys._pgbench, "phys_job.pgbench", 8)

                async def run() -> int:
                    before = await phys._count("phys_job_count_done")
                    await asyncio.to_thread(phys._pgbench, "phys_job.pgbench", 8)
                    return await phys._count("phys_job_count_done") - before
                await self.measure("PHYS_job (8 clients)", rnd, run, names, [PHYS_DB], checkpoint=False,
                                   settle_s=1.1)

    # -- the platform -----------------------------------------------------------
    async def platform(self) -> None:
        pt = PlatformUnderTest(self.pg, self.registry, shards=self.args.shards)
        await pt.start()
        await pt.deploy_noop()
        self.say("platform up, no-op app deployed: " + ", ".join(f"{k}={v}" for k, v in pt.service_pids().items()))
        gw = loadgen.Gateway(pt.endpoints["grpc"], pt.endpoints["api_key"])
        shards = {db: await asyncpg.connect(self.pg.dsn(db), timeout=10) for db in pt.shard_dbs}
        names = Names(self.pg, pt.shard_dbs)
        n = self.args.tasks
        try:
            await self._warmup(gw, shards)
            await pt.stop_hostagent()
            await self._vacuum_catalogs()
            for rnd in ("cold", "warm"):
                cold = rnd == "cold"

                async def keyed() -> int:
                    res = await loadgen.closed_loop(gw, self.args.producers, 600.0, max_tasks=n,
                                                    request=loadgen.Gateway.keyed_request)
                    _check(res, n, "keyed enqueue")
                    return res.acked

                async def batch() -> int:
                    res = await loadgen.batches(gw, 100, 2, n, keyed=False)
                    _check(res, n, "batch enqueue")
                    return res.acked

                async def drain() -> int:
                    done0 = await self._count(shards, "succeeded_count")
                    await pt.start_hostagent()
                    deadline = time.monotonic() + 600
                    while await self._count(shards, "unfinished_count"):
                        if time.monotonic() > deadline:
                            raise RuntimeError("the drain did not finish in 600 s")
                        await asyncio.sleep(0.25)
                    return await self._count(shards, "succeeded_count") - done0

                await self.measure("enqueue_keyed", rnd, keyed, names, pt.shard_dbs, checkpoint=cold,
                                   settle_s=PLATFORM_SETTLE_S)
                await self.measure("enqueue_batch", rnd, batch, names, pt.shard_dbs, checkpoint=cold,
                                   settle_s=PLATFORM_SETTLE_S)
                await self.measure("drain", rnd, drain, names, pt.shard_dbs, checkpoint=cold,
                                   settle_s=PLATFORM_SETTLE_S)
                await pt.stop_hostagent()
        finally:
            for conn in shards.values():
                await conn.close(timeout=5)
            await gw.close()
            await asyncio.to_thread(pt.stop)

    async def _warmup(self, gw: loadgen.Gateway, shards: dict) -> None:
        """One task end to end (sandbox started, deployment cached) before anything is measured."""
        await gw.enqueue(gw.request(0))
        deadline = time.monotonic() + 120
        while await self._count(shards, "unfinished_count"):
            if time.monotonic() > deadline:
                raise RuntimeError("the warm-up task did not finish in 120 s")
            await asyncio.sleep(0.2)

    async def _vacuum_catalogs(self) -> None:
        """VACUUM ANALYZE every database once, so autovacuum's ANALYZE of the catalogs the migrations
        changed runs now and not in the middle of a measured phase."""
        for (name,) in [tuple(r) for r in await self.admin.fetch(Q["database_names"], timeout=10)]:
            conn = await asyncpg.connect(self.pg.dsn(name), timeout=10)
            try:
                await conn.execute("VACUUM ANALYZE", timeout=300)
            finally:
                await conn.close(timeout=5)

    async def _count(self, shards: dict, query: str) -> int:
        self.probe_reads += len(shards)
        counts = await asyncio.gather(*(c.fetchval(Q[query], timeout=30) for c in shards.values()))
        return sum(int(n) for n in counts)

    async def run(self) -> None:
        self.pg.start()
        self.say(self.pg.describe().splitlines()[0])
        self.admin = await asyncpg.connect(self.pg.dsn("postgres"), timeout=10)
        try:
            await self.admin.execute(Q["walinspect_create"], timeout=30)
            if not self.args.no_reference:
                await self.reference()
            await self.platform()
        finally:
            await self.admin.close(timeout=5)


def _lsn(value) -> int:
    if isinstance(value, int):  # asyncpg decodes pg_lsn as an integer
        return value
    hi, lo = str(value).split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def _check(res: loadgen.LoadResult, n: int, what: str) -> None:
    if res.errors or res.acked != n:
        raise RuntimeError(f"{what}: {res.acked}/{n} acknowledged, errors {dict(res.errors)}")


# -- the report --------------------------------------------------------------
def _b(x: float) -> str:
    return f"{x:,.0f}"


def phase_table(p: Phase, *, top: int = 14) -> list[str]:
    """Bytes per task by relation for one phase."""
    lines = [f"**{p.round} · {p.name}** ({p.tasks} tasks): {_b(p.per_task(p.total()))} B/task "
             f"({_b(p.per_task(p.total('fpi_bytes')))} of it FPI; LSN distance {_b(p.per_task(p.wal_lsn_bytes))}), "
             f"{p.per_task(p.commits or 0):.2f} commits/task, {p.per_task(p.write_xacts or 0):.2f} write xacts/task, "
             f"{p.per_task(p.commit_records()):.2f} COMMIT records/task", "",
             "| relation | B/task | of it FPI | without FPI | records/task |", "|---|---|---|---|---|"]
    rows = p.by("relation")
    for rel, c in rows[:top]:
        lines.append(f"| {rel} | {_b(p.per_task(c['bytes']))} | {_b(p.per_task(c['fpi_bytes']))} | "
                     f"{_b(p.per_task(c['bytes'] - c['fpi_bytes']))} | {p.per_task(c['records']):.2f} |")
    if len(rows) > top:
        rest = collections.Counter()
        for _, c in rows[top:]:
            rest.update(c)
        lines.append(f"| (other {len(rows) - top}) | {_b(p.per_task(rest['bytes']))} | "
                     f"{_b(p.per_task(rest['fpi_bytes']))} | {_b(p.per_task(rest['bytes'] - rest['fpi_bytes']))} | "
                     f"{p.per_task(rest['records']):.2f} |")
    return lines


def record_table(p: Phase, *, top: int = 16) -> list[str]:
    """Bytes per task by (relation, resource manager / record type) for one phase."""
    lines = [f"**{p.round} · {p.name}** by record type", "",
             "| relation | rmgr/record | records/task | B/task | of it FPI |", "|---|---|---|---|---|"]
    rows = sorted(p.groups, key=lambda g: -g["bytes"])
    for g in rows[:top]:
        lines.append(f"| {g['relation']} | {g['rmgr']}/{g['record_type']} | {p.per_task(g['records']):.2f} | "
                     f"{_b(p.per_task(g['bytes']))} | {_b(p.per_task(g['fpi_bytes']))} |")
    return lines


def summary_table(phases: list[Phase]) -> list[str]:
    """The headline: a keyed task's whole life against the reference, cold and warm."""
    get = {(p.round, p.name): p for p in phases}
    lines = ["| round | reference B/job | enqueue keyed | enqueue batch (unkeyed) | drain | keyed task's life "
             "(enqueue + drain) | ratio to reference | without FPI: life / reference |",
             "|---|---|---|---|---|---|---|---|"]
    for rnd in ("cold", "warm"):
        ref = get.get((rnd, "PHYS_job (8 clients)"))
        k, b, d = get.get((rnd, "enqueue_keyed")), get.get((rnd, "enqueue_batch")), get.get((rnd, "drain"))
        if not (k and d):
            continue
        def t(p: Phase, key: str = "bytes") -> float:
            return p.per_task(p.total(key, catalogs=False))
        life = t(k) + t(d)
        life_nf = life - t(k, "fpi_bytes") - t(d, "fpi_bytes")
        ref_b = t(ref) if ref else None
        ref_nf = t(ref) - t(ref, "fpi_bytes") if ref else None
        cells = [rnd, _b(ref_b) if ref_b else "–", _b(t(k)), _b(t(b)) if b else "–", _b(t(d)), _b(life),
                 f"{life / ref_b:.2f} ×" if ref_b else "–",
                 f"{_b(life_nf)} / {_b(ref_nf)} = {life_nf / ref_nf:.2f} ×" if ref_nf else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(phases: list[Phase]) -> str:
    out = ["## WAL per task (loadtest.walprobe)", "",
           "B/task over every record of the phase but autovacuum's work on the system catalogs "
           "(its own line in the tables below).", ""] + summary_table(phases) + [""]
    for p in phases:
        out += phase_table(p) + [""]
    for p in phases:
        if p.round == "cold":
            out += record_table(p) + [""]
    return "\n".join(out)


def load(path: str | pathlib.Path) -> list[Phase]:
    """The phases of a run from its JSON file."""
    raw = json.loads(pathlib.Path(path).read_text())
    out = []
    for p in raw["phases"]:
        for g in p["groups"]:  # runs from before the catalogs were folded into one line
            if g["relation"].split(": ")[-1].startswith("pg_") or g["relation"].startswith("shared relfilenode"):
                g["relation"] = CATALOGS
        out.append(Phase(name=p["name"], round=p["round"], tasks=p["tasks"], wal_lsn_bytes=p["wal_lsn_bytes"],
                         groups=p["groups"], commits=p.get("commits"), write_xacts=p.get("write_xacts"),
                         wall_s=p.get("wall_s", 0.0)))
    return out


def compare(before: list[Phase], after: list[Phase], *, rnd: str = "cold") -> str:
    """Before/after bytes per task by relation, one table per phase of round `rnd`."""
    b_by, a_by = {(p.round, p.name): p for p in before}, {(p.round, p.name): p for p in after}
    out = ["| round | before | after |", "|---|---|---|"]
    for r in ("cold", "warm"):
        pb, pa = [b_by.get((r, n)) for n in ("enqueue_keyed", "drain")], [a_by.get((r, n)) for n in
                                                                          ("enqueue_keyed", "drain")]
        if all(pb) and all(pa):
            life = [sum(p.per_task(p.total(catalogs=False)) for p in ps) for ps in (pb, pa)]
            nofpi = [sum(p.per_task(p.total(catalogs=False) - p.total("fpi_bytes", catalogs=False)) for p in ps)
                     for ps in (pb, pa)]
            out.append(f"| {r}: keyed task's life (enqueue + drain) | {_b(life[0])} ({_b(nofpi[0])} without FPI) | "
                       f"{_b(life[1])} ({_b(nofpi[1])} without FPI) |")
    out.append("")
    for name in ("enqueue_keyed", "enqueue_batch", "drain"):
        pb, pa = b_by.get((rnd, name)), a_by.get((rnd, name))
        if not (pb and pa):
            continue
        rows_b, rows_a = dict(pb.by("relation")), dict(pa.by("relation"))
        rels = sorted(set(rows_b) | set(rows_a),
                      key=lambda r: -max(rows_b.get(r, {}).get("bytes", 0) / pb.tasks,
                                         rows_a.get(r, {}).get("bytes", 0) / pa.tasks))
        def t(p: Phase, key: str = "bytes") -> float:
            return p.per_task(p.total(key, catalogs=False))
        out += [f"**{rnd} · {name}**: {_b(t(pb))} → {_b(t(pa))} B/task (without FPI "
                f"{_b(t(pb) - t(pb, 'fpi_bytes'))} → {_b(t(pa) - t(pa, 'fpi_bytes'))}; catalogs left out)", "",
                "| relation | before B/task | after B/task | before w/o FPI | after w/o FPI |", "|---|---|---|---|---|"]
        for rel in rels:
            cb, ca = rows_b.get(rel, {}), rows_a.get(rel, {})
            cells = [pb.per_task(cb.get("bytes", 0)), pa.per_task(ca.get("bytes", 0)),
                     pb.per_task(cb.get("bytes", 0) - cb.get("fpi_bytes", 0)),
                     pa.per_task(ca.get("bytes", 0) - ca.get("fpi_bytes", 0))]
            if max(cells) < 1:
                continue
            out.append(f"| {rel} | " + " | ".join(_b(c) if c else "–" for c in cells) + " |")
        out.append("")
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.walprobe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=2000, help="N: keyed single enqueues, and unkeyed batch tasks")
    p.add_argument("--producers", type=int, default=8, help="concurrent single-enqueue producers (default 8)")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--ref-seconds", type=float, default=4.0, help="seconds of each PHYS_job pgbench run")
    p.add_argument("--no-reference", action="store_true", help="skip PHYS_job")
    p.add_argument("--no-fsync", action="store_true", help="fsync=off (same WAL volume, less I/O)")
    p.add_argument("--keep-pg", action="store_true", help="keep the Postgres data folder")
    p.add_argument("--out", default=None, help="JSON file for the raw numbers (default loadtest/results/...)")
    p.add_argument("--render", metavar="JSON", help="print the tables of an earlier run and exit")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="before/after tables of two runs")
    p.add_argument("--round", default="cold", choices=("cold", "warm"), help="the round --compare details")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        print(render(load(args.render)))
        return 0
    if args.compare:
        print(compare(load(args.compare[0]), load(args.compare[1]), rnd=args.round))
        return 0
    with Registry() as registry:
        probe = Probe(args, registry)
        try:
            asyncio.run(probe.run())
        finally:
            if probe.phases:
                text = render(probe.phases)
                print(text)
                out = pathlib.Path(args.out) if args.out else (
                    HERE / "results" / f"walprobe-{dt.datetime.now().strftime('%Y%m%dT%H%M%S')}.json")
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps({"args": vars(args), "phases": [p.to_json() for p in probe.phases]},
                                          indent=1, default=str))
                (out.with_suffix(".md")).write_text(text + "\n")
                print(f"[walprobe] raw numbers in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
