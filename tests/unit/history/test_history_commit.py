"""The committer (commit.py) over a fake store: requests share statements, rounds go again on
what the rows say (a race, an expired key, an id a uniform write met), and no request fails
another's."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import pytest

from ratchet.libs.shardmap import new_task_id
from ratchet.services.history.enqueue import CreateOut, Request, Row, commit
from ratchet.services.history.errors import Contention, ShardUnavailable

from .test_history_enqueue import batch


@dataclasses.dataclass
class FakeShard:
    id: int = 1

    @contextlib.asynccontextmanager
    async def conn(self):
        yield object()


class FakeStore:
    """task_create's semantics over dicts: a request goes whole if every row is new (the store
    and its statements in one: on(conn) is the store itself)."""

    def __init__(self):
        self.tasks: dict[str, tuple] = {}
        self.keys: dict[tuple, tuple[str, str, bool]] = {}  # (tenant, app, key) -> (task, fingerprint, expired)
        self.ran: list[tuple[str, int]] = []
        self.races = 0  # task_create calls still to answer "raced"
        self.fail: Exception | None = None
        self.gate: asyncio.Event | None = None

    def on(self, conn):
        return self

    async def _enter(self, name: str, b) -> None:
        self.ran.append((name, len(b)))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None and self.fail.args and self.fail.args[0] in b.task_ids:
            raise self.fail

    async def task_create(self, b, reqs, window_s):
        await self._enter("task_create", b)
        if self.races:
            self.races -= 1
            return None
        rows, ok = [], {}
        for i, tid in enumerate(b.task_ids):
            key = (b.at("tenant_id", i), b.at("app_id", i), b.at("key", i)) if b.at("key", i) else None
            held = self.keys.get(key) if key else None
            owner = self.tasks.get(tid)
            row = Row(False, id_owner=owner,
                      key_task=held[0] if held else None, key_fingerprint=held[1] if held else None,
                      key_expired=held[2] if held else False)
            rows.append(row)
            r = reqs[i] if len(reqs) > 1 else reqs[0]
            ok[r] = ok.get(r, True) and owner is None and held is None
        for i, tid in enumerate(b.task_ids):
            if ok[reqs[i] if len(reqs) > 1 else reqs[0]]:
                self.tasks[tid] = (b.at("tenant_id", i), b.at("app_id", i), b.at("task_type", i))
                if b.at("key", i):
                    self.keys[(b.at("tenant_id", i), b.at("app_id", i), b.at("key", i))] = (
                        tid, b.at("fingerprint", i), False)
                rows[i] = Row(True, due=True)
        return rows

    async def _uniform(self, name, b):
        await self._enter(name, b)
        if any(t in self.tasks for t in b.task_ids):
            return False
        for tid in b.task_ids:
            self.tasks[tid] = (b.tenant_id[0], b.app_id[0], b.task_type[0])
        return True

    async def task_create_uniform(self, b):
        return await self._uniform("task_create_uniform", b)

    async def task_copy_uniform(self, b):
        return await self._uniform("task_copy_uniform", b)

    async def idempotency_key_expire_batch(self, keys):
        self.ran.append(("expire", len(keys)))
        for k in keys:
            if self.keys.get(k, (0, 0, False))[2]:
                del self.keys[k]


def committer(store: FakeStore):
    due, timers = [], []
    c = commit.Committer(store, 86400.0, due.append, lambda s, t: timers.append(t))
    return c, due, timers


async def _behind_one(c, store, first: Request, rest: list[Request]):
    """The first request runs alone (held at the gate); the others queue behind it."""
    store.gate = asyncio.Event()
    head = asyncio.ensure_future(c.create(FakeShard(), first))
    await asyncio.sleep(0)
    tail = [asyncio.ensure_future(c.create(FakeShard(), r)) for r in rest]
    await asyncio.sleep(0)
    store.gate.set()
    return await asyncio.gather(head, *tail, return_exceptions=True)


async def test_alone_when_idle_and_queued_requests_share_one_statement():
    store = FakeStore()
    c, due, _ = committer(store)
    keyed = [Request(batch(1, key=f"k{i}", fingerprint="f")) for i in range(5)]
    out = await _behind_one(c, store, keyed[0], keyed[1:])
    assert [o[0].task_id for o in out] == [r.batch.task_ids[0] for r in keyed]
    assert store.ran == [("task_create", 1), ("task_create", 4)] and due == [1, 1]
    uniform = [Request(batch(2), columns=True) for _ in range(30)]
    store.ran.clear()
    assert await _behind_one(c, store, uniform[0], uniform[1:]) == [None] * 30  # all_created
    assert store.ran == [("task_create_uniform", 2), ("task_copy_uniform", 58)]  # 58 rows: the COPY


async def test_a_race_goes_again_and_the_next_statement_decides():
    store = FakeStore()
    store.races = 2
    c, _, _ = committer(store)
    r = Request(batch(1, key="k", fingerprint="f"))
    assert await c.create(FakeShard(), r) == [CreateOut(r.batch.task_ids[0])]
    assert [n for n, _ in store.ran] == ["task_create"] * 3


async def test_a_uniform_write_that_meets_an_id_is_answered_per_task_by_the_general_statement():
    store = FakeStore()
    c, _, _ = committer(store)
    old = Request(batch(2), columns=True)
    assert await c.create(FakeShard(), old) is None
    again = Request(batch(3, task_ids=old.batch.task_ids + [new_task_id()]), columns=True)
    out = await c.create(FakeShard(), again)
    assert [a.deduplicated for a in out] == [True, True, False]
    # (the new task goes with the next general statement: a request that met a taken id stays probed)
    assert [n for n, _ in store.ran] == ["task_create_uniform", "task_create_uniform", "task_create", "task_create"]


async def test_an_expired_key_is_expired_then_taken_over():
    store = FakeStore()
    c, _, _ = committer(store)
    store.keys[("t", "a", "k")] = ("old", "f", True)
    r = Request(batch(1, key="k", fingerprint="g"))
    assert await c.create(FakeShard(), r) == [CreateOut(r.batch.task_ids[0])]
    assert [n for n, _ in store.ran] == ["task_create", "expire", "task_create"]


async def test_many_callers_of_one_new_key_are_one_statement_and_one_task():
    store = FakeStore()
    c, _, _ = committer(store)
    same = [Request(batch(1, key="once", fingerprint="a")) for _ in range(10)]
    other = [Request(batch(1, key="once", fingerprint="b")) for _ in range(3)]
    out = await _behind_one(c, store, Request(batch(1, key="first", fingerprint="f")), same + other)
    owner = same[0].batch.task_ids[0]
    assert out[1] == [CreateOut(owner)] and all(o == [CreateOut(owner, deduplicated=True)] for o in out[2:11])
    assert all(o == [CreateOut(owner, conflict=True)] for o in out[11:])
    assert store.ran == [("task_create", 1), ("task_create", 1)]  # the leader in a statement, the rest follow


@pytest.mark.parametrize("error, alone", [(ShardUnavailable(1, "down"), False), (RuntimeError("x"), True)])
async def test_a_failed_group_fails_everyone_or_runs_each_request_alone(error, alone):
    store = FakeStore()
    c, _, _ = committer(store)
    reqs = [Request(batch(1, key=f"k{i}", fingerprint="f")) for i in range(4)]
    bad = reqs[2].batch.task_ids[0]
    error.args = (bad,) if alone else error.args
    store.fail = error if alone else None

    async def down(*a, **kw):
        raise error
    if not alone:
        store.task_create = down
    out = await _behind_one(c, store, Request(batch(1)), reqs)
    if alone:
        assert out[3] is error and all(isinstance(o, list) for i, o in enumerate(out) if i != 3)
        assert [n for n, _ in store.ran].count("task_create") == 1 + 4  # the group, then each alone
    else:
        assert all(o is error for o in out[1:])


async def test_a_request_undecided_after_every_round_gives_up_as_contention():
    store = FakeStore()
    store.races = 100
    c, _, _ = committer(store)
    with pytest.raises(Contention):
        await c.create(FakeShard(), Request(batch(1, key="k", fingerprint="f")))
    assert len(store.ran) == commit.MAX_ROUNDS
