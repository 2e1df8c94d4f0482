"""An in-memory HistoryService for the dispatcher's tests: a real grpc.aio
server on a free loopback port, with just enough behaviour (ready tasks per
shard and tenant, leases with epochs, completions, delayed tasks that its own
"timer" makes ready and announces, a WatchReady feed with `wanted`) and a
record of every call so tests can assert on what the dispatcher asked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
import uuid
from typing import Any

import grpc

from ratchet.api.tasks.v1 import tasks_pb2 as tpb
from ratchet.internal.history.v1 import history_pb2 as hpb
from ratchet.internal.history.v1 import history_pb2_grpc as hgrpc
from ratchet.internal.worker.v1 import worker_pb2 as wpb


@dataclasses.dataclass
class FakeTask:
    task_id: str
    shard_id: int
    tenant_id: str
    app_id: str
    state: int = tpb.TASK_STATE_ENQUEUED
    epoch: int = 0
    due_at: float = 0.0  # time.monotonic(); 0 means ready now
    task_type: str = "noop"

    @property
    def type_key(self) -> tuple[str, str, str]:
        return (self.tenant_id, self.app_id, self.task_type)


@dataclasses.dataclass
class Call:
    method: str
    shard_id: int
    request: Any
    at: float


class FakeHistory(hgrpc.HistoryServiceServicer):
    """Behaviour is switched per shard through the public attributes."""

    def __init__(self) -> None:
        self.tasks: dict[str, FakeTask] = {}
        self.calls: list[Call] = []
        self.unavailable: set[int] = set()  # shards answering UNAVAILABLE at once
        self.hanging: set[int] = set()  # shards whose calls never answer (until the deadline)
        self.cursor_names: dict[int, str] = {}  # if set: next_tenant_cursor prefix per shard
        self.lease_latency_s = 0.0
        self.complete_latency_s = 0.0
        # task_id -> (code, details) a WorkflowStep for it is refused with, as history would.
        self.step_refusals: dict[str, tuple[grpc.StatusCode, str]] = {}
        # task_id -> the StepResponse a fenced WorkflowStep of it answers (a fan-out's DONE).
        self.step_answers: dict[str, wpb.StepResponse] = {}
        self._watchers: list[asyncio.Queue] = []
        self.wanted: list[bool] = []  # the last `wanted` of each WatchReady stream, in order opened
        self._timers: list[asyncio.TimerHandle] = []
        self._seq = itertools.count(1)

    # ----- test controls -------------------------------------------------
    def add_task(self, shard_id: int, tenant_id: str = "tenant-a", app_id: str = "app", delay_s: float = 0.0,
                 task_type: str = "noop") -> str:
        """A task, ready now or (delay_s) once this fake's timer fires it: then, as history's timer
        loop does, it is ENQUEUED and the shard announced on WatchReady."""
        task_id = str(uuid.uuid4())
        due = time.monotonic() + delay_s if delay_s else 0.0
        self.tasks[task_id] = FakeTask(task_id, shard_id, tenant_id, app_id, due_at=due, task_type=task_type,
                                       state=tpb.TASK_STATE_RETRY_WAIT if delay_s else tpb.TASK_STATE_ENQUEUED)
        if delay_s:
            self._timers.append(asyncio.get_running_loop().call_later(delay_s, self._fire, task_id))
        return task_id

    def _fire(self, task_id: str) -> None:
        task = self.tasks[task_id]
        if task.state == tpb.TASK_STATE_RETRY_WAIT:
            task.state = tpb.TASK_STATE_ENQUEUED
            self.notify(task.shard_id)

    def requeue(self, task_id: str) -> None:
        """Put a task back to ENQUEUED (as a retry or an expired lease would)."""
        self.tasks[task_id].state = tpb.TASK_STATE_ENQUEUED

    def notify(self, shard_id: int) -> None:
        """Ready work on the shard: an event on every stream that wants events now (as history
        does; a stream that does not hears of every shard at its next flip to wanted)."""
        for queue in self._watchers:
            queue.put_nowait(shard_id)

    def cancel_timers(self) -> None:
        for handle in self._timers:
            handle.cancel()

    def break_watches(self) -> None:
        """End every open WatchReady stream with UNAVAILABLE."""
        for queue in self._watchers:
            queue.put_nowait(None)

    @property
    def watchers(self) -> int:
        return len(self._watchers)

    def calls_of(self, method: str, shard_id: int | None = None) -> list[Call]:
        return [c for c in self.calls if c.method == method and (shard_id is None or c.shard_id == shard_id)]

    # ----- helpers --------------------------------------------------------
    async def _enter(self, method: str, shard_id: int, request, context) -> None:
        self.calls.append(Call(method, shard_id, request, time.monotonic()))
        if shard_id in self.hanging:
            await asyncio.sleep(3600)
        if shard_id in self.unavailable:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"shard {shard_id} is down (fake)")

    def _ready(self, shard_id: int, app_ids, paused=frozenset()) -> list[FakeTask]:
        return [t for t in self.tasks.values() if t.shard_id == shard_id and t.state == tpb.TASK_STATE_ENQUEUED
                and (not app_ids or t.app_id in app_ids) and t.type_key not in paused]

    @staticmethod
    def _limits(request) -> dict[tuple[str, str, str], int]:
        # As history does: a type named twice gets the smaller limit.
        out: dict[tuple[str, str, str], int] = {}
        for lim in request.type_limits:
            key = (lim.tenant_id, lim.app_id, lim.task_type)
            out[key] = min(lim.max_tasks, out.get(key, lim.max_tasks))
        return out

    # ----- HistoryService -------------------------------------------------
    async def LeaseTasks(self, request, context):
        await self._enter("LeaseTasks", request.shard_id, request, context)
        if self.lease_latency_s:
            await asyncio.sleep(self.lease_latency_s)
        limits = self._limits(request)
        # Capped types (a breaker's probe) are claimed first, then left out of the share-out.
        capped: list[FakeTask] = []
        for t in self._ready(request.shard_id, set(request.app_ids)):
            cap = limits.get(t.type_key)
            if cap and len(capped) < request.max_tasks and sum(c.type_key == t.type_key for c in capped) < cap:
                capped.append(t)
        ready = self._ready(request.shard_id, set(request.app_ids), paused=set(limits))
        by_tenant: dict[str, list[FakeTask]] = {}
        for t in ready:
            by_tenant.setdefault(t.tenant_id, []).append(t)
        tenants = sorted(by_tenant)
        # Round-robin: tenants after the cursor first, then wrap.
        tenants = [t for t in tenants if t > request.tenant_cursor] + [t for t in tenants if t <= request.tenant_cursor]
        picked, last = list(capped), request.tenant_cursor
        while len(picked) < request.max_tasks and any(by_tenant.values()):
            for tenant in tenants:
                if by_tenant[tenant] and len(picked) < request.max_tasks:
                    picked.append(by_tenant[tenant].pop(0))
                    last = tenant
        out = []
        for t in picked:
            t.state, t.epoch = tpb.TASK_STATE_LEASED, t.epoch + 1
            out.append(wpb.LeasedTask(shard_id=t.shard_id, task_id=t.task_id, tenant_id=t.tenant_id,
                                      app_id=t.app_id, task_type=t.task_type, attempt=t.epoch, max_attempts=5,
                                      lease_epoch=t.epoch, lease_duration=request.lease_duration))
        if request.shard_id in self.cursor_names and picked:
            last = f"{self.cursor_names[request.shard_id]}-{next(self._seq)}"
        more = any(by_tenant.values())
        return hpb.LeaseTasksResponse(tasks=out, next_tenant_cursor=last if picked else "", more=more)

    async def RecordHeartbeats(self, request, context):
        await self._enter("RecordHeartbeats", request.shard_id, request, context)
        results = []
        for ref in request.leases:
            t = self.tasks.get(ref.task_id)
            ok = t is not None and t.state == tpb.TASK_STATE_LEASED and t.epoch == ref.lease_epoch
            results.append(wpb.HeartbeatResult(task_id=ref.task_id, lease_epoch=ref.lease_epoch,
                                               action=wpb.LEASE_ACTION_CONTINUE if ok else wpb.LEASE_ACTION_LEASE_LOST,
                                               reason=f"fake shard {request.shard_id}"))
        return hpb.RecordHeartbeatsResponse(results=results)

    async def CompleteTasks(self, request, context):
        await self._enter("CompleteTasks", request.shard_id, request, context)
        if self.complete_latency_s:
            await asyncio.sleep(self.complete_latency_s)
        results = []
        for c in request.completions:
            t = self.tasks.get(c.task_id)
            if t is None:
                results.append(wpb.CompletionResult(task_id=c.task_id, accepted=False, reason="unknown task"))
                continue
            ok = t.state == tpb.TASK_STATE_LEASED and t.epoch == c.lease_epoch
            if ok:
                t.state = self._end_state(c.outcome)
            results.append(wpb.CompletionResult(task_id=c.task_id, accepted=ok, state=t.state,
                                                reason="" if ok else "stale lease or not leased"))
        return hpb.CompleteTasksResponse(results=results)

    @staticmethod
    def _end_state(outcome: int) -> int:
        if outcome == wpb.COMPLETION_OUTCOME_SUCCEEDED:
            return tpb.TASK_STATE_SUCCEEDED
        if outcome == wpb.COMPLETION_OUTCOME_SUSPENDED:
            return tpb.TASK_STATE_WAITING  # a workflow run stopped at a sleep or a wait
        return tpb.TASK_STATE_FAILED

    async def WorkflowStep(self, request, context):
        """As history fences it: the run's row must be LEASED under the request's epoch; a
        refusal set in step_refusals answers first. A fenced step answers what step_answers
        holds for the run, else RUN, attempt 1, echoing the name so a test can tell the answers
        apart, with a fan-out's child ids minted from (run, position, index) as history does."""
        step = request.step
        await self._enter("WorkflowStep", step.lease.shard_id, request, context)
        refusal = self.step_refusals.get(step.lease.task_id)
        if refusal is not None:
            await context.abort(*refusal)
        t = self.tasks.get(step.lease.task_id)
        if t is None or t.shard_id != step.lease.shard_id:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run {step.lease.task_id} on shard "
                                                           f"{step.lease.shard_id} (fake)")
        if t.state != tpb.TASK_STATE_LEASED or t.epoch != step.lease.lease_epoch:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"the run's lease {step.lease.lease_epoch} is not current")
        if step.lease.task_id in self.step_answers:
            return hpb.WorkflowStepResponse(step=self.step_answers[step.lease.task_id])
        ids = [f"{step.lease.task_id}.{step.position}.{i}" for i in range(len(step.children))]
        return hpb.WorkflowStepResponse(step=wpb.StepResponse(status=wpb.STEP_STATUS_RUN, attempt=1,
                                                              logged_name=step.name, child_ids=ids))

    async def WatchReady(self, request_iterator, context):
        first = await anext(aiter(request_iterator), None)
        if first is None:
            return
        self.calls.append(Call("WatchReady", -1, first, time.monotonic()))
        shards, slot = set(first.shard_ids), len(self.wanted)
        self.wanted.append(False)
        await context.send_initial_metadata(())  # accepted, as history does
        queue: asyncio.Queue = asyncio.Queue()
        self._watchers.append(queue)

        def want(wanted: bool) -> None:
            if wanted and not self.wanted[slot]:
                for shard in sorted(shards):  # a flip to wanted: every watched shard once
                    queue.put_nowait(shard)
            self.wanted[slot] = wanted

        async def read() -> None:
            async for req in request_iterator:
                want(req.wanted)

        want(first.wanted)
        reader = asyncio.ensure_future(read())
        try:
            while True:
                shard = await queue.get()
                if shard is None:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "watch broken (fake)")
                if shard in shards and self.wanted[slot]:
                    yield hpb.WatchReadyResponse(shard_id=shard)
        finally:
            reader.cancel()
            self._watchers.remove(queue)


class FakeHistoryServer:
    """The fake on a free port: `target` to dial, `stop()` to end."""

    def __init__(self) -> None:
        self.fake = FakeHistory()
        self.server = grpc.aio.server()
        hgrpc.add_HistoryServiceServicer_to_server(self.fake, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        self.fake.cancel_timers()
        await self.server.stop(0)
