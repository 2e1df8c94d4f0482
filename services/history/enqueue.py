"""CreateTasks: insert a batch of tasks in one transaction, honouring
idempotency keys.

Keys are claimed first (INSERT ... ON CONFLICT on the unique key), so 50
concurrent creates with one key serialise on that index entry and exactly
one of them inserts the task; the others read its id. A key reused with a
different request (fingerprint) is a conflict and the whole request is
rolled back. A task id that already exists (the gateway retried a create it
never heard back from) is reported as deduplicated, so the RPC is safe to
retry with the same ids.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from datetime import UTC, datetime

import asyncpg

from ratchet.services.history.errors import Contention, HistoryError, InvalidArgument
from ratchet.services.history.store import Key, NewRow, Store


@dataclasses.dataclass(slots=True)
class NewTaskIn:
    """A validated item of a CreateTasks request (never modified once built)."""

    row: NewRow
    fingerprint: str
    schedule_to_start_s: float | None
    schedule_to_close_s: float | None

    @property
    def key(self) -> Key | None:
        """(tenant_id, app_id, idempotency_key), or None for an unkeyed task."""
        if self.row.idempotency_key is None:
            return None
        return (self.row.tenant_id, self.row.app_id, self.row.idempotency_key)


@dataclasses.dataclass
class CreateOut:
    """The outcome of one item, in request order."""

    task_id: str
    deduplicated: bool = False
    conflict: bool = False


def first_timer_s(items: Sequence[NewTaskIn]) -> float | None:
    """Seconds until the earliest timer these new tasks may set (delay or run_at, schedule_to_start,
    schedule_to_close), None when they set none: the hint for the dispatcher's timer loop. Each
    timeout counts from now, the earliest it can fire (a hint may be early, never late)."""
    best = math.inf
    now = None
    for it in items:
        row = it.row
        for s in (row.delay_s, it.schedule_to_start_s, it.schedule_to_close_s):
            if s is not None and s < best:
                best = s
        if row.run_at is not None:
            now = now or datetime.now(UTC)
            best = min(best, (row.run_at - now).total_seconds())
    return None if best == math.inf else max(0.0, best)


class _RollBack(Exception):
    """Raised inside the transaction to roll back a conflicting request."""


def _representatives(items: Sequence[NewTaskIn]) -> dict[int, int]:
    """Map each item index to the index of the first item with its key (itself if unkeyed)."""
    first: dict[Key, int] = {}
    rep: dict[int, int] = {}
    seen_ids: dict[str, int] = {}
    for i, it in enumerate(items):
        key = it.key
        if key is not None and key in first:
            j = first[key]
            if items[j].fingerprint != it.fingerprint:
                raise InvalidArgument(f"tasks[{j}] and tasks[{i}] use idempotency_key {key[2]!r} for different "
                                      "requests; send one of them")
            rep[i] = j
            continue
        if it.row.task_id in seen_ids:
            raise InvalidArgument(f"tasks[{seen_ids[it.row.task_id]}] and tasks[{i}] have the same task_id")
        seen_ids[it.row.task_id] = i
        if key is not None:
            first[key] = i
        rep[i] = i
    return rep


async def _resolve_keys(conn, store: Store, items: Sequence[NewTaskIn], reps: list[int], window_s: float,
                        out: dict[int, CreateOut]) -> tuple[list[int], bool]:
    """Claim keyed representatives; returns (indexes to insert, any conflict)."""
    keyed = sorted((i for i in reps if items[i].key is not None), key=lambda i: items[i].key)
    if not keyed:
        return [], False
    keys = [items[i].key for i in keyed]
    claimed = await store.idempotency_key_claim_batch(
        conn, keys, [items[i].row.task_id for i in keyed], [items[i].fingerprint for i in keyed], window_s)
    taken = [i for i in keyed if items[i].key not in claimed]
    owners = await store.idempotency_key_get_batch(conn, [items[i].key for i in taken]) if taken else {}
    conflict = False
    for i in taken:
        owner = owners.get(items[i].key)
        if owner is None:
            raise Contention(f"idempotency key {items[i].key[2]!r} changed owner during the request")
        owner_id, fingerprint = owner
        if fingerprint == items[i].fingerprint:
            out[i] = CreateOut(owner_id, deduplicated=True)
        else:
            out[i] = CreateOut(owner_id, conflict=True)
            conflict = True
    return [i for i in keyed if items[i].key in claimed], conflict


async def create_tasks(conn: asyncpg.Connection, store: Store, items: Sequence[NewTaskIn],
                       window_s: float) -> tuple[list[CreateOut], bool]:
    """Insert the tasks atomically; returns (results in request order, any task due now)."""
    rep = _representatives(items)
    reps = sorted(set(rep.values()))
    out: dict[int, CreateOut] = {}
    any_due, conflict = False, False
    try:
        async with conn.transaction():
            to_insert, conflict = await _resolve_keys(conn, store, items, reps, window_s, out)
            if conflict:
                raise _RollBack()
            to_insert += [i for i in reps if items[i].key is None]
            any_due = await _insert(conn, store, items, sorted(to_insert), out)
    except _RollBack:
        pass
    results = []
    for i in range(len(items)):
        r = out.get(i) or CreateOut(items[i].row.task_id)
        if rep[i] != i:
            first = out.get(rep[i]) or CreateOut(items[rep[i]].row.task_id)
            r = CreateOut(first.task_id, deduplicated=True, conflict=first.conflict)
        results.append(r)
    return results, any_due


async def _insert(conn, store: Store, items: Sequence[NewTaskIn], idx: list[int],
                  out: dict[int, CreateOut]) -> bool:
    if not idx:
        return False
    inserted = await store.task_insert_batch(
        conn, [items[i].row for i in idx], [items[i].schedule_to_start_s for i in idx],
        [items[i].schedule_to_close_s for i in idx])
    missing = [items[i].row.task_id for i in idx if items[i].row.task_id not in inserted]
    existing = await store.task_existing_batch(conn, missing) if missing else {}
    for i in idx:
        tid = items[i].row.task_id
        if tid in inserted:
            out[i] = CreateOut(tid)
        elif existing.get(tid) == _owner(items[i]):
            out[i] = CreateOut(tid, deduplicated=True)  # a retried create that had committed
        else:
            raise InvalidArgument(f"tasks[{i}].task_id {tid} is already taken; mint a new id")
    return any(inserted.values())


def _owner(it: NewTaskIn) -> tuple[str, str, str]:
    """What a resent create's existing task must match to be its original: tenant, app, type."""
    return it.row.tenant_id, it.row.app_id, it.row.task_type


