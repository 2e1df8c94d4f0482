"""CreateTasks, decided without I/O: the one form of a create request (`Batch`), the planner
that chooses how a batch is written (`plan`), and the answers decided from the rows the
create statement returns (`outcome`, `Request.settle`). commit.py runs what is decided here.

A request is all or nothing: its tasks are created together or none is. A task id that
exists is its own create resent (the same tenant, app and type: `deduplicated`) or someone
else's (INVALID_ARGUMENT). A live key is the same request (same fingerprint: its task,
`deduplicated`) or a conflict (the whole request writes nothing and says so per task). The
statement reports per row what it found; nothing here reads an error's text.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ratchet.libs.rpc.errors import ServiceError
from ratchet.services.history.errors import Contention, InvalidArgument

# The fewest uniform rows written by COPY (a batch call's part for a shard: 100 rows a slot run);
# fewer go by the statement, where COPY's fixed cost (asyncpg's copy-in, a second round trip)
# outweighs what Postgres saves (docs/benchmarks/findings.md: COPY).
COPY_MIN_ROWS = 50
# What a task weighs in a group commit at least, against its bound on payload bytes (commit.py):
# 8 MiB of payload or 5,000 tasks, whichever comes first.
ROW_BYTES = (8 << 20) // 5000
# Statements one group of requests may take before its undecided requests give up (Contention:
# the caller retries). A round decides every row but those that met a race, an expired key or
# a request held back by another row of its own: in practice one or two rounds.
MAX_ROUNDS = 6


@dataclasses.dataclass(frozen=True)
class Policy:
    """A task's validated retry policy, timeouts and non-retryable classes, as stored. Shared by
    every task sent with the same three (the values are never mutated)."""

    max_attempts: int
    retry_json: dict
    timeouts_json: dict
    non_retryable: list[str]
    rules_json: dict | None
    schedule_to_start_s: float | None
    schedule_to_close_s: float | None


# The columns of a Batch besides the ids and payloads, in the statement's order of arguments.
COLUMNS = ("tenant_id", "app_id", "task_type", "queue", "policy", "delay_s", "run_at", "key", "fingerprint",
           "schedule_id", "scheduled_time")


@dataclasses.dataclass(slots=True)
class Batch:
    """Tasks to create, validated, as columns in request order. Each column holds one value per
    task, or one value every task shares (a list of one)."""

    task_ids: list[str]  # canonical, unique in the batch
    payloads: list[bytes]  # JSON text
    tenant_id: list[str]
    app_id: list[str]
    task_type: list[str]
    queue: list[str]
    policy: list[Policy]
    delay_s: list[float | None]
    run_at: list[datetime | None]
    key: list[str | None]
    fingerprint: list[str | None]
    schedule_id: list[str | None]
    scheduled_time: list[datetime | None]
    is_uniform: bool | None = dataclasses.field(default=None, repr=False, compare=False)  # uniform(), once known

    def __len__(self) -> int:
        return len(self.task_ids)

    def at(self, name: str, i: int) -> Any:
        """Task i's value of a column."""
        column = getattr(self, name)
        return column[i] if len(column) > 1 else column[0]

    def take(self, idx: Sequence[int]) -> Batch:
        """The tasks at idx, in that order (shared columns stay shared)."""
        def cut(column: list) -> list:
            return column if len(column) == 1 else [column[i] for i in idx]
        return Batch(task_ids=[self.task_ids[i] for i in idx], payloads=[self.payloads[i] for i in idx],
                     **{name: cut(getattr(self, name)) for name in COLUMNS})


def _unset(column: list) -> bool:
    """Whether no task sets this column (None shared by all: what convert and merge make of it)."""
    return len(column) == 1 and column[0] is None


def merge(batches: Sequence[Batch]) -> Batch:
    """Several batches as one, in order: a column every one of them shares with one value stays
    shared, any other is spelled per task. (Loops, not comprehensions: this runs per group commit.)"""
    if len(batches) == 1:
        return batches[0]
    first, rest = batches[0], batches[1:]
    cols: dict[str, list] = {}
    for name in COLUMNS:
        column = getattr(first, name)
        if len(column) == 1:
            v0 = column[0]
            for b in rest:
                other = getattr(b, name)
                if len(other) != 1 or (other[0] is not v0 and other[0] != v0):
                    break
            else:
                cols[name] = column  # (one policy's tasks hold one object: convert.py)
                continue
        out: list = []
        for b in batches:
            c = getattr(b, name)
            out.extend(c if len(c) > 1 else c * len(b.task_ids))
        cols[name] = out
    ids: list[str] = []
    payloads: list[bytes] = []
    for b in batches:
        ids.extend(b.task_ids)
        payloads.extend(b.payloads)
    return Batch(task_ids=ids, payloads=payloads, **cols)


