"""Single enqueues coalesced per shard: one call when idle, shared calls while
one is in flight, and every caller gets exactly its own answer."""

from __future__ import annotations

import asyncio

import pytest

from ratchet.internal.history.v1 import history_pb2
from ratchet.services.gateway import errors
from ratchet.services.gateway.coalesce import CoalescedCreates


class FakeHistory:
    """History's CreateTasks semantics: a key owned by another fingerprint is a conflict and
    rolls the whole request back; a key with the same fingerprint is deduplicated."""

    def __init__(self, delay: float = 0.01):
        self.delay = delay
        self.calls: list[list[str]] = []
        self.keys: dict[str, tuple[str, str]] = {}  # key -> (task_id, fingerprint)
        self.created: set[str] = set()
        self.fail: dict[int, errors.GatewayError] = {}  # call number -> its error

    async def create_tasks(self, shard_id, tasks, timeout):
        self.calls.append([t.task_id for t in tasks])
        n = len(self.calls)
        await asyncio.sleep(self.delay)
        if n in self.fail:
            raise self.fail[n]
        out, claimed, conflict = [], {}, False
        for t in tasks:
            owner = self.keys.get(t.idempotency_key) if t.idempotency_key else None
            if owner is None:
                if t.idempotency_key:
                    claimed[t.idempotency_key] = (t.task_id, t.fingerprint)
                out.append(history_pb2.CreateResult(task_id=t.task_id))
            elif owner[1] == t.fingerprint:
                out.append(history_pb2.CreateResult(task_id=owner[0], deduplicated=True))
            else:
                out.append(history_pb2.CreateResult(task_id=owner[0], conflict=True))
                conflict = True
        if not conflict:
            self.keys.update(claimed)
            self.created.update(r.task_id for r in out if not r.deduplicated)
        return out


def task(n: int, key: str = "", fp: str = "f") -> history_pb2.NewTask:
    return history_pb2.NewTask(task_id=f"t{n}", idempotency_key=key, fingerprint=fp)


async def test_alone_when_idle_then_coalesced_while_a_call_is_in_flight():
    h = FakeHistory()
    c = CoalescedCreates(h)
    (r,) = [await c.create(1, task(0), 5)]
    assert r.task_id == "t0" and h.calls == [["t0"]]
    results = await asyncio.gather(*(c.create(1, task(i), 5) for i in range(1, 21)))
    assert [r.task_id for r in results] == [f"t{i}" for i in range(1, 21)]
    assert len(h.calls) == 3 and h.calls[1] == ["t1"] and len(h.calls[2]) == 19
    other = await asyncio.gather(c.create(1, task(30), 5), c.create(2, task(31), 5))
    assert [r.task_id for r in other] == ["t30", "t31"]  # shards have their own lines


async def test_a_conflict_answers_its_caller_and_the_rest_go_again_alone():
    h = FakeHistory()
    c = CoalescedCreates(h)
    await c.create(1, task(0, "k", "one"), 5)
    first = asyncio.ensure_future(c.create(1, task(1), 5))
    await asyncio.sleep(0)
    clash, fresh, same = (asyncio.ensure_future(c.create(1, t, 5))
                          for t in (task(2, "k", "two"), task(3, "new"), task(4, "k", "one")))
    await first
    r_clash, r_fresh, r_same = await asyncio.gather(clash, fresh, same)
    assert (r_clash.task_id, r_clash.conflict) == ("t0", True)
    assert (r_fresh.task_id, r_fresh.conflict, r_fresh.deduplicated) == ("t3", False, False)
    assert (r_same.task_id, r_same.deduplicated) == ("t0", True)
    assert "t3" in h.created and h.keys["new"] == ("t3", "f")


async def test_one_key_never_shares_a_call():
    h = FakeHistory()
    c = CoalescedCreates(h)
    first = asyncio.ensure_future(c.create(1, task(0), 5))
    await asyncio.sleep(0)
    dup = [asyncio.ensure_future(c.create(1, task(i, "same"), 5)) for i in range(1, 4)]
    await first
    results = await asyncio.gather(*dup)
    assert {r.task_id for r in results} == {"t1"} and sum(r.deduplicated for r in results) == 2
    assert all(sum(t != "t0" for t in call) <= 1 for call in h.calls)


@pytest.mark.parametrize("error, each_alone", [(errors.Unavailable("shard 1 is unavailable"), False),
                                               (errors.DeadlineExceeded("no answer"), False),
                                               (errors.InvalidArgument("tasks[1]: bad"), True)])
async def test_a_failed_shared_call_fails_everyone_or_goes_again_alone(error, each_alone):
    h = FakeHistory()
    c = CoalescedCreates(h)
    h.fail[2] = error  # the shared call
    first = asyncio.ensure_future(c.create(1, task(0), 5))
    await asyncio.sleep(0)
    waiting = [asyncio.ensure_future(c.create(1, task(i), 5)) for i in (1, 2)]
    assert (await first).task_id == "t0"
    outcomes = await asyncio.gather(*waiting, return_exceptions=True)
    if each_alone:
        assert [o.task_id for o in outcomes] == ["t1", "t2"] and h.calls[2:] == [["t1"], ["t2"]]
    else:
        assert all(o is error for o in outcomes) and len(h.calls) == 2


async def test_a_caller_that_gave_up_is_not_sent():
    h = FakeHistory(delay=0.05)
    c = CoalescedCreates(h)
    first = asyncio.ensure_future(c.create(1, task(0), 5))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(c.create(1, task(1), 5))
    kept = asyncio.ensure_future(c.create(1, task(2), 5))
    await asyncio.sleep(0.01)
    gone.cancel()
    await first
    assert (await kept).task_id == "t2"
    assert all("t1" not in call for call in h.calls)
