"""Fan-outs (ctx.parallel, ctx.child): the step's BEGIN, the children's parent link at their
create, the delivery of children's ends to the parent's barrier, and the cancel cascade
(docs/design/workflows-protocol.md, "Fan-out").

A child's end is written to its shard's outbox by the statement that ends it
(task_transition_apply). Delivery records it on the parent's shard once
(workflow_child_done's key), decrements one stripe of the barrier, and completes the step
when the barrier fires; only then is the outbox row deleted, so a crash in between
redelivers, and the redelivery inserts nothing and decrements nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

import asyncpg

from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.shardmap import ShardMap, child_id
from ratchet.libs.taskstate import CancelReason, TaskState
from ratchet.services.history import convert, enqueue
from ratchet.services.history.decide import cancel_now
from ratchet.services.history.enqueue.convert import create_request
from ratchet.services.history.errors import Contention, InvalidArgument, ShardUnavailable
from ratchet.services.history.model import ErrorInfo
from ratchet.services.history.shards import Shard, ShardSet
from ratchet.services.history.store import Store, Tx
from ratchet.services.history.store.rows import ChildDoneRow, ChildEnd
from ratchet.services.history.workflows.suspend import wake

log = logging.getLogger(__name__)

SPREAD_ABOVE = 1000  # a fan-out of more children spreads them over the shards
DONE_PAGE = 1000  # child ends read per statement for a DONE
DELIVER_BATCH = 500  # outbox rows delivered per transaction on the parent's shard
CASCADE_BATCH = 500  # children cancelled per transaction of a cascade
WOKEN_REASON = "woken: the fan-out's barrier fired"
CASCADE_REASON = "canceled: its parent's fan-out was cancelled"


@dataclasses.dataclass(frozen=True)
class Mesh:
    """What delivery and cascades reach: every shard this process serves, how ids route to
    shards (the gateway's map: ShardMap.even over the shard ids), and the in-process hints
    (ready work; a timer due) given after a commit."""

    shards: ShardSet
    store: Store
    map: ShardMap
    publish: Callable[[int], None]
    timer_due: Callable[[int, float], None]
    grace_s: float

    def served(self, shard_id: int) -> Shard | None:
        """The shard if this process serves it and it is connected, else None."""
        if shard_id not in self.shards.ids:
            return None
        shard = self.shards.get(shard_id)
        return shard if shard.available else None


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one child ended (a DONE's ChildOutcome)."""

    index: int
    child_id: str
    state: str
    result: bytes | None
    error: ErrorInfo | None


def child_ids(parent_id: str, position: int, n: int, lo: int = 0, hi: int | None = None) -> list[str]:
    """The ids of a fan-out's n children (those of index lo..hi-1): the parent's slot up to
    SPREAD_ABOVE children, else spread over the slots."""
    spread = n > SPREAD_ABOVE
    return [child_id(parent_id, position, i, spread) for i in range(lo, n if hi is None else min(hi, n))]


def outcome(d: ChildDoneRow) -> Outcome:
    err = ErrorInfo(d.error_class, d.error_message or "") if d.error_class else None
    return Outcome(d.child_index, d.child_id, d.state, d.result, err)


async def outcomes(tx: Tx, task_id: str, position: int, n: int) -> list[Outcome]:
    """Every recorded child end of the fan-out, by index (a fail_fast's live children absent)."""
    out: list[Outcome] = []
    for lo in range(0, n, DONE_PAGE):
        out.extend(map(outcome, await tx.workflow_child_done_page(task_id, position, lo, DONE_PAGE)))
    return out


async def deliver(mesh: Mesh, shard_id: int, limit: int = DELIVER_BATCH) -> int:
    """One batch of the shard's outbox delivered to the parents' shards; how many rows went.
    The rows stay locked on the child's shard (SKIP LOCKED: a second loop takes others) until
    each parent shard's transaction committed, then they are deleted. A parent shard not
    served here keeps its rows (logged)."""
    shard = mesh.shards.get(shard_id)
    async with shard.conn() as conn, mesh.store.tx(conn) as tx:
        ends = await tx.workflow_outbox_take(limit)
        if not ends:
            return 0
        by_shard: dict[int, list[ChildEnd]] = {}
        for e in ends:
            by_shard.setdefault(mesh.map.shard_for_task(e.parent_id), []).append(e)
        delivered: list[str] = []
        for sid, group in sorted(by_shard.items()):
            parent_shard = mesh.served(sid)
            if parent_shard is None:
                log.warning("fan-out delivery: %d child end(s) for parents on shard %s, not served here: kept",
                            len(group), sid)
                continue
            await record(mesh, parent_shard, group)
            delivered.extend(e.child_id for e in group)
        if delivered:
            await tx.workflow_outbox_delete(delivered)
    return len(delivered)


async def record(mesh: Mesh, shard: Shard, ends: Sequence[ChildEnd]) -> None:
    """On the parent's shard, one transaction: the parents' task rows locked, the ends recorded
    once, the barriers decremented, the fan-outs that fired completed, their parents woken and
    (fail_fast) a cascade opened."""
    async with shard.conn() as conn, mesh.store.tx(conn) as tx:
        # The parents' task rows first, as an event locks its run's: a suspension racing the
        # firing then either commits WAITING before the wake looks (and is woken) or reads the
        # step after it completed (and wakes itself); never a WAITING run nothing wakes.
        await tx.workflow_tasks_lock(sorted({e.parent_id for e in ends}))
        await _lock_barriers(tx, ends)
        fired = await tx.workflow_child_deliver(ends)
        if not fired:
            return
        for parent, position, why, on_failure in fired:
            if why == "failed" and on_failure == "FAIL_FAST":
                await tx.workflow_cascade_open([parent], position)
        woken = await wake(tx, sorted({p for p, *_ in fired}), WOKEN_REASON)
    if woken:
        mesh.publish(shard.id)  # after commit: the woken parents are ready now


async def _lock_barriers(tx: Tx, ends: Sequence[ChildEnd]) -> None:
    """Lock the barrier rows the batch may change before changing them, in one global order
    (every stripe sorted, then every top row sorted), so deliverers racing on one fan-out (two
    shards' loops) queue instead of deadlocking. A top row is taken only where a stripe may
    reach zero (its remaining count at most the batch's ends of it: resent ends are counted
    too, so this errs on the side of locking)."""
    stripes = await tx.workflow_barriers_lock(ends)
    k_of = {(run, pos): k for (run, pos, _), (_, k) in stripes.items()}
    per: dict[tuple[str, int, int], int] = {}
    for e in ends:
        k = k_of.get((e.parent_id, e.position))
        if k is not None:
            key = (e.parent_id, e.position, e.child_index % k)
            per[key] = per.get(key, 0) + 1
    tops = sorted({key[:2] for key, n in per.items() if key in stripes and stripes[key][0] <= n})
    if tops:
        await tx.workflow_barrier_tops_lock(tops)


async def cascade(mesh: Mesh, shard_id: int, limit: int = CASCADE_BATCH) -> int:
    """One batch of each open cascade of the shard: the next children (by index) cancelled on
    their shards, the cursor moved (in the cascade row's transaction, after the cancels
    committed: a crash in between cancels those again, which changes nothing). How many
    cascades advanced."""
    shard = mesh.shards.get(shard_id)
    async with shard.conn() as conn, mesh.store.tx(conn) as tx:
        open_ = await tx.workflow_cascade_take(10)
        for parent, position, cursor, n in open_:
            ids = child_ids(parent, position, n, cursor, cursor + limit)
            by_shard: dict[int, list[str]] = {}
            for c in ids:
                by_shard.setdefault(mesh.map.shard_for_task(c), []).append(c)
            for sid, group in sorted(by_shard.items()):
                await cancel_children(mesh, sid, group)
            await tx.workflow_cascade_advance(parent, position, cursor + len(ids), n)
    return len(open_)


async def cancel_children(mesh: Mesh, shard_id: int, ids: Sequence[str]) -> None:
    """CancelTask's decision for each live child on its shard, in one transaction: ENQUEUED,
    RETRY_WAIT, WAITING -> CANCELED; LEASED -> a cancel request. A child run with open
    fan-outs opens their cascades in the same transaction."""
    shard = mesh.served(shard_id)
    if shard is None:  # the cascade's cursor stays: the next round tries again
        raise ShardUnavailable(shard_id, "fan-out cascade: the children's shard is not served here")
    grace_s = mesh.grace_s
    async with shard.conn() as conn, mesh.store.tx(conn) as tx:
        live = await tx.workflow_children_cancel_lock(ids)
        now = [t for t in (cancel_now(tid, TaskState(st), ep, CASCADE_REASON) for tid, st, ep, _ in live) if t]
        asks = [(tid, ep) for tid, st, ep, asked in live if st == "LEASED" and not asked]
        if now:
            await tx.task_transition_apply(now)
            await tx.workflow_waits_delete_batch([t.task_id for t in now])  # (open in any state)
        if asks:
            await tx.task_cancel_request_batch([a for a, _ in asks], [e for _, e in asks],
                                               [CancelReason.USER.value] * len(asks), grace_s)
            await tx.timer_lease_reschedule_batch([a for a, _ in asks], [e for _, e in asks])
        if live:
            await tx.workflow_cascade_open([tid for tid, *_ in live])
    if asks:  # the lease check now fires by the kill time
        mesh.timer_due(shard_id, grace_s)


@dataclasses.dataclass(frozen=True)
class Created:
    """A children create's answers, and what its commit hints (ready work, the first timer)."""

    results: list[enqueue.CreateOut]
    due: bool
    timer_in_s: float | None


def _links(req: history_pb2.CreateTasksRequest, b: enqueue.Batch) -> list[tuple[str, str, int, int]]:
    """(child, parent, position, index) of every task: all of a children create carry a parent."""
    out = []
    for i, p in enumerate(req.tasks):
        if not p.HasField("parent"):
            raise InvalidArgument(f"tasks[{i}].parent is required: children are created in their own "
                                  "CreateTasks calls, every task with its parent")
        if p.idempotency_key:
            raise InvalidArgument(f"tasks[{i}].idempotency_key must be empty for a child (its minted id "
                                  "dedupes a resend)")
        if p.parent.position < 0 or p.parent.index < 0:
            raise InvalidArgument(f"tasks[{i}].parent.position and .index must be 0 or more")
        parent = convert.task_id(p.parent.parent_id, f"tasks[{i}].parent.parent_id")
        out.append((b.task_ids[i], parent, p.parent.position, p.parent.index))
    return out


async def create_children(conn: asyncpg.Connection, store: Store, req: history_pb2.CreateTasksRequest,
                          window_s: float) -> Created:
    """CreateTasks of a fan-out's children (NewTask.parent set): each task is its own request
    (a resent StartChildren finds some created: those answer as existing, the others are
    created), inserted by the general statement with its parent link and workflow_children
    row in the same transaction. Off the group committer: ordinary enqueues never take this."""
    b = create_request(req).batch
    links = _links(req, b)
    for _ in range(enqueue.MAX_ROUNDS):
        async with store.tx(conn) as tx:
            rows = await tx.task_create(b, list(range(len(links))), window_s)
            if rows is None:
                continue  # raced another writer of these ids: nothing written, the next snapshot sees it
            outs = [enqueue.outcome(b, i, r, f"tasks[{i}].task_id") for i, r in enumerate(rows)]
            bad = next((o for o in outs if isinstance(o, Exception)), None)
            if bad is not None:
                raise bad  # (rolls back: the request is refused whole)
            made = [i for i, r in enumerate(rows) if r.created]
            if made:
                await tx.workflow_children_link([links[i] for i in made])
        results = [o if isinstance(o, enqueue.CreateOut) else enqueue.CreateOut(b.task_ids[i])
                   for i, o in enumerate(outs)]
        created = b.take(made) if made else None
        return Created(results, any(r.due for r in rows),
                       enqueue.first_timer_s(created) if created is not None else None)
    raise Contention(f"children creates were undecided after {enqueue.MAX_ROUNDS} tries (a race with other "
                     "writers of the same ids)")