class Writer(enum.Enum):
    """How a batch is written (one statement, one transaction, whichever)."""

    COPY = "copy"  # uniform, no timer rows, COPY_MIN_ROWS or more: a binary COPY (Tx.task_copy_uniform)
    UNIFORM = "uniform"  # uniform: task_create_uniform, every value but id and payload once
    GENERAL = "general"  # anything else: task_create (keys, per-task values, due times), per row answers


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    writer: Writer
    keyed: bool  # some task has an idempotency key (only task_create claims keys)
    timers: bool  # some task writes a timer row (a delay or run_at, a schedule-to-start or -close)


def uniform(b: Batch) -> bool:
    """Whether every task shares every value but its id and payload, and sets no key, due time
    or schedule: what the uniform statement and the COPY write."""
    if b.is_uniform is None:
        b.is_uniform = _uniform(b)
    return b.is_uniform


def _uniform(b: Batch) -> bool:
    return (len(b.tenant_id) == 1 and len(b.app_id) == 1 and len(b.task_type) == 1 and len(b.queue) == 1
            and len(b.policy) == 1 and _unset(b.delay_s) and _unset(b.run_at) and _unset(b.key)
            and _unset(b.schedule_id) and _unset(b.scheduled_time))


def plan(b: Batch, probe: bool = False) -> Plan:
    """The plan for a batch. probe: an id may exist (a uniform write was refused: an id was
    taken), so the general statement, which looks before it writes, answers it per row."""
    keyed = not _unset(b.key) and any(k is not None for k in b.key)
    timers = ((not _unset(b.delay_s) and any(d is not None for d in b.delay_s))
              or (not _unset(b.run_at) and any(r is not None for r in b.run_at))
              or any(p.schedule_to_start_s is not None or p.schedule_to_close_s is not None for p in b.policy))
    if probe or not uniform(b):
        return Plan(Writer.GENERAL, keyed, timers)
    if timers or len(b.task_ids) < COPY_MIN_ROWS:
        return Plan(Writer.UNIFORM, keyed, timers)
    return Plan(Writer.COPY, keyed, timers)


def lane(b: Batch) -> tuple:
    """Which requests may share a statement: uniform ones sharing every value (the uniform statement
    takes them once), any others together (the general statement takes them per row). The
    policy by identity: equal policies are one object (convert.py's cache)."""
    if uniform(b):
        return ("uniform", b.tenant_id[0], b.app_id[0], b.task_type[0], b.queue[0], id(b.policy[0]))
    return ("general",)


def first_timer_s(b: Batch) -> float | None:
    """Seconds until the earliest timer these tasks may set (delay or run_at, schedule-to-start,
    schedule-to-close), None when they set none: the hint for the dispatcher's timer loop. Each
    timeout counts from now, the earliest it can fire (a hint may be early, never late)."""
    best = math.inf
    for s in b.delay_s:
        if s is not None and s < best:
            best = s
    for p in b.policy:
        for s in (p.schedule_to_start_s, p.schedule_to_close_s):
            if s is not None and s < best:
                best = s
    if any(r is not None for r in b.run_at):
        now = datetime.now(UTC)
        best = min([best] + [(r - now).total_seconds() for r in b.run_at if r is not None])
    return None if best == math.inf else max(0.0, best)


@dataclasses.dataclass(frozen=True, slots=True)
class CreateOut:
    """The answer for one task, in request order."""

    task_id: str
    deduplicated: bool = False
    conflict: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """What task_create says of one task it was sent: written, or what it found instead."""

    created: bool
    due: bool = False  # created and due now
    id_owner: tuple[str, str, str] | None = None  # (tenant, app, type) of a task that has this id
    key_task: str | None = None  # the task a key row with this key's digest names
    key_fingerprint: str | None = None
    key_expired: bool = False
    key_other: bool = False  # that key row is another key with the same digest (odds 2^-128)


class Wait(enum.Enum):
    """Why a task has no answer yet: what must happen before it goes again."""

    HELD = "held"  # new, but another task of its request was not: nothing of the request was written
    EXPIRED = "expired"  # its key's row is past its window: delete it (taken over), then again


Outcome = CreateOut | ServiceError | Wait


def outcome(b: Batch, i: int, row: Row, where: str = "tasks[0].task_id") -> Outcome:
    """Task i's answer from what the statement found (where: its task id's field, for messages)."""
    if row.created:
        return CreateOut(b.task_ids[i])
    if row.key_task is not None:
        if row.key_other:
            return Contention(f"idempotency key {b.at('key', i)!r} shares its digest with another key; "
                              f"use another key")
        if row.key_expired:
            return Wait.EXPIRED
        if row.key_fingerprint == b.at("fingerprint", i):
            return CreateOut(row.key_task, deduplicated=True)
        return CreateOut(row.key_task, conflict=True)
    if row.id_owner is not None:
        if row.id_owner == (b.at("tenant_id", i), b.at("app_id", i), b.at("task_type", i)):
            return CreateOut(b.task_ids[i], deduplicated=True)  # its create resent, committed before
        return InvalidArgument(f"{where} {b.task_ids[i]} is already taken; mint a new id")
    return Wait.HELD


