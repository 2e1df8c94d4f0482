"""LeaseTasks: fair, batched leasing of ready work on one shard.

Round-robin over the tenants that have ready work, starting after the
caller's cursor and wrapping around. Each tenant gets an equal share of the
batch; what a tenant cannot use goes to the tenants that filled their share.
So a tenant's 100k backlog cannot keep another tenant's single task out of
the next lease, and the tenant scan costs one index probe per tenant.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import asyncpg

from ratchet.libs import gates
from ratchet.services.history.store import Store

MAX_ROUNDS = 4  # share-out passes per lease; each is one claim statement


@dataclasses.dataclass
class LeaseOut:
    """What one LeaseTasks call leased."""

    rows: list[asyncpg.Record]
    next_cursor: str
    more: bool


def fair_shares(n: int, total: int) -> list[int]:
    """Split `total` over `n` tenants as evenly as possible, earlier tenants first.

    With more tenants than slots, the first `total` tenants get one each.
    """
    if n <= 0 or total <= 0:
        return [0] * max(n, 0)
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


async def ready_tenants(conn, store: Store, cursor: str, app_ids: Sequence[str], limit: int) -> list[str]:
    """Up to `limit` tenants with ready work, in round-robin order after `cursor`."""
    tenants = await store.task_ready_tenants(conn, cursor, None, app_ids, limit)
    if len(tenants) < limit and cursor:
        tenants += await store.task_ready_tenants(conn, "", cursor, app_ids, limit - len(tenants))
    return tenants


async def claim_fair(conn, store: Store, tenants: list[str], max_tasks: int,
                     app_ids: Sequence[str]) -> dict[str, list[str]]:
    """Lock up to max_tasks ready tasks spread fairly over `tenants` -> {tenant: [task_id]}."""
    claimed: dict[str, list[str]] = {t: [] for t in tenants}
    taken: list[str] = []
    candidates = tenants
    for _ in range(MAX_ROUNDS):
        remaining = max_tasks - len(taken)
        if remaining <= 0 or not candidates:
            break
        candidates = candidates[:remaining]
        quotas = {t: q for t, q in zip(candidates, fair_shares(len(candidates), remaining)) if q > 0}
        got = await store.task_claim_ready(conn, quotas, app_ids, taken)
        per: dict[str, int] = {}
        for task_id, tenant in got:
            claimed[tenant].append(task_id)
            taken.append(task_id)
            per[tenant] = per.get(tenant, 0) + 1
        # Only tenants that used their whole share may have more to give.
        candidates = [t for t in quotas if per.get(t, 0) == quotas[t]]
    return claimed


async def lease_tasks(conn: asyncpg.Connection, store: Store, *, worker_id: str, max_tasks: int,
                      app_ids: Sequence[str], cursor: str, lease_s: float) -> LeaseOut:
    """Lease up to max_tasks ready tasks in one transaction."""
    async with conn.transaction():
        tenants = await ready_tenants(conn, store, cursor, app_ids, max_tasks)
        if not tenants:
            return LeaseOut([], cursor, False)
        claimed = await claim_fair(conn, store, tenants, max_tasks, app_ids)
        ids = [tid for t in tenants for tid in claimed[t]]
        if not ids:
            return LeaseOut([], cursor, False)
        rows = await store.task_lease_batch(conn, ids, worker_id, lease_s)
        await gates.reach("history.lease.before_commit")  # fault tests: leased, not committed
    order = {tid: i for i, tid in enumerate(ids)}
    rows = sorted(rows, key=lambda r: order[str(r["task_id"])])
    served = [t for t in tenants if claimed[t]]
    return LeaseOut(rows, served[-1], len(rows) >= max_tasks)