class Fallback(Exception):
    """The grouped statement met a case only the per-request path decides
    (a key claimed for a task id that already exists, an expired key, a key
    or id inserted by another request meanwhile); the group's transaction
    was rolled back and each request must run on its own."""


def _group_plan(items: Sequence[NewTaskIn]) -> tuple[list[int], dict[int, int], list[int]]:
    """(indexes sent to the statement, key follower -> its key's leader, indexes that
    must run alone: a task id sent twice in the group)."""
    lead_key: dict[Key, int] = {}
    lead_id: set[str] = set()
    send, follow, alone = [], {}, []
    for i, it in enumerate(items):
        key = it.key
        if key is not None and key in lead_key:
            follow[i] = lead_key[key]
        elif it.row.task_id in lead_id:
            alone.append(i)
        else:
            lead_id.add(it.row.task_id)
            if key is not None:
                lead_key[key] = i
            send.append(i)
    # Keys in one order across concurrent groups (the statement sorts the same way).
    send.sort(key=lambda i: (0, items[i].key) if items[i].key is not None else (1, ("", "", "")))
    return send, follow, alone


async def create_group(conn: asyncpg.Connection, store: Store, items: Sequence[NewTaskIn],
                       window_s: float) -> tuple[list[CreateOut | HistoryError | None], bool]:
    """Create single-task requests of different callers in one statement (one transaction).

    Returns (one outcome per item, any task due now). An outcome is a CreateOut, an error for
    that caller alone, or None: that item must run through create_tasks on its own. Raises
    Fallback (nothing written) when the whole group must. One item's key conflict writes
    nothing for that item and does not touch the others: each request holds one task.
    """
    if await _create_alike(conn, store, items):  # (False, an id exists: the statement below answers it)
        return [CreateOut(it.row.task_id) for it in items], True
    send, follow, alone = _group_plan(items)
    out: list[CreateOut | HistoryError | None] = [None] * len(items)
    rows = [items[i] for i in send]
    try:
        got = await store.task_create_batch(conn, [r.row for r in rows], [r.schedule_to_start_s for r in rows],
                                            [r.schedule_to_close_s for r in rows],
                                            [r.fingerprint if r.key is not None else None for r in rows], window_s)
    except asyncpg.InvalidTextRepresentationError as e:
        _fallback_if_aborted(e)
        raise
    except asyncpg.UniqueViolationError:
        raise Fallback() from None  # a key or id another request inserted meanwhile: nothing written
    # Committed. What is left are reads, each in its own snapshot (which sees a key's committed owner).
    taken = [i for i in send if items[i].key is not None and not got[items[i].row.task_id][2]]
    owners = await store.idempotency_key_get_batch(conn, [items[i].key for i in taken]) if taken else {}
    lost = [items[i].row.task_id for i in send if items[i].key is None and not got[items[i].row.task_id][0]]
    existing = await store.task_existing_batch(conn, lost) if lost else {}
    for i in send:
        it = items[i]
        inserted = got[it.row.task_id][0]
        if it.key is None:
            if inserted:
                out[i] = CreateOut(it.row.task_id)
            elif existing.get(it.row.task_id) == _owner(it):
                out[i] = CreateOut(it.row.task_id, deduplicated=True)  # a retried create that had committed
            else:
                out[i] = InvalidArgument(f"tasks[0].task_id {it.row.task_id} is already taken; mint a new id")
        else:
            out[i] = _keyed_outcome(it, inserted, owners)
    for i, lead in follow.items():
        owner = _owner_of(items[lead], out[lead], owners)
        out[i] = _keyed_outcome(items[i], False, {items[i].key: owner} if owner else {})
    for i in alone:
        out[i] = None
    return out, any(due for inserted, due, _ in got.values() if inserted)


