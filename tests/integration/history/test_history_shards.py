"""One shard down never breaks the others; a shard that comes up late
starts serving; bad shard ids; the guards the fault tests remove (their
mutant histories, tests/fault/mutants, against real shards); the process
entry point."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.libs.pg.cluster import free_port
from ratchet.services.history.store import QUERIES
from tests.fault.mutants.mutations import MUTATIONS, installed, mutated_statements

from .helpers import check_transition_logs, eventually, unique


async def test_an_unreachable_shard_is_unavailable_by_name_and_the_others_serve(make_hist):
    dead = f"postgresql://ratchet@127.0.0.1:{free_port()}/nowhere"
    hist = await make_hist(extra_shards={"7": dead})
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.create(hist.task("t"), shard=7)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "shard 7" in e.value.details()
    task_id = await hist.create_one("t", shard=1)
    assert await hist.state(task_id, "t") == "ENQUEUED"
    health = health_pb2_grpc.HealthStub(hist.channel)
    status = await health.Check(health_pb2.HealthCheckRequest(service="ratchet.internal.history.v1.HistoryService"),
                                timeout=5)
    assert status.status == health_pb2.HealthCheckResponse.SERVING


async def test_an_unknown_shard_id_is_invalid_argument(hist):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.stub.LeaseTasks(h.LeaseTasksRequest(shard_id=99, worker_id="w", max_tasks=1), timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "known shards: [1, 2]" in e.value.details()


async def test_a_shard_that_appears_later_is_migrated_and_served(make_hist, pg_cluster):
    name = f"hist_late_{free_port()}"
    hist = await make_hist(extra_shards={"5": pg_cluster.dsn(name)})
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.create(hist.task("t"), shard=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    pg_cluster.create_database(name)

    async def served() -> bool:
        try:
            await hist.create(hist.task("t"), shard=5)
            return True
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.UNAVAILABLE
            return False
    await eventually(served, 10, every=0.2)


async def test_killed_database_connections_fail_cleanly_and_recover(hist):
    tenant = unique("t")
    await hist.create_one(tenant)
    conn = await asyncpg.connect(hist.dsns[1], timeout=10)
    try:
        await conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    finally:
        await conn.close()
    outcomes = []
    for _ in range(6):
        try:
            await hist.create_one(tenant)
            outcomes.append("ok")
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE and "shard 1" in e.details(), e.details()
            outcomes.append("unavailable")
    assert outcomes[-1] == "ok"


async def test_every_mutant_statement_is_valid_sql_on_a_shard(hist):
    """The mutants' statements (the shipped ones minus a guard) prepare on a real shard, so a
    mutation run fails for its missing guard, never for a broken statement."""
    conn = await asyncpg.connect(hist.dsns[1], timeout=10)
    try:
        for m in MUTATIONS.values():
            for (query, _), sql in mutated_statements(m).items():
                assert sql != QUERIES[query]
                await conn.prepare(sql)
    finally:
        await conn.close()


def _history(mutation: str | None):
    """A block in which history is shipped (None) or that mutant (tests/fault/mutants)."""
    return installed(mutation) if mutation else contextlib.nullcontext()


@pytest.mark.parametrize("mutant", [False, True])
async def test_the_epoch_guard_and_its_mutant(make_hist, mutant):
    """A completion carrying a stale lease epoch is refused; the mutant without the epoch check
    lets it land."""
    with _history("epoch_check_on_complete" if mutant else None):
        hist = await make_hist()
        task_id = await hist.create_one("t", "app")
        leased = await hist.lease_one("app")
        r = await hist.complete_one(leased, "SUCCEEDED", epoch=leased.lease_epoch + 5)
        assert r.accepted is mutant
        assert r.state == (tasks_pb2.TASK_STATE_SUCCEEDED if mutant else tasks_pb2.TASK_STATE_LEASED)
        assert await hist.state(task_id, "t") == ("SUCCEEDED" if mutant else "LEASED")


@pytest.mark.parametrize("mutant", [False, True])
async def test_the_charge_guard_and_its_mutant(make_hist, mutant):
    """An attempt whose lease expired counts: with one attempt allowed the task fails. The mutant
    that does not charge unreported attempts retries it instead."""
    with _history("charge_attempt_at_lease" if mutant else None):
        hist = await make_hist()
        task_id = await hist.create_one("t", "app", max_attempts=1, base_s=0.01)
        await hist.lease_one("app", lease_s=0.1)
        await hist.fire_until_state(task_id, "t", "ENQUEUED" if mutant else "FAILED")


async def _race_two_firers(hist, query: str) -> list[int]:
    """Two firings whose claims both finish before either applies (a gate on the claim)."""
    arrived, both = [], asyncio.Event()

    async def gate(_name: str) -> None:
        arrived.append(1)
        if len(arrived) >= 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)

    hist.server.store.after[query] = gate
    try:
        fired = await asyncio.gather(hist.fire(), hist.fire())
    finally:
        hist.server.store.after.pop(query)
    return [f.fired for f in fired]


@pytest.mark.parametrize("skip_locked", [True, False])
async def test_timer_exclusivity_guard_and_its_mutant(make_hist, skip_locked):
    """Two firers racing for one due lease check: one fires it. The mutant without the firing's
    locks and compare-and-set (tests/fault/mutants) fires it twice. (No timer loop: the two
    firings of the race are the test's own.)"""
    with _history(None if skip_locked else "timer_skip_locked"):
        hist = await make_hist(check_logs=skip_locked, timer_loop=False)
        task_id = await hist.create_one("t", "app", base_s=30)
        await hist.lease_one("app", lease_s=0.05)
        await asyncio.sleep(0.2)  # the lease has expired; its timer is due
        fired = await _race_two_firers(hist, "timer_claim_due")
    log = [s for _, _, s, _ in await hist.log(task_id)]
    if skip_locked:
        assert sorted(fired) == [0, 1] and log == ["ENQUEUED", "LEASED", "RETRY_WAIT"]
        await check_transition_logs(hist.dsns[1])
    else:
        # The lease ended twice: each end logs the lease it read (migration 0008), so the fork
        # shows as a second lease at the version the first end already took (two rows at v3).
        assert fired == [1, 1] and sorted(log) == ["ENQUEUED", "LEASED", "LEASED", "RETRY_WAIT", "RETRY_WAIT"]
        with pytest.raises(AssertionError, match=r"version gap|chain"):
            await check_transition_logs(hist.dsns[1])


def _healthy(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
            return r.status == health_pb2.HealthCheckResponse.SERVING
        except grpc.RpcError:
            return False


async def test_the_process_serves_and_stops_on_sigterm(fresh_db, tmp_path):
    port = free_port()
    cfg = tmp_path / "history.json"
    cfg.write_text(json.dumps({"shards": {"0": fresh_db("hist_proc")}, "grpc_port": port}))
    proc = subprocess.Popen([sys.executable, "-m", "ratchet.services.history", "--config", str(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not await asyncio.to_thread(_healthy, port):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "history did not report SERVING"
            await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_bad_config_exits_2_naming_the_field(tmp_path):
    cfg = tmp_path / "bad.json"
    cfg.write_text(json.dumps({"shards": {}}))
    r = subprocess.run([sys.executable, "-m", "ratchet.services.history", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "shards" in r.stderr


async def test_the_mutant_process_is_history_with_its_guard_removed(fresh_db, tmp_path):
    """What the fault harness starts for a mutation run: history's own main, serving, with the
    mutation named in its log; without a mutation it refuses to start."""
    repo = pathlib.Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)}
    env.pop("RATCHET_FAULT_MUTATION", None)
    cmd = [sys.executable, "-m", "tests.fault.mutants.history"]
    r = await asyncio.to_thread(subprocess.run, [*cmd, "--config", "x.json"], capture_output=True, text=True,
                                timeout=30, env=env, cwd=tmp_path)
    assert r.returncode == 2 and "--mutation (or RATCHET_FAULT_MUTATION) is required" in r.stderr
    port = free_port()
    cfg = tmp_path / "history.json"
    cfg.write_text(json.dumps({"shards": {"0": fresh_db("hist_mutant")}, "grpc_port": port}))
    log = tmp_path / "history.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*cmd, "--config", str(cfg)], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                                env={**env, "RATCHET_FAULT_MUTATION": "timer_skip_locked"})
    try:
        deadline = time.monotonic() + 30
        while not await asyncio.to_thread(_healthy, port):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the mutant history did not report SERVING"
            await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "history MUTANT timer_skip_locked: The timer loop claims" in log.read_text()


async def test_a_crash_at_the_completion_gate_commits_nothing(fresh_db, tmp_path):
    """The gate lines sit where the fault tests need them: a completion held
    at history.complete.before_commit and crashed there left no trace."""
    from ratchet.libs.gates.control import Gates

    from .helpers import Hist
    dsn = fresh_db("hist_gate")
    gates = Gates(tmp_path / "gates")
    port = free_port()
    cfg = tmp_path / "history.json"
    cfg.write_text(json.dumps({"shards": {"1": dsn}, "grpc_port": port}))

    async def start() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "ratchet.services.history", "--config", str(cfg)],
                                env={**os.environ, **gates.env}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not await asyncio.to_thread(_healthy, port):
            assert proc.poll() is None and time.monotonic() < deadline, "history did not start"
            await asyncio.sleep(0.1)
        return proc

    proc = await start()
    client = Hist(f"127.0.0.1:{port}", {1: dsn})
    try:
        task_id = await client.create_one("t", "app")
        leased = await client.lease_one("app")
        before = await client.snapshot(task_id)
        gate = gates.arm("history.complete.before_commit")
        call = asyncio.create_task(client.complete_one(leased, "SUCCEEDED", result_json=b"1"))
        await gate.wait_reached_async(timeout=10)
        gate.release(action="crash")
        with pytest.raises(grpc.aio.AioRpcError):
            await call
        assert await asyncio.to_thread(proc.wait, 10) == 137
        gate.disarm()
        assert await client.snapshot(task_id) == before  # the held transaction died uncommitted
        proc = await start()
        assert (await client.complete_one(leased, "SUCCEEDED", result_json=b"1")).accepted
    finally:
        await client.close()
        if proc.poll() is None:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 15)


async def _session_setting(hist, name: str, shard: int = 1) -> str:
    async with hist.server.shards.get(shard).conn() as conn:
        return await conn.fetchval(f"SHOW {name}")


async def test_shard_sessions_compress_full_page_images(make_hist):
    hist = await make_hist()
    assert await _session_setting(hist, "wal_compression") == "lz4"
    assert await hist.state(await hist.create_one("t", shard=1), "t") == "ENQUEUED"
    kept = await make_hist(wal_compression="")  # '': the server's setting (the test cluster's: off)
    assert await _session_setting(kept, "wal_compression") == "off"


async def test_a_role_that_may_not_set_wal_compression_serves_with_the_servers(pg_cluster, caplog):
    """The shard role is no superuser: history warns (naming the grant) and serves with the
    server's setting instead of failing every connection; after the grant its sessions set it."""
    from .conftest import start_hist, stop_hist
    role = f"shard_role_{os.getpid()}_{time.monotonic_ns() % 10**9}"
    pg_cluster.psql(f'CREATE ROLE "{role}" LOGIN')
    dsns = {}
    for shard in (1, 2):
        name = f"{role}_s{shard}"
        pg_cluster.psql(f'CREATE DATABASE "{name}" OWNER "{role}"')
        dsns[shard] = f"postgresql://{role}@127.0.0.1:{pg_cluster.port}/{name}"
    hist = await start_hist(dsns)
    try:
        assert await _session_setting(hist, "wal_compression") == "off"
        assert await hist.state(await hist.create_one("t", shard=1), "t") == "ENQUEUED"
        warned = [r.getMessage() for r in caplog.records if "wal_compression" in r.getMessage()]
        assert len(warned) == 2 and all("GRANT SET ON PARAMETER wal_compression" in m for m in warned), warned
    finally:
        await stop_hist(hist)
    pg_cluster.psql(f'GRANT SET ON PARAMETER wal_compression TO "{role}"')
    hist = await start_hist(dsns)
    try:
        assert await _session_setting(hist, "wal_compression") == "lz4"
    finally:
        await stop_hist(hist)


async def test_a_cleanly_used_connection_is_kept_and_reused_without_the_pool(make_hist):
    hist = await make_hist(timer_loop=False)  # (the timer loop would take the kept connection too)
    shard = hist.server.shards.get(1)
    async with shard.conn() as conn:
        first = conn
        pid = await conn.fetchval("SELECT pg_backend_pid()")
    idle = shard.pool.get_idle_size()
    for _ in range(5):
        async with shard.conn() as conn:
            assert conn is first and await conn.fetchval("SELECT pg_backend_pid()") == pid
    assert shard.pool.get_idle_size() == idle  # never went back to the pool in between
    # A domain error ends the use cleanly too: the connection stays kept.
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await hist.state("01a2320f-34a4-8365-8a53-ce5a5f9099e7", "t")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    async with shard.conn() as conn:
        assert conn is first


async def test_a_connection_left_in_a_transaction_or_broken_goes_back_to_the_pool(make_hist):
    hist = await make_hist(timer_loop=False)  # (the timer loop would take the kept connection too)
    shard = hist.server.shards.get(1)
    async with shard.conn() as conn:
        await conn.execute("BEGIN")
        await conn.execute("CREATE TEMP TABLE left_open (x int)")
    with pytest.raises(asyncpg.InterfaceError, match="released back to the pool"):
        conn.is_in_transaction()  # released, not kept: the pool rolls it back
    async with shard.conn() as again:
        assert await again.fetchval("SELECT to_regclass('pg_temp.left_open') IS NULL") is True
    # A connection killed under a caller: the call is UNAVAILABLE, the next one gets a live one.
    async with shard.conn() as conn:
        victim = await conn.fetchval("SELECT pg_backend_pid()")
    admin = await asyncpg.connect(hist.dsns[1])
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", victim)
    finally:
        await admin.close()
    from ratchet.services.history.errors import ShardUnavailable
    with pytest.raises(ShardUnavailable):
        async with shard.conn() as conn:
            await conn.fetchval("SELECT 1")
    async with shard.conn() as conn:
        assert await conn.fetchval("SELECT pg_backend_pid()") != victim


async def test_closing_a_shard_returns_its_kept_connections_first(make_hist):
    hist = await make_hist()
    shard = hist.server.shards.get(2)
    async with shard.conn() as a, shard.conn() as b:
        assert a is not b
    t0 = time.monotonic()
    await shard.close()
    assert time.monotonic() - t0 < 2.0  # not pool.close()'s 5 s wait for acquired connections
    for kept in (a, b):
        with pytest.raises(asyncpg.InterfaceError, match="released back to the pool"):
            kept.is_closed()


async def test_a_caller_waiting_for_the_pool_gets_the_next_connection_a_call_returns(make_hist):
    # Every connection out (pool_max_size 2): a third caller waits in the pool. A clean return
    # must go to it, not to the kept list the waiter never looks at again (it used to wait out
    # ACQUIRE_TIMEOUT_S, 5 s, and fail UNAVAILABLE: 32 producers of batch calls did that).
    hist = await make_hist(pool_max_size=2)
    shard = hist.server.shards.get(1)
    release = asyncio.Event()
    holding = 0

    async def hold() -> None:
        nonlocal holding
        async with shard.conn() as conn:
            holding += 1
            await release.wait()
            await conn.fetchval("SELECT 1")

    holders = [asyncio.ensure_future(hold()) for _ in range(2)]
    deadline = time.monotonic() + 10
    while holding < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert holding == 2

    async def third() -> float:
        t0 = time.monotonic()
        async with shard.conn() as conn:
            await conn.fetchval("SELECT 1")
        return time.monotonic() - t0

    waiter = asyncio.ensure_future(third())
    deadline = time.monotonic() + 10
    while shard._waiting < 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert shard._waiting == 1 and not waiter.done()
    released = time.monotonic()
    release.set()
    await asyncio.wait_for(asyncio.gather(*holders), 10)
    await asyncio.wait_for(waiter, 10)
    late = time.monotonic() - released
    assert late < 1.0, f"the waiter got a connection {late:.2f}s after the holders returned theirs"
    # Nobody waits any more: clean returns are kept again (the fast path stays).
    async with shard.conn() as a:
        pass
    async with shard.conn() as b:
        assert b is a