def own_leaders(b: Batch) -> list[int] | None:
    """Each task's leader in its own request: the first task with its key (None: every task
    leads itself). One key twice is one task when both are the same request (same
    fingerprint), else INVALID_ARGUMENT; one task id twice is INVALID_ARGUMENT. Nothing is
    written either way."""
    n = len(b.task_ids)
    keyed = not _unset(b.key) and any(k is not None for k in b.key)
    if n == 1 or (not keyed and len(set(b.task_ids)) == n):  # (the usual request: a C-level check)
        return None
    lead: list[int] = list(range(n))
    first: dict[tuple, int] = {}
    seen: dict[str, int] = {}
    for i, tid in enumerate(b.task_ids):
        key = b.at("key", i) if keyed else None
        if key is not None:
            k = (b.at("tenant_id", i), b.at("app_id", i), key)
            j = first.get(k)
            if j is not None:
                if b.at("fingerprint", j) != b.at("fingerprint", i):
                    raise InvalidArgument(f"tasks[{j}] and tasks[{i}] use idempotency_key {key!r} for different "
                                          "requests; send one of them")
                lead[i] = j
                continue
            first[k] = i
        if tid in seen:
            raise InvalidArgument(f"tasks[{seen[tid]}] and tasks[{i}] have the same task_id")
        seen[tid] = i
    return lead if lead != list(range(n)) else None


class Request:
    """One CreateTasks request on its way through the committer: its tasks, the answers decided
    so far, and the tasks still to write (all of them, or none, are written in one round)."""

    def __init__(self, batch: Batch, columns: bool = False):
        self.batch = batch
        self.columns = columns  # sent as CreateTasksRequest.columns: answered all_created when it may
        # None: no task repeats another's key (columns: convert checked the ids, and have no keys)
        self.lead = None if columns else own_leaders(batch)
        self.answers: dict[int, CreateOut] = {}  # task index -> its answer, once decided
        self.error: BaseException | None = None  # a ServiceError, or what the shard raised
        n = len(batch.task_ids)
        self.todo: Sequence[int] = range(n) if self.lead is None else [i for i, j in enumerate(self.lead) if i == j]
        self.expired: list[tuple[str, str, str]] = []  # keys to expire before the next round
        self.probe = False  # a uniform write found an id taken: the general statement answers per row
        self.created: Batch | None = None  # the tasks created now, once written
        self.due = False  # some of them are due now (the ready event)
        self.new: Sequence[int] = ()  # tasks a uniform write created (answered as new, when asked)
        self._size: int | None = None

    @property
    def size(self) -> int:
        """What the request weighs in a group commit (only queued requests are weighed)."""
        if self._size is None:
            self._size = max(len(self.batch.task_ids) * ROW_BYTES, sum(map(len, self.batch.payloads)))
        return self._size

    @property
    def done(self) -> bool:
        return self.error is not None or not self.todo

    def pending(self) -> Batch:
        """The tasks still to write."""
        return self.batch if len(self.todo) == len(self.batch.task_ids) else self.batch.take(self.todo)

    def written(self) -> None:
        """Every pending task was created now, due now (a uniform write answers for all at once:
        their answers are made only if asked for, `results`)."""
        self.created = self.pending()
        self.due = True
        self.new = self.todo
        self.todo = []

    def _where(self, i: int) -> str:
        return f"columns.task_ids[{i}]" if self.columns else f"tasks[{i}].task_id"

    def settle_rows(self, rows: Sequence[Row]) -> None:
        """The pending tasks' rows from task_create, in order."""
        b = self.pending()
        self.due = self.due or any(r.due for r in rows)
        self.settle([outcome(b, k, row, self._where(i)) for k, (i, row) in enumerate(zip(self.todo, rows,
                                                                                        strict=True))])

    def settle(self, outs: Sequence[Outcome]) -> None:
        """The pending tasks' outcomes from one round, in order."""
        errors = [o for o in outs if isinstance(o, ServiceError)]
        contention = [e for e in errors if isinstance(e, Contention)]
        if contention:
            self.error = contention[0]
            return
        if any(isinstance(o, CreateOut) and o.conflict for o in outs):
            for i, o in zip(self.todo, outs, strict=True):  # nothing of it was written, and never will be
                self.answers[i] = o if isinstance(o, CreateOut) and o.conflict else CreateOut(self.batch.task_ids[i])
            self.todo = []
            return
        if errors:
            self.error = errors[0]
            return
        if any(isinstance(o, CreateOut) and not o.deduplicated for o in outs):
            self.created = self.pending()  # (a request is written whole: every pending task)
        left = []
        for i, o in zip(self.todo, outs, strict=True):
            if isinstance(o, CreateOut):
                self.answers[i] = o
            else:
                left.append(i)
                if o is Wait.EXPIRED:
                    self.expired.append((self.batch.at("tenant_id", i), self.batch.at("app_id", i),
                                         self.batch.at("key", i)))
        self.todo = left

    def fail(self, error: BaseException) -> None:
        self.error = error

    def results(self) -> list[CreateOut] | None:
        """Every task's answer in request order (a repeated key answered from its first), or
        None: a request of columns whose tasks were all created now under their ids."""
        if self.error is not None:
            raise self.error
        if self.new and len(self.new) == len(self.batch) and self.columns:
            return None  # (a uniform write of the whole request: no answer per task to make)
        ids = self.batch.task_ids
        for i in self.new:
            self.answers[i] = CreateOut(ids[i])
        self.new = ()
        out: list[CreateOut] = []
        for i, j in enumerate(self.lead or range(len(ids))):
            a = self.answers[j]  # (every task is answered once the request is done)
            out.append(a if i == j else CreateOut(a.task_id, deduplicated=True, conflict=a.conflict))
        if self.columns and not any(a.deduplicated or a.conflict for a in out):
            return None
        return out