# The row fields task_create_plain takes once for every row: a group whose rows all share them
# (and set no key, delay, run_at or schedule) is plain.
_ALIKE = ("tenant_id", "app_id", "task_type", "queue", "max_attempts", "retry_policy", "timeouts",
          "non_retryable", "retry_rules")


def _alike(items: Sequence[NewTaskIn]) -> bool:
    """Whether every item is a plain task sharing every value but its id and payload with the
    first (values compared by identity first: one policy's dicts are one object, convert.py)."""
    first = items[0]
    r0 = first.row
    for it in items:
        r = it.row
        if (r.idempotency_key is not None or r.delay_s is not None or r.run_at is not None
                or r.schedule_id is not None or r.scheduled_time is not None):
            return False
        if it is first:
            continue
        if (it.schedule_to_start_s != first.schedule_to_start_s
                or it.schedule_to_close_s != first.schedule_to_close_s):
            return False
        for name in _ALIKE:
            a, b = getattr(r, name), getattr(r0, name)
            if a is not b and a != b:
                return False
    return True


async def _create_alike(conn: asyncpg.Connection, store: Store, items: Sequence[NewTaskIn]) -> bool | None:
    """Plain tasks alike (_alike) inserted by task_create_plain, whose statement is a fraction
    of task_create_batch's (one row: ~220 against ~450 us of backend CPU, most of it executor
    start-up for the key-claiming statement's ~30 nodes): True once inserted; None (nothing
    tried) when they are not alike; False (nothing written) when an id exists or repeats (a
    retried create), which task_create_batch or create_tasks then answers per row."""
    if not _alike(items):
        return None
    r0, first = items[0].row, items[0]
    try:
        await store.task_create_plain(conn, [it.row.task_id for it in items], [it.row.payload for it in items],
                                      r0.tenant_id, r0.app_id, r0.task_type, r0.queue, r0.max_attempts,
                                      r0.retry_policy, r0.timeouts, r0.non_retryable, r0.retry_rules,
                                      first.schedule_to_start_s, first.schedule_to_close_s)
    except asyncpg.UniqueViolationError:
        return False
    return True


