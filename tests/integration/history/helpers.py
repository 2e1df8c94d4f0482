"""Helpers for the history integration tests: a client wrapper over real
gRPC, direct SQL for assertions, waits with deadlines, and the transition
log checker."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

import asyncpg
import grpc

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.internal.history.v1 import history_pb2_grpc as hg
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.libs import taskstate
from ratchet.libs.shardmap import new_task_id
from ratchet.services.history.policy import duration
from ratchet.services.history.server import HistoryServer
from ratchet.services.history.timers.firing import FireOut

RPC_TIMEOUT = 10.0
_names = itertools.count()


def unique(prefix: str) -> str:
    """A name no other test uses (tenants and apps isolate tests sharing a server)."""
    return f"{prefix}-{next(_names)}-{time.monotonic_ns() % 1_000_000}"


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0, every: float = 0.05) -> None:
    """Poll `check` until it is true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(every)


class Hist:
    """A client of a history server at `address` (and the server, when in-process)."""

    def __init__(self, address: str, dsns: dict[int, str], server: HistoryServer | None = None):
        self.server = server
        self.dsns = dsns
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = hg.HistoryServiceStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()

    # -- building requests ------------------------------------------------------
    @staticmethod
    def task(tenant: str, app: str = "app", *, payload: bytes = b'{"n":1}', max_attempts: int | None = None,
             base_s: float | None = None, jitter: bool | None = None, **kw) -> h.NewTask:
        kw.setdefault("task_type", "work")
        t = h.NewTask(task_id=new_task_id(), tenant_id=tenant, app_id=app, payload_json=payload, **kw)
        if max_attempts is not None:
            t.retry.max_attempts = max_attempts
        if base_s is not None:
            t.retry.base.CopyFrom(duration(base_s))
        if jitter is not None:
            t.retry.jitter = jitter
        return t

    # -- RPCs ---------------------------------------------------------------------
    async def create(self, *tasks: h.NewTask, shard: int = 1) -> h.CreateTasksResponse:
        return await self.stub.CreateTasks(h.CreateTasksRequest(shard_id=shard, tasks=tasks), timeout=RPC_TIMEOUT)

    async def create_one(self, tenant: str, app: str = "app", shard: int = 1, **kw) -> str:
        r = await self.create(self.task(tenant, app, **kw), shard=shard)
        return r.results[0].task_id

    async def lease(self, app: str | None = None, *, shard: int = 1, max_tasks: int = 10, cursor: str = "",
                    worker: str = "w1", lease_s: float | None = None) -> h.LeaseTasksResponse:
        req = h.LeaseTasksRequest(shard_id=shard, worker_id=worker, max_tasks=max_tasks,
                                  app_ids=[app] if app else [], tenant_cursor=cursor)
        if lease_s is not None:
            req.lease_duration.CopyFrom(duration(lease_s))
        return await self.stub.LeaseTasks(req, timeout=RPC_TIMEOUT)

    async def lease_one(self, app: str, **kw) -> wpb.LeasedTask:
        r = await self.lease(app, max_tasks=1, **kw)
        assert len(r.tasks) == 1, r
        return r.tasks[0]

    async def heartbeat(self, *leases: tuple[str, int], shard: int = 1,
                        lease_s: float | None = None) -> list[wpb.HeartbeatResult]:
        req = h.RecordHeartbeatsRequest(shard_id=shard, leases=[wpb.LeaseRef(shard_id=shard, task_id=t, lease_epoch=e)
                                                                 for t, e in leases])
        if lease_s is not None:
            req.lease_duration.CopyFrom(duration(lease_s))
        return list((await self.stub.RecordHeartbeats(req, timeout=RPC_TIMEOUT)).results)

    async def complete(self, *completions: wpb.Completion, shard: int = 1) -> list[wpb.CompletionResult]:
        r = await self.stub.CompleteTasks(h.CompleteTasksRequest(shard_id=shard, completions=completions),
                                          timeout=RPC_TIMEOUT)
        return list(r.results)

    async def complete_one(self, leased: wpb.LeasedTask, outcome: str = "SUCCEEDED", *, epoch: int | None = None,
                           **kw) -> wpb.CompletionResult:
        c = wpb.Completion(shard_id=leased.shard_id, task_id=leased.task_id,
                         lease_epoch=leased.lease_epoch if epoch is None else epoch,
                         outcome=wpb.CompletionOutcome.Value(f"COMPLETION_OUTCOME_{outcome}"), **kw)
        (r,) = await self.complete(c, shard=leased.shard_id)
        return r

    async def get(self, task_id: str, tenant: str, shard: int = 1) -> tasks_pb2.Task:
        r = await self.stub.GetTask(h.GetTaskRequest(shard_id=shard, task_id=task_id, tenant_id=tenant),
                                    timeout=RPC_TIMEOUT)
        return r.task

    async def state(self, task_id: str, tenant: str, shard: int = 1) -> str:
        return tasks_pb2.TaskState.Name((await self.get(task_id, tenant, shard)).state).removeprefix("TASK_STATE_")

    async def cancel(self, task_id: str, tenant: str, shard: int = 1) -> h.CancelTaskResponse:
        return await self.stub.CancelTask(h.CancelTaskRequest(shard_id=shard, task_id=task_id, tenant_id=tenant),
                                          timeout=RPC_TIMEOUT)

    async def fire(self, shard: int = 1) -> FireOut:
        """One firing of the shard's timers, as the server's timer loop does (in-process: history
        fires its own timers, no RPC asks it to)."""
        assert self.server is not None, "firing by hand needs the server in-process"
        return await self.server.timers.fire(self.server.shards.get(shard))

    async def fire_until_state(self, task_id: str, tenant: str, want: str, shard: int = 1,
                               timeout: float = 5.0) -> tasks_pb2.Task:
        """Wait until the task reaches `want`, firing its shard's timers meanwhile (the timer loop
        fires them too; a server without one fires only here)."""
        async def reached() -> bool:
            await self.fire(shard)
            return await self.state(task_id, tenant, shard) == want
        await eventually(reached, timeout)
        return await self.get(task_id, tenant, shard)

    async def list_page(self, tenant: str, app: str, shard: int = 1, cursor: str = "", page_size: int = 0,
                        **filter_kw) -> h.ListTasksResponse:
        req = h.ListTasksRequest(shard_id=shard, tenant_id=tenant, app_id=app, page_size=page_size, cursor=cursor,
                                 filter=tasks_pb2.TaskFilter(**filter_kw))
        return await self.stub.ListTasks(req, timeout=RPC_TIMEOUT)

    async def count(self, tenant: str, app: str, shard: int = 1, **filter_kw) -> int:
        req = h.CountTasksRequest(shard_id=shard, tenant_id=tenant, app_id=app,
                                  filter=tasks_pb2.TaskFilter(**filter_kw))
        return (await self.stub.CountTasks(req, timeout=RPC_TIMEOUT)).count

    async def start_bulk(self, op_id: str, tenant: str, app: str, kind: str = "RETRY", shard: int = 1,
                         registered: tuple[str, ...] = (), **filter_kw) -> tasks_pb2.BulkOperation:
        req = h.StartBulkOperationRequest(
            shard_id=shard, operation_id=op_id, tenant_id=tenant, app_id=app,
            kind=tasks_pb2.BulkOperationKind.Value(f"BULK_OPERATION_KIND_{kind}"),
            filter=tasks_pb2.TaskFilter(**filter_kw), registered_task_types=registered)
        return (await self.stub.StartBulkOperation(req, timeout=RPC_TIMEOUT)).operation

    async def get_bulk(self, op_id: str, tenant: str, shard: int = 1) -> tasks_pb2.BulkOperation:
        req = h.GetBulkOperationRequest(shard_id=shard, operation_id=op_id, tenant_id=tenant)
        return (await self.stub.GetBulkOperation(req, timeout=RPC_TIMEOUT)).operation

    async def cancel_bulk(self, op_id: str, tenant: str, shard: int = 1) -> tasks_pb2.BulkOperation:
        req = h.CancelBulkOperationRequest(shard_id=shard, operation_id=op_id, tenant_id=tenant)
        return (await self.stub.CancelBulkOperation(req, timeout=RPC_TIMEOUT)).operation

    async def bulk_done(self, op_id: str, tenant: str, shard: int = 1,
                        timeout: float = 10.0) -> tasks_pb2.BulkOperation:
        """Wait until the operation part is no longer RUNNING."""
        async def finished() -> bool:
            op = await self.get_bulk(op_id, tenant, shard)
            return op.state != tasks_pb2.BULK_OPERATION_STATE_RUNNING
        await eventually(finished, timeout)
        return await self.get_bulk(op_id, tenant, shard)

    # -- direct SQL -------------------------------------------------------------
    async def sql(self, shard: int, query: str, *args) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(self.dsns[shard], timeout=10)
        try:
            return await conn.fetch(query, *args, timeout=10)
        finally:
            await conn.close()

    async def snapshot(self, task_id: str, shard: int = 1) -> tuple:
        """Everything one task owns in the database, to prove an operation changed nothing."""
        q = {
            "task": "SELECT * FROM tasks WHERE task_id = $1::uuid",
            "attempts": "SELECT * FROM task_attempts WHERE task_id = $1::uuid ORDER BY attempt",
            "log": "SELECT * FROM task_transitions WHERE task_id = $1::uuid ORDER BY version",
            "timers": "SELECT * FROM timers WHERE task_id = $1::uuid ORDER BY kind",
        }
        out = []
        for sql in q.values():
            out.append([tuple(r.items()) for r in await self.sql(shard, sql, task_id)])
        return tuple(out)

    async def log(self, task_id: str, shard: int = 1) -> list[tuple]:
        rows = await self.sql(shard, "SELECT version, from_state, to_state, lease_epoch FROM task_transitions "
                                     "WHERE task_id = $1::uuid ORDER BY version", task_id)
        return [tuple(r) for r in rows]

    async def timers(self, task_id: str, shard: int = 1) -> dict[str, asyncpg.Record]:
        rows = await self.sql(shard, "SELECT * FROM timers WHERE task_id = $1::uuid", task_id)
        return {r["kind"]: r for r in rows}