@dataclasses.dataclass(slots=True)
class Round:
    """The requests of one statement, those answered from another's task, and those that wait."""

    members: list[Request]
    followers: list[tuple[Request, Request, int]]  # (single-task request, the member, its task's index there)
    later: list[Request]


def _keys(b: Batch) -> list[tuple[tuple[str, str, str], int]]:
    """((tenant, app, key), index) of each keyed task."""
    if _unset(b.key) or all(k is None for k in b.key):
        return []
    return [((b.at("tenant_id", i), b.at("app_id", i), k), i)
            for i, k in enumerate(b.key if len(b.key) > 1 else b.key * len(b)) if k is not None]


def _holder(members: list[Request], task_id: str) -> tuple[Request, int]:
    for m in members:
        ids = m.pending().task_ids
        if task_id in ids:
            return m, ids.index(task_id)
    raise AssertionError(f"no member holds {task_id}")


def compose(requests: Sequence[Request]) -> Round:
    """A round's requests in order: one id and one key once per statement (a second would
    refuse the whole statement). A single task whose key, or id without a key, is already in
    the round is answered from that task's outcome; any other request that repeats one waits
    for the next round. The ids are compared as sets (C), keys one by one."""
    live = [r for r in requests if not r.done]
    out = Round([], [], [])
    if len(live) == 1 or all(uniform(r.batch) and not r.probe for r in live):
        # (uniform tasks have no keys, and an id sent twice makes the uniform write refuse, nothing
        # written: the requests go again probed, and then their ids are compared here)
        out.members.extend(live)
        return out
    ids: set[str] = set()
    keys: dict[tuple, tuple[Request, int]] = {}
    for r in live:
        b = r.pending()
        rk = _keys(b)
        if len(b) == 1:
            lead = keys.get(rk[0][0]) if rk else (_holder(out.members, b.task_ids[0]) if b.task_ids[0] in ids
                                                  else None)
            if lead is not None:
                out.followers.append((r, *lead))
                continue
        if not ids.isdisjoint(b.task_ids) or any(k in keys for k, _ in rk):
            out.later.append(r)
            continue
        ids.update(b.task_ids)
        for k, i in rk:
            keys[k] = (r, i)
        out.members.append(r)
    return out


def follow(f: Request, lead: Batch, j: int, row: Row | None) -> None:
    """A single-task request answered from the task j of the round (its key's, or its id's):
    the owner that task's row names, or the task itself if it was created. With neither (the
    task waits too), the follower goes again in the next round."""
    b = f.batch
    if b.at("key", 0) is not None:
        if row is not None and row.created:
            owner = (lead.task_ids[j], lead.at("fingerprint", j))
        elif row is not None and row.key_task is not None and not (row.key_expired or row.key_other):
            owner = (row.key_task, row.key_fingerprint)
        else:
            return
        f.settle([CreateOut(owner[0], deduplicated=True) if owner[1] == b.at("fingerprint", 0)
                  else CreateOut(owner[0], conflict=True)])
        return
    if row is not None and row.created:
        ident = (lead.at("tenant_id", j), lead.at("app_id", j), lead.at("task_type", j))
    elif row is not None and row.id_owner is not None:
        ident = row.id_owner
    else:
        return
    f.settle([outcome(b, 0, Row(created=False, id_owner=ident), f._where(0))])