async def create_plain(conn: asyncpg.Connection, store: Store, plain) -> None:
    """A request of plain tasks (convert.PlainIn) in one statement, all or nothing; Fallback
    (nothing written) when an id exists: create_tasks then answers each task."""
    pol = plain.policy
    try:
        await store.task_create_plain(conn, plain.task_ids, plain.payloads, plain.tenant_id, plain.app_id,
                                      plain.task_type, plain.queue, pol.max_attempts, pol.retry_json,
                                      pol.timeouts_json, pol.non_retryable, pol.rules_json,
                                      pol.schedule_to_start_s, pol.schedule_to_close_s)
    except asyncpg.UniqueViolationError:
        raise Fallback() from None


def _owner_of(lead: NewTaskIn, outcome, owners: dict) -> tuple[str, str] | None:
    """(task id, fingerprint) now holding the leader's key."""
    if isinstance(outcome, CreateOut) and not outcome.deduplicated and not outcome.conflict:
        return lead.row.task_id, lead.fingerprint
    return owners.get(lead.key)


def _keyed_outcome(it: NewTaskIn, inserted: bool, owners: dict) -> CreateOut | HistoryError:
    if inserted:
        return CreateOut(it.row.task_id)
    owner = owners.get(it.key)
    if owner is None:
        return Contention(f"idempotency key {it.key[2]!r} changed owner during the request")
    owner_id, fingerprint = owner
    if fingerprint == it.fingerprint:
        return CreateOut(owner_id, deduplicated=True)
    return CreateOut(owner_id, conflict=True)


def _fallback_if_aborted(e: asyncpg.InvalidTextRepresentationError) -> None:
    if "task_create_batch:" in str(e):
        raise Fallback() from None  # the statement aborted itself: nothing was written


async def create_all(conn: asyncpg.Connection, store: Store, items: Sequence[NewTaskIn],
                     window_s: float) -> tuple[list[CreateOut], bool]:
    """One request of several tasks in one statement, all or nothing: every task is new and
    every key is claimed, else nothing is written and Fallback is raised (the caller runs
    create_tasks, which answers keys held by other tasks and retried ids exactly)."""
    alike = await _create_alike(conn, store, items)
    if alike:
        return [CreateOut(it.row.task_id) for it in items], True
    if alike is False:
        raise Fallback()  # an id exists or repeats: nothing written
    rep = _representatives(items)
    send, _follow, _alone = _group_plan([items[i] for i in sorted(set(rep.values()))])
    reps = sorted(set(rep.values()))
    rows = [items[reps[j]] for j in send]
    try:
        got = await store.task_create_batch(conn, [r.row for r in rows], [r.schedule_to_start_s for r in rows],
                                            [r.schedule_to_close_s for r in rows],
                                            [r.fingerprint if r.key is not None else None for r in rows], window_s,
                                            strict=True)
    except asyncpg.InvalidTextRepresentationError as e:
        _fallback_if_aborted(e)
        raise
    except asyncpg.UniqueViolationError:
        raise Fallback() from None  # a key or id another request inserted meanwhile: nothing written
    results = [CreateOut(items[rep[i]].row.task_id, deduplicated=rep[i] != i) for i in range(len(items))]
    return results, any(due for inserted, due, _ in got.values() if inserted)
