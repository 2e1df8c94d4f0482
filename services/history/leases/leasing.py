"""LeaseTasks: fair, batched leasing of ready work on one shard.

Round-robin over the tenants that have ready work, starting after the
caller's cursor and wrapping around. Each tenant gets an equal share of the
batch; what a tenant cannot use goes to the tenants that filled their share.
So a tenant's 100k backlog cannot keep another tenant's single task out of
the next lease, and the tenant scan costs one index probe per tenant.

Type limits (circuit breakers) name (tenant, app, task_type) triples: 0
leaves the type out of this call entirely (the tenant's share goes to its
other work, or to other tenants); N > 0 claims at most N of it first, and
the fair share-out then runs without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import asyncpg

from ratchet.libs import gates
from ratchet.services.history.store import LeasedRow, Store, Tx, TypeKey

MAX_ROUNDS = 4  # share-out passes per lease; each is one claim statement


@dataclasses.dataclass
class LeaseOut:
    """What one LeaseTasks call leased."""

    rows: list[LeasedRow]
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


async def ready_tenants(db: Tx, cursor: str, app_ids: Sequence[str], limit: int,
                        excluded: Sequence[TypeKey] = ()) -> list[str]:
    """Up to `limit` tenants with ready work, in round-robin order after `cursor`."""
    tenants = await db.task_ready_tenants(cursor, None, app_ids, limit, excluded)
    if len(tenants) < limit and cursor:
        tenants += await db.task_ready_tenants("", cursor, app_ids, limit - len(tenants), excluded)
    return tenants


def split_limits(type_limits: Sequence[tuple[TypeKey, int]]) -> tuple[list[TypeKey], dict[TypeKey, int]]:
    """(paused types, {capped type: cap}); a type named twice gets the smaller limit."""
    lowest: dict[TypeKey, int] = {}
    for key, n in type_limits:
        lowest[key] = min(n, lowest.get(key, n))
    return [k for k, n in lowest.items() if n <= 0], {k: n for k, n in lowest.items() if n > 0}


async def claim_fair(db: Tx, tenants: list[str], max_tasks: int, app_ids: Sequence[str],
                     excluded: Sequence[TypeKey] = (), already: Sequence[str] = ()) -> dict[str, list[str]]:
    """Pick up to max_tasks ready tasks spread fairly over `tenants` -> {tenant: [task_id]}.

    Nothing is locked (the lease UPDATE re-checks each row); `excluded` types are not picked;
    `already` ids were picked earlier by this transaction.
    """
    claimed: dict[str, list[str]] = {t: [] for t in tenants}
    already = list(already)
    taken: list[str] = []
    candidates = tenants
    for _ in range(MAX_ROUNDS):
        remaining = max_tasks - len(taken)
        if remaining <= 0 or not candidates:
            break
        candidates = candidates[:remaining]
        quotas = {t: q for t, q in zip(candidates, fair_shares(len(candidates), remaining), strict=True) if q > 0}
        got = await db.task_claim_ready(quotas, app_ids, already + taken, excluded)
        per: dict[str, int] = {}
        for task_id, tenant in got:
            claimed[tenant].append(task_id)
            taken.append(task_id)
            per[tenant] = per.get(tenant, 0) + 1
        # Only tenants that used their whole share may have more to give.
        candidates = [t for t in quotas if per.get(t, 0) == quotas[t]]
    return claimed


async def _claim_capped(db: Tx, caps: dict[TypeKey, int], max_tasks: int, app_ids: Sequence[str]) -> list[str]:
    if not caps:
        return []
    got = await db.task_claim_capped({k: min(n, max_tasks) for k, n in caps.items()}, app_ids, [])
    # Rows picked past max_tasks are simply not leased.
    return [task_id for task_id, _ in got][:max_tasks]


async def lease_tasks(conn: asyncpg.Connection, store: Store, *, worker_id: str, max_tasks: int,
                      app_ids: Sequence[str], cursor: str, lease_s: float,
                      type_limits: Sequence[tuple[TypeKey, int]] = ()) -> LeaseOut:
    """Lease up to max_tasks ready tasks, honouring per-type limits.

    The picks are reads without locks, each statement on its own snapshot (READ COMMITTED),
    so they run before the transaction: the lease UPDATE re-checks every picked row, alone
    in it. When nothing is ready (an idle shard, asked on every wake-up of a parked poll)
    there is no transaction at all: no BEGIN and COMMIT round trips around an empty answer."""
    paused, caps = split_limits(type_limits)
    excluded = paused + list(caps)
    db = store.on(conn)
    capped = await _claim_capped(db, caps, max_tasks, app_ids)
    room = max_tasks - len(capped)
    tenants = await ready_tenants(db, cursor, app_ids, room, excluded) if room > 0 else []
    claimed = await claim_fair(db, tenants, room, app_ids, excluded, capped) if tenants else {}
    ids = capped + [tid for t in tenants for tid in claimed[t]]
    if not ids:
        return LeaseOut([], cursor, False)
    async with store.tx(conn) as tx:
        rows = await tx.task_lease_batch(ids, worker_id, lease_s)
        await gates.reach("history.lease.before_commit")  # fault tests: leased, not committed
    order = {tid: i for i, tid in enumerate(ids)}
    rows = sorted(rows, key=lambda r: order[str(r.task_id)])
    served = [t for t in tenants if claimed[t]]
    return LeaseOut(rows, served[-1] if served else cursor, len(rows) >= max_tasks)
