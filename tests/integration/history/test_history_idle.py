"""What an idle shard costs: history's timer loop reads every shard for due timers when the
next one is due (at least every 2 s), and the dispatcher asks, for each parked poll it
wakes, for ready work. Neither may open a transaction when there is nothing to do; with work,
the writes still run in one."""

from __future__ import annotations

import asyncio

from ratchet.services.history.loops.timers import IDLE_S
from ratchet.services.history.policy import duration
from ratchet.services.history.store import Tx

from .helpers import eventually, unique


def _spy(monkeypatch, store, prefix: str) -> list[tuple[str, bool]]:
    """(statement name, ran inside a transaction) of every statement named `prefix`... that
    `store` runs from now on (the server's background loops run their own)."""
    seen: list[tuple[str, bool]] = []
    run = Tx._run

    async def spy(self, name, *args, **kw):
        if self._store is store and name.startswith(prefix):
            seen.append((name, self.conn.is_in_transaction()))
        return await run(self, name, *args, **kw)
    monkeypatch.setattr(Tx, "_run", spy)
    return seen


async def test_firing_with_nothing_due_is_one_read_and_a_due_timer_still_fires(make_hist, monkeypatch):
    hist = await make_hist(timer_loop=False)  # fired by hand only: the test counts every statement
    seen = _spy(monkeypatch, hist.server.store, "timer_")

    r = await hist.fire()  # an empty shard
    assert r.fired == 0 and not r.ready and r.next_in_s is None
    assert seen == [("timer_next_in", False)]

    tenant = unique("t")
    later = await hist.create_one(tenant, delay=duration(60))
    soon = await hist.create_one(tenant, delay=duration(0.3))
    seen.clear()
    r = await hist.fire()  # nothing due yet: the answer says when
    assert r.fired == 0 and 0 < r.next_in_s <= 0.3
    assert seen == [("timer_next_in", False)]

    async def soon_is_due() -> bool:  # (read on the test's own connection, not the server's store)
        (row,) = await hist.sql(1, "SELECT min(fire_at) <= clock_timestamp() AS due FROM timer_queue")
        return row["due"]
    await eventually(soon_is_due)
    seen.clear()
    r = await hist.fire()
    assert r.fired == 1 and r.ready
    assert 55 < r.next_in_s <= 60  # the 60 s delay is next
    assert seen[0] == ("timer_next_in", False)
    assert ("timer_claim_due", True) in seen and seen[-1] == ("timer_next_in", True)
    assert await hist.state(soon, tenant) == "ENQUEUED" and set(await hist.timers(later)) == {"delay"}


async def test_the_timer_loop_reads_an_idle_shard_once_per_idle_s_and_opens_no_transaction(
        make_hist, monkeypatch):
    hist = await make_hist()
    seen = _spy(monkeypatch, hist.server.store, "timer_")
    tenant = unique("t")
    await hist.create_one(tenant, delay=duration(3600))  # pending, an hour away: nothing due
    seen.clear()
    await asyncio.sleep(2 * IDLE_S + 0.2)
    # Two shards, each read once per IDLE_S (2 s): 4-6 reads, none in a transaction.
    assert 3 <= len(seen) <= 6 and set(seen) == {("timer_next_in", False)}, seen


async def test_lease_with_nothing_ready_opens_no_transaction_and_with_work_leases_in_one(make_hist, monkeypatch):
    hist = await make_hist()
    tenant, app = unique("t"), unique("app")
    seen = _spy(monkeypatch, hist.server.store, "task_")

    r = await hist.lease(app, cursor="some-tenant")  # with a cursor: two reads (after it, then wrapped)
    assert not r.tasks and not r.more and r.next_tenant_cursor == "some-tenant"
    assert seen == [("task_ready_tenants", False), ("task_ready_tenants", False)]

    task_id = await hist.create_one(tenant, app)
    seen.clear()
    r = await hist.lease(app)
    assert [t.task_id for t in r.tasks] == [task_id] and r.next_tenant_cursor == tenant
    assert seen == [("task_ready_tenants", False), ("task_claim_ready", False), ("task_lease_batch", True)]
    assert await hist.state(task_id, tenant) == "LEASED"
