"""`python -m loadtest.stepfloor`: what a workflow step's SQL costs on this machine, in the
shape history runs it and as one statement per op.

A step is two ops (docs/design/workflows-protocol.md): BEGIN claims the position (a RUNNING
row), COMMIT sets it COMPLETED, each under the run's lease fence. history runs each op as a
transaction of several statements (services/history/store/workflows.sql: the fence FOR SHARE,
the row lock, the dense-position EXISTS, the INSERT; the fence and the compare-and-set), so a
step is about ten round trips to Postgres. This harness runs the same statements on tables of
the same shape in its own cluster (durable settings), from asyncpg over the Unix socket as
history connects, against the same two ops written as one statement each (a CTE: fence, check
and write together, autocommit). Only the first claim of a new step is exercised (the path of
a run's first activation), so the one-statement shape is a floor, not a drop-in. It prints
steps/s, CPU per step in this process (the client's asyncpg side) and in Postgres, and the
wall time of one step at one client.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import asyncpg

from loadtest import cpu
from loadtest.pgserver import BenchPostgres
from loadtest.procs import Registry

DB = "stepfloor"
SCHEMA = """
CREATE TABLE tasks (task_id uuid PRIMARY KEY, tenant_id text NOT NULL, state text NOT NULL,
                    lease_epoch bigint NOT NULL);
CREATE TABLE workflow_steps (workflow_id uuid NOT NULL, position integer NOT NULL, name text NOT NULL,
    kind text NOT NULL, state text NOT NULL, lease_epoch bigint NOT NULL, attempt integer NOT NULL,
    result bytea, started_at timestamptz NOT NULL, finished_at timestamptz,
    PRIMARY KEY (workflow_id, position));
"""
FENCE = ("SELECT tenant_id FROM tasks WHERE task_id = $1::uuid AND state = 'LEASED' AND lease_epoch = $2::bigint "
         "FOR SHARE")
LOCK = "SELECT state, attempt FROM workflow_steps WHERE workflow_id = $1::uuid AND position = $2::int FOR UPDATE"
EXISTS = "SELECT EXISTS (SELECT 1 FROM workflow_steps WHERE workflow_id = $1::uuid AND position = $2::int)"
INSERT = ("INSERT INTO workflow_steps (workflow_id, position, name, kind, state, lease_epoch, attempt, started_at) "
          "VALUES ($1::uuid, $2::int, $3::text, 'STEP', 'RUNNING', $4::bigint, 1, clock_timestamp()) "
          "ON CONFLICT (workflow_id, position) DO NOTHING RETURNING attempt")
COMMIT = ("UPDATE workflow_steps SET state = 'COMPLETED', result = $4::bytea, finished_at = clock_timestamp() "
          "WHERE workflow_id = $1::uuid AND position = $2::int AND state = 'RUNNING' AND lease_epoch = $3::bigint "
          "RETURNING attempt")
ONE_BEGIN = ("WITH fence AS (" + FENCE + "), ins AS (INSERT INTO workflow_steps (workflow_id, position, name, kind, "
             "state, lease_epoch, attempt, started_at) SELECT $1::uuid, $3::int, $4::text, 'STEP', 'RUNNING', "
             "$2::bigint, 1, clock_timestamp() FROM fence WHERE $3::int = 0 OR EXISTS (SELECT 1 FROM workflow_steps "
             "WHERE workflow_id = $1::uuid AND position = $3::int - 1) ON CONFLICT (workflow_id, position) DO NOTHING "
             "RETURNING attempt) SELECT (SELECT count(*) FROM fence) AS fenced, (SELECT attempt FROM ins) AS attempt")
ONE_COMMIT = ("WITH fence AS (" + FENCE + ") UPDATE workflow_steps SET state = 'COMPLETED', result = $4::bytea, "
              "finished_at = clock_timestamp() WHERE workflow_id = $1::uuid AND position = $3::int AND state = "
              "'RUNNING' AND lease_epoch = $2::bigint AND EXISTS (SELECT 1 FROM fence) RETURNING attempt")


async def step_as_history(conn: asyncpg.Connection, run: str, pos: int) -> None:
    """One step in history's shape: two transactions, six and four statements."""
    async with conn.transaction():
        await conn.fetchval(FENCE, run, 1)
        await conn.fetchrow(LOCK, run, pos)
        if pos:
            await conn.fetchval(EXISTS, run, pos - 1)
        await conn.fetchval(INSERT, run, pos, f"s{pos}", 1)
    async with conn.transaction():
        await conn.fetchval(FENCE, run, 1)
        await conn.fetchval(COMMIT, run, pos, 1, b"null")


async def step_one_statement(conn: asyncpg.Connection, run: str, pos: int) -> None:
    """The same step as one statement per op (autocommit)."""
    await conn.fetchrow(ONE_BEGIN, run, 1, pos, f"s{pos}")
    await conn.fetchval(ONE_COMMIT, run, 1, pos, b"null")


async def measure(pg: BenchPostgres, shape, clients: int, seconds: float) -> dict:
    """`clients` connections, each stepping through runs of its own until the time is up."""
    conns = [await asyncpg.connect(pg.dsn(DB), timeout=10) for _ in range(clients)]  # (the Unix socket)
    steps = [0]
    roots = {"postgres": pg.cluster.postmaster_pid()}

    async def client(conn: asyncpg.Connection) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            run = str(uuid.uuid4())
            await conn.execute("INSERT INTO tasks VALUES ($1::uuid, 't', 'LEASED', 1)", run)
            for pos in range(10):
                await shape(conn, run, pos)
                steps[0] += 1
    try:
        a, t0, c0 = cpu.take(roots), time.monotonic(), time.process_time()
        await asyncio.gather(*(client(c) for c in conns))
        wall, client_s = time.monotonic() - t0, time.process_time() - c0
        ms = cpu.diff_ms(a, cpu.take(roots))
    finally:
        for c in conns:
            await c.close(timeout=5)
    n = max(1, steps[0])
    return {"steps": n, "steps_per_s": round(n / wall), "client_ms_per_step": round(client_s * 1000 / n, 3),
            "postgres_ms_per_step": round(ms["postgres"] / n, 3),
            "wall_ms_per_step": round(wall * 1000 / n * clients, 3)}


async def run(seconds: float, clients: list[int]) -> list[tuple[str, int, dict]]:
    with Registry() as registry:
        pg = BenchPostgres(registry)
        pg.start()
        pg.create_database(DB)
        conn = await asyncpg.connect(pg.dsn(DB), timeout=10)
        await conn.execute(SCHEMA)
        await conn.close()
        out = []
        for c in clients:
            for name, shape in (("as history (10 statements)", step_as_history),
                                ("one statement per op (2)", step_one_statement)):
                out.append((name, c, await measure(pg, shape, c, seconds)))
        return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--clients", default="1,16", help="concurrent connections, comma-separated")
    args = p.parse_args()
    rows = asyncio.run(asyncio.wait_for(run(args.seconds, [int(c) for c in args.clients.split(",")]), 600))
    print("| shape | clients | steps/s | client CPU ms/step | Postgres CPU ms/step | wall ms/step per client |")
    print("|---|---|---|---|---|---|")
    for name, c, r in rows:
        print(f"| {name} | {c} | {r['steps_per_s']:,} | {r['client_ms_per_step']} | {r['postgres_ms_per_step']} | "
              f"{r['wall_ms_per_step']} |")


if __name__ == "__main__":
    main()
