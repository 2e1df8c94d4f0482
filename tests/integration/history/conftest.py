"""Fixtures: the history server in-process on a free port with two real
shard databases, called over real gRPC.

`hist` is shared by a test module (tests isolate themselves with unique
tenants and apps); `make_hist` builds a private server on fresh databases
for tests that need an empty shard or special config. Every server's
transition logs are checked against the state machine when it stops.
"""

from __future__ import annotations

import itertools
import os
import random

import pytest
import pytest_asyncio

from ratchet.services.history.config import load
from ratchet.services.history.server import HistoryServer

from .helpers import Hist, check_transition_logs

SHARDS = (1, 2)
_dbs = itertools.count()

# Short times keep the suite fast: leases and grace periods of about a second.
FAST = dict(lease_duration_s=1.0, cancel_grace_s=0.5, pool_max_size=4, bulk_interval_s=0.1)


def _new_dbs(pg_cluster) -> dict[int, str]:
    dsns = {}
    for shard in SHARDS:
        name = f"hist_{os.getpid()}_{next(_dbs)}_s{shard}"
        pg_cluster.create_database(name)
        dsns[shard] = pg_cluster.dsn(name)
    return dsns


async def start_hist(dsns: dict[int, str], **overrides) -> Hist:
    shards = {str(k): v for k, v in dsns.items()}
    shards.update(overrides.pop("extra_shards", {}))
    timer_loop = overrides.pop("timer_loop", True)
    fanout_loop = overrides.pop("fanout_loop", timer_loop)  # (no loop of its own either, by default)
    cfg = load(None, shards=shards, **{**FAST, **overrides})
    server = HistoryServer(cfg, rand=random.Random(1), reconnect_interval_s=0.2, timer_loop=timer_loop,
                           fanout_loop=fanout_loop)
    await server.start()
    return Hist(server.address, dsns, server)


async def stop_hist(hist: Hist, check_logs: bool = True) -> None:
    await hist.close()
    await hist.server.stop(grace=1)
    if check_logs:
        for dsn in hist.dsns.values():
            await check_transition_logs(dsn)


@pytest_asyncio.fixture(scope="module")
async def hist(pg_cluster):
    h = await start_hist(_new_dbs(pg_cluster))
    yield h
    await stop_hist(h)


@pytest.fixture
async def make_hist(pg_cluster):
    """make_hist(**config_overrides) -> a private Hist on fresh shard databases (timer_loop=False:
    timers fire only by hand, Hist.fire)."""
    made: list[Hist] = []

    async def make(check_logs: bool = True, **overrides) -> Hist:
        h = await start_hist(_new_dbs(pg_cluster), **overrides)
        made.append((h, check_logs))
        return h

    yield make
    for h, check_logs in made:
        await stop_hist(h, check_logs)
