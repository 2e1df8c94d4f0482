"""Why the named queries stay ours (libs/pg/queries.py and each service's Store over it)
rather than aiosql: what aiosql 15.0 with its asyncpg adapter does with our .sql files and
on every call, beside what our Stores do. The per-call cost is measured in
docs/benchmarks/findings.md ("Libraries we measured"); these tests pin the behaviours.

Each test asserts aiosql's measured behaviour AND ours. If one fails on aiosql's side, a
newer aiosql changed that behaviour: re-decide whether to adopt it (docs/architecture.md,
"Not aiosql", says what switching needs) before updating the expected value.
"""

from __future__ import annotations

import inspect
import logging

import aiosql
import pytest
from aiosql.utils import SQLParseException

from ratchet.libs.pg.queries import load_queries
from ratchet.services.cron.store import HERE, Tx

FILES = (HERE / "schedules.sql", HERE / "slots.sql")
# The only way aiosql takes our files as written: parameters left undeclared in `-- name:` and
# passed by position ($1, $2 ...), two non-default switches.
AS_WRITTEN = dict(mandatory_parameters=False, kwargs_only=False)


class Conn:
    """Stands in for an asyncpg connection: records each fetch and each dir() of itself."""

    def __init__(self) -> None:
        self.fetches: list[tuple[str, tuple, dict]] = []
        self.dirs = 0

    def __dir__(self):
        self.dirs += 1
        return super().__dir__()

    async def fetch(self, sql, *args, **kwargs):
        self.fetches.append((sql, args, kwargs))
        return []


def _load(**kwargs):
    logging.getLogger("aiosql").disabled = True  # "may not be a select" for DML without RETURNING
    try:
        return [aiosql.from_path(f, "asyncpg", **kwargs) for f in FILES]
    finally:
        logging.getLogger("aiosql").disabled = False


def _code(sql: str) -> str:
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--")).strip().rstrip(";")


def test_our_files_load_only_with_two_non_default_switches():
    with pytest.raises(SQLParseException, match="missing mandatory parameter list"):
        _load()
    ours = load_queries(*FILES)
    loaded = {name: getattr(q, name).sql for q in _load(**AS_WRITTEN) for name in q.available_queries
              if not name.endswith("_cursor")}
    assert set(loaded) == set(ours)
    # Same statements once comments are set aside: aiosql moves a query's leading comments into
    # its docstring, ours keeps them in the text (history's `-- transitions:` checks read it there).
    assert {name: _code(sql) for name, sql in loaded.items()} == {name: _code(sql) for name, sql in ours.items()}


async def test_an_unmarked_query_is_an_async_generator():
    # Our files name queries without aiosql's suffixes (^ one row, $ one value, ! no rows), so
    # every one is a generator; a row or a value needs the suffix on each query in the .sql.
    schedules = _load(**AS_WRITTEN)[0]
    rows = schedules.clock_read(Conn())
    assert inspect.isasyncgen(rows)
    assert [r async for r in rows] == []


async def test_aiosql_sends_no_deadline_and_lists_the_connection_on_every_call():
    schedules = _load(**AS_WRITTEN)[0]
    conn = Conn()
    for _ in range(3):
        [r async for r in schedules.schedule_lock(conn, "00000000-0000-0000-0000-000000000001")]
    # No timeout reaches asyncpg (every statement of ours carries the service's rpc_timeout_s),
    # and MaybeAcquire runs `"acquire" in dir(conn)` per call: ~10.7 us on an asyncpg Connection.
    assert [kw for _, _, kw in conn.fetches] == [{}, {}, {}]
    assert conn.dirs == 3

    ours = Conn()
    for _ in range(3):
        await Tx(ours, 5.0, {}).schedule_lock("00000000-0000-0000-0000-000000000001")
    assert [kw for _, _, kw in ours.fetches] == [{"timeout": 5.0}] * 3
    assert ours.dirs == 0