LOG_VIOLATIONS = """
WITH l AS (
    SELECT tr.*, row_number() OVER w AS rn, lag(to_state) OVER w AS prev_to, lag(lease_epoch) OVER w AS prev_epoch
      FROM task_transitions tr WINDOW w AS (PARTITION BY task_id ORDER BY version)
), last AS (
    SELECT DISTINCT ON (task_id) task_id, version, to_state, lease_epoch
      FROM task_transitions ORDER BY task_id, version DESC
)
SELECT task_id, 'version gap' AS problem FROM l WHERE version <> rn
UNION ALL SELECT task_id, 'from_state does not chain' FROM l WHERE from_state IS DISTINCT FROM prev_to
UNION ALL SELECT task_id, 'lease epoch went down' FROM l WHERE lease_epoch < prev_epoch
UNION ALL SELECT task_id, 'edge not allowed: ' || coalesce(from_state, '(create)') || '->' || to_state
            FROM l WHERE coalesce(from_state, '(create)') || '->' || to_state <> ALL($1::text[])
UNION ALL SELECT t.task_id, 'log does not end at the task' FROM tasks t LEFT JOIN last USING (task_id)
           WHERE last.task_id IS NULL OR last.version <> t.version OR last.to_state <> t.state
              OR last.lease_epoch > t.lease_epoch
UNION ALL SELECT last.task_id, 'log without a task' FROM last LEFT JOIN tasks t USING (task_id)
           WHERE t.task_id IS NULL
LIMIT 20
"""


async def check_transition_logs(dsn: str) -> None:
    """Every task's log follows the state machine: versions 1..n with no gap
    or fork, created first, each step allowed and chained, ending at the
    task's state and version, lease epochs never decreasing."""
    edges = [f"{frm.value if frm else '(create)'}->{to.value}" for frm, to in taskstate.ALLOWED]
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        bad = await conn.fetch(LOG_VIOLATIONS, edges, timeout=60)
    finally:
        await conn.close()
    assert not bad, [tuple(r) for r in bad]
