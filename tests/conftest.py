"""Shared fixtures: one real Postgres cluster per test session, made with
initdb in a temporary folder on a free port (never the machine's own
server), and fresh databases for each test that asks."""

from __future__ import annotations

import os

# gRPC's fork handlers can block fork() forever in a process whose other
# threads are inside gRPC (seen by the fault harness when the platform starts
# Postgres or services from a test). It must be set before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import itertools
import pathlib
import tempfile

import pytest

from ratchet.libs.pg.cluster import LocalCluster

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster():
    """A private Postgres 15 cluster, stopped at the end of the session."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-test-pg-"))
    os.chmod(root, 0o755)
    cluster = LocalCluster(root / "data", settings={"fsync": "off", "synchronous_commit": "off",
                                                    "full_page_writes": "off"})
    cluster.ensure_started()
    yield cluster
    cluster.stop(mode="immediate")


@pytest.fixture
def fresh_db(pg_cluster):
    """A factory of new, empty databases: fresh_db('shard') -> dsn."""
    def make(prefix: str = "db") -> str:
        name = f"{prefix}_{os.getpid()}_{next(_counter)}"
        pg_cluster.create_database(name)
        return pg_cluster.dsn(name)
    return make
