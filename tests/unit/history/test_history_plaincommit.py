"""PlainGroups (plaincommit.py) without a database: which calls share a statement, its size caps,
and that every caller gets its own outcome."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import pytest

from ratchet.services.history import enqueue, plaincommit
from ratchet.services.history.convert import PlainIn
from ratchet.services.history.errors import ShardUnavailable


@dataclasses.dataclass
class FakeShard:
    id: int = 1

    @contextlib.asynccontextmanager
    async def conn(self):
        yield object()


class Recorder:
    """Stands in for enqueue.create_plain: records each statement's ids; `fail` decides per
    statement (an exception to raise, or None)."""

    def __init__(self, fail=lambda ids: None):
        self.statements: list[list[str]] = []
        self.fail = fail
        self.gate: asyncio.Event | None = None

    async def __call__(self, conn, store, plain: PlainIn) -> None:
        self.statements.append(list(plain.task_ids))
        if self.gate is not None:
            await self.gate.wait()
        err = self.fail(plain.task_ids)
        if err is not None:
            raise err


POLICY = object()


def plain(prefix: str, n: int, task_type: str = "t", policy=POLICY, size: int = 1) -> PlainIn:
    return PlainIn(task_ids=[f"{prefix}{i}" for i in range(n)], payloads=[b"1" * size] * n, tenant_id="ten",
                   app_id="app", task_type=task_type, queue="default", policy=policy)


def groups(monkeypatch, recorder: Recorder, alone_outcome=lambda p: "alone"):
    monkeypatch.setattr(enqueue, "create_plain", recorder)
    alone_calls: list[str] = []
    committed: list[int] = []

    async def alone(shard, p: PlainIn):
        alone_calls.append(p.task_ids[0])
        if recorder.gate is not None:
            await recorder.gate.wait()  # (a call alone is in flight until the gate opens too)
        out = alone_outcome(p)
        if isinstance(out, BaseException):
            raise out
        return out
    g = plaincommit.PlainGroups(store=None, alone=alone, committed=lambda shard, p: committed.append(shard.id))
    return g, alone_calls, committed


async def _queue_behind_one(g: plaincommit.PlainGroups, recorder: Recorder, calls: list[PlainIn]):
    """The first call runs alone (it holds the line at the gate); the others queue behind it."""
    recorder.gate = asyncio.Event()
    first = asyncio.ensure_future(g.create(FakeShard(), calls[0]))
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(g.create(FakeShard(), c)) for c in calls[1:]]
    await asyncio.sleep(0)
    recorder.gate.set()
    return await asyncio.gather(first, *rest, return_exceptions=True)


async def test_calls_queued_behind_one_in_flight_share_the_next_statement(monkeypatch):
    rec = Recorder()
    g, alone, committed = groups(monkeypatch, rec)
    out = await _queue_behind_one(g, rec, [plain(f"c{i}-", 3) for i in range(5)])
    assert out[0] == "alone" and alone == ["c0-0"]  # the first went at once, by itself
    assert all(o.all_created for o in out[1:])
    assert rec.statements == [[f"c{i}-{k}" for i in range(1, 5) for k in range(3)]]  # one statement, in order
    assert g.statements == 1 and g.grouped_calls == 4 and committed == [1]


async def test_only_calls_sharing_every_value_share_a_statement(monkeypatch):
    rec = Recorder()
    g, alone, _ = groups(monkeypatch, rec)
    other_policy = object()
    kinds = {"a": {}, "b": {"task_type": "u"}, "d": {"policy": other_policy}}
    # One leader per line runs alone (held at the gate); two calls queue behind each.
    calls = [plain(f"{k}-lead", 1, **kw) for k, kw in kinds.items()]
    calls += [plain(f"{k}{i}-", 1, **kw) for i in range(2) for k, kw in kinds.items()]
    out = await _queue_behind_one(g, rec, calls)
    assert not any(isinstance(o, BaseException) for o in out)
    assert sorted(alone) == ["a-lead0", "b-lead0", "d-lead0"]
    assert sorted(rec.statements) == [["a0-0", "a1-0"], ["b0-0", "b1-0"], ["d0-0", "d1-0"]]


async def test_a_group_stops_at_the_row_and_byte_caps(monkeypatch):
    monkeypatch.setattr(plaincommit, "MAX_GROUP_ROWS", 10)
    monkeypatch.setattr(plaincommit, "MAX_GROUP_BYTES", 1000)
    rec = Recorder()
    g, alone, _ = groups(monkeypatch, rec)
    calls = [plain("lead", 1)] + [plain(f"r{i}-", 4) for i in range(5)] + [plain("big", 1, size=5000)]
    out = await _queue_behind_one(g, rec, calls)
    assert not any(isinstance(o, BaseException) for o in out)
    # 5 calls of 4 rows: 8 + 8 + 4 under a 10-row cap; the call over the byte cap goes alone.
    assert [len(s) for s in rec.statements] == [8, 8]
    assert sorted(alone) == ["big0", "lead0", "r4-0"]


async def test_a_failed_group_runs_each_call_alone_and_each_gets_its_own_outcome(monkeypatch):
    rec = Recorder(fail=lambda ids: enqueue.Fallback() if len(ids) > 1 else None)
    refused = ValueError("bad call")
    g, alone, committed = groups(monkeypatch, rec,
                                 alone_outcome=lambda p: refused if p.task_ids[0] == "c2-0" else f"own {p.task_ids[0]}")
    out = await _queue_behind_one(g, rec, [plain(f"c{i}-", 2) for i in range(4)])
    assert out[1] == "own c1-0" and out[2] is refused and out[3] == "own c3-0"
    assert sorted(alone) == ["c0-0", "c1-0", "c2-0", "c3-0"] and committed == []


@pytest.mark.parametrize("error", [ShardUnavailable(1, "down")])
async def test_a_shard_down_fails_the_whole_group_with_its_error(monkeypatch, error):
    rec = Recorder(fail=lambda ids: error if len(ids) > 1 else None)
    g, alone, _ = groups(monkeypatch, rec)
    out = await _queue_behind_one(g, rec, [plain(f"c{i}-", 2) for i in range(3)])
    assert out[1] is error and out[2] is error and alone == ["c0-0"]  # not retried one by one


async def test_a_caller_that_gave_up_while_queued_is_left_out(monkeypatch):
    rec = Recorder()
    g, _, _ = groups(monkeypatch, rec)
    rec.gate = asyncio.Event()
    first = asyncio.ensure_future(g.create(FakeShard(), plain("a", 1)))
    await asyncio.sleep(0)
    gave_up = asyncio.ensure_future(g.create(FakeShard(), plain("gone", 1)))
    stays = [asyncio.ensure_future(g.create(FakeShard(), plain(f"s{i}-", 1))) for i in range(2)]
    await asyncio.sleep(0)
    gave_up.cancel()
    rec.gate.set()
    await asyncio.gather(first, *stays)
    assert all("gone0" not in s for s in rec.statements)
    assert g._lines == {}  # an idle line is dropped
