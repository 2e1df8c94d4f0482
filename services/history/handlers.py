"""The gRPC edge of HistoryService: validate, pick the shard, call the
domain module, shape the response. No decisions here."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2
from ratchet.libs import gates, taskstate
from ratchet.libs.rpc.errors import rpc, rpc_stream
from ratchet.services.history import callstream, convert, policy
from ratchet.services.history.bulk import operations
from ratchet.services.history.config import HistoryConfig
from ratchet.services.history.enqueue import CreateOut
from ratchet.services.history.enqueue.commit import Committer
from ratchet.services.history.enqueue.convert import create_request
from ratchet.services.history.errors import InvalidArgument
from ratchet.services.history.leases import leasing, lifecycle
from ratchet.services.history.reads import tasks
from ratchet.services.history.ready import ReadyHub, Watcher
from ratchet.services.history.shards import ShardSet
from ratchet.services.history.store import Store
from ratchet.services.history.workflows import convert as wfconvert
from ratchet.services.history.workflows import events, fanout, reads, steps

log = logging.getLogger(__name__)

MAX_LEASE_BATCH = 1000
WATCH_FIRST_REQUEST_S = 10.0  # a WatchReady stream names its shards at once
MAX_WATCH_S = 600.0  # a WatchReady stream ends after this (the dispatcher reopens it every 300 s)

_STEP_STATUS = {
    "RUN": worker_pb2.STEP_STATUS_RUN,
    "DONE": worker_pb2.STEP_STATUS_DONE,
    "SUSPEND": worker_pb2.STEP_STATUS_SUSPEND,
    "MISMATCH": worker_pb2.STEP_STATUS_MISMATCH,
    "ABSENT": worker_pb2.STEP_STATUS_ABSENT,
    "CANCELLED": worker_pb2.STEP_STATUS_CANCELLED,
}

_ACTIONS = {
    "CONTINUE": worker_pb2.LEASE_ACTION_CONTINUE,
    "CANCEL": worker_pb2.LEASE_ACTION_CANCEL,
    "LEASE_LOST": worker_pb2.LEASE_ACTION_LEASE_LOST,
}


def _create_answer(call, response, error) -> history_pb2.CreateTasksAnswer:
    if error is not None:
        code, message = error
        return history_pb2.CreateTasksAnswer(
            call_id=call.call_id, error=history_pb2.CallError(code=code.value[0], message=message))
    return history_pb2.CreateTasksAnswer(call_id=call.call_id, response=response)


def _create_frame(answers: list[history_pb2.CreateTasksAnswer]) -> history_pb2.CreateTasksStreamResponse:
    return history_pb2.CreateTasksStreamResponse(answers=answers)


def _step_response(a: steps.StepAnswer) -> worker_pb2.StepResponse:
    out = worker_pb2.StepResponse(status=_STEP_STATUS[a.status], attempt=a.attempt, result_json=a.result or b"",
                                  logged_name=a.logged_name, logged_kind=wfconvert.KIND_VALUES.get(a.logged_kind, 0),
                                  compensate_from=a.compensate_from)
    if a.error is not None:
        out.error.CopyFrom(tasks_pb2.TaskError(error_class=a.error.error_class, message=a.error.message,
                                               stack=a.error.stack))
    if a.wake_after_s is not None:
        out.wake_after.CopyFrom(policy.duration(max(0.0, a.wake_after_s)))
    if a.child_ids:
        out.child_ids.extend(a.child_ids)
    for position, name, kind, attempt, result in a.ahead:
        out.ahead.add(position=position, name=name, kind=wfconvert.KIND_VALUES[kind], attempt=attempt,
                      result_json=result or b"")
    for c in a.children:
        o = out.children.add(index=c.index, child_id=c.child_id, state=taskstate.to_proto(c.state),
                             result_json=c.result or b"")
        if c.error is not None:
            o.error.CopyFrom(tasks_pb2.TaskError(error_class=c.error.error_class, message=c.error.message))
    return out


def _part(req: history_pb2.CreateTasksRequest, idx) -> history_pb2.CreateTasksRequest:
    """The tasks at idx of a CreateTasks request, with its shared fields."""
    out = history_pb2.CreateTasksRequest(shard_id=req.shard_id, tasks=[req.tasks[i] for i in idx])
    if req.HasField("shared"):
        out.shared.CopyFrom(req.shared)
    return out


def _batch(items, what: str, limit: int = convert.MAX_BATCH) -> None:
    if len(items) > limit:
        raise InvalidArgument(f"{what} holds {len(items)} items; send at most {limit} per request")


async def _first_watch_request(request_iterator) -> history_pb2.WatchReadyRequest | None:
    """A WatchReady stream's first request (the shards to watch), None if the stream ends
    before one; INVALID_ARGUMENT if none comes within WATCH_FIRST_REQUEST_S."""
    try:
        async with asyncio.timeout(WATCH_FIRST_REQUEST_S):
            async for request in request_iterator:  # the first request only
                return request
    except TimeoutError:
        raise InvalidArgument(f"WatchReady: send the first request (the shards to watch) within "
                              f"{WATCH_FIRST_REQUEST_S:g}s of opening the stream") from None
    return None


async def _read_wants(request_iterator, watcher: Watcher) -> None:
    """A WatchReady stream's later requests, each saying whether its caller wants events now."""
    async for req in request_iterator:
        if req.shard_ids and set(req.shard_ids) != watcher.shard_ids:
            raise InvalidArgument("WatchReady: the shards are named by the first request only")
        watcher.want(req.wanted)


class HistoryServicer(history_pb2_grpc.HistoryServiceServicer):
    """HistoryService over a set of shard databases."""

    def __init__(self, cfg: HistoryConfig, shards: ShardSet, store: Store, hub: ReadyHub,
                 rand: random.Random | None = None, on_bulk_start: Callable[[], None] = lambda: None):
        self.cfg = cfg
        self.shards = shards
        self.store = store
        self.hub = hub
        self.rand = (rand or random.Random()).random
        self.on_bulk_start = on_bulk_start
        self.mesh: fanout.Mesh | None = None  # the server's (children's states on other shards)
        self.stopping = asyncio.Event()  # set at shutdown: call streams stop reading and end
        # Every create, group-committed per shard; the ready event goes out after the group's
        # commit, outside the transaction: never a NOTIFY.
        self.creates = Committer(store, cfg.idempotency_window_s, hub.publish, hub.timer_due,
                                 max_in_flight=cfg.enqueue_groups_in_flight)

    @rpc
    async def CreateTasks(self, request, context):
        """See history.proto: insert tasks in one transaction, honouring idempotency keys."""
        return await self._create_tasks(request)

    async def CreateTasksStream(self, request_iterator, context):
        """See history.proto: CreateTasks calls as messages on one stream, each answered once."""
        # Headers first: the gateway waits for this one before it writes a call on the stream.
        await context.send_initial_metadata(((callstream.STREAM_HEADER, callstream.CONTRACT),))
        async for reply in callstream.serve(request_iterator, lambda m: self._create_tasks(m.request),
                                            _create_answer, lambda m: m.timeout_ms / 1000 or None,
                                            "CreateTasks", self.stopping, calls_of=lambda msg: msg.calls,
                                            frame=_create_frame):
            yield reply

    async def _create_tasks(self, request) -> history_pb2.CreateTasksResponse:
        shard = self.shards.get(request.shard_id)
        _batch(request.tasks, "tasks")
        tasks = request.tasks
        if tasks and (tasks[0].HasField("parent") or tasks[-1].HasField("parent")):  # (two tests a request)
            return await self._create_children(shard, request)
        results = await self.creates.create(shard, create_request(request))
        await gates.reach("history.enqueue.after_commit")  # fault tests: committed, not yet answered
        if results is None:
            return history_pb2.CreateTasksResponse(all_created=True)
        return history_pb2.CreateTasksResponse(results=[
            history_pb2.CreateResult(task_id=r.task_id, deduplicated=r.deduplicated, conflict=r.conflict)
            for r in results])

    async def _create_children(self, shard, request) -> history_pb2.CreateTasksResponse:
        """A fan-out's children (the gateway sends them in their own CreateTasks calls, or as
        single enqueues it coalesced with others): created with their parent links, off the
        group committer. Tasks without a parent among them (coalesced singles) take the
        ordinary path, as their own request (each was its caller's own call)."""
        plain = [i for i, t in enumerate(request.tasks) if not t.HasField("parent")]
        results: list = [None] * len(request.tasks)
        kids = [i for i, t in enumerate(request.tasks) if t.HasField("parent")] if plain else range(len(results))
        if plain:
            ordinary = create_request(_part(request, plain))
            answers = await self.creates.create(shard, ordinary)
            for i, k in zip(plain, range(len(plain)), strict=True):
                results[i] = answers[k] if answers is not None else CreateOut(ordinary.batch.task_ids[k])
            request = _part(request, kids)
        async with shard.conn() as conn:
            out = await fanout.create_children(conn, self.store, request, self.cfg.idempotency_window_s)
        if out.due:
            self.hub.publish(shard.id)
        self.hub.timer_due(shard.id, out.timer_in_s)
        for i, r in zip(kids, out.results, strict=True):
            results[i] = r
        return history_pb2.CreateTasksResponse(results=[
            history_pb2.CreateResult(task_id=r.task_id, deduplicated=r.deduplicated, conflict=r.conflict)
            for r in results])

    @rpc
    async def GetTask(self, request, context):
        """See history.proto: one task with its attempts; NOT_FOUND unless the tenant owns it."""
        shard = self.shards.get(request.shard_id)
        task_id = convert.task_id(request.task_id, "task_id")
        if not request.tenant_id:
            raise InvalidArgument("tenant_id is required")
        async with shard.conn() as conn:
            row, attempts = await tasks.get_task(conn, self.store, task_id, request.tenant_id)
        return history_pb2.GetTaskResponse(task=convert.task_to_proto(row, attempts))

    @rpc
    async def CancelTask(self, request, context):
        """See history.proto: immediate for ENQUEUED/RETRY_WAIT, a flag for LEASED."""
        shard = self.shards.get(request.shard_id)
        task_id = convert.task_id(request.task_id, "task_id")
        if not request.tenant_id:
            raise InvalidArgument("tenant_id is required")
        async with shard.conn() as conn:
            state, requested = await lifecycle.cancel_task(conn, self.store, task_id, request.tenant_id,
                                                           self.cfg.cancel_grace_s)
        if requested:  # the lease check now fires by the kill time
            self.hub.timer_due(shard.id, self.cfg.cancel_grace_s)
            if state == taskstate.TaskState.ENQUEUED:  # a run with compensations: due now, to run them
                self.hub.publish(shard.id)
        return history_pb2.CancelTaskResponse(state=taskstate.to_proto(state), cancel_requested=requested)

    @rpc
    async def LeaseTasks(self, request, context):
        """See history.proto: lease ready tasks round-robin over tenants."""
        shard = self.shards.get(request.shard_id)
        if not request.worker_id:
            raise InvalidArgument("worker_id is required")
        if not 1 <= request.max_tasks <= MAX_LEASE_BATCH:
            raise InvalidArgument(f"max_tasks must be 1..{MAX_LEASE_BATCH}, got {request.max_tasks}")
        lease_s = convert.lease_seconds(request.lease_duration if request.HasField("lease_duration") else None,
                                        self.cfg.lease_duration_s)
        limits = convert.type_limits(request.type_limits)
        async with shard.lease_lock, shard.conn() as conn:
            out = await leasing.lease_tasks(conn, self.store, worker_id=request.worker_id,
                                            max_tasks=request.max_tasks, app_ids=list(request.app_ids),
                                            cursor=request.tenant_cursor, lease_s=lease_s, type_limits=limits)
        if out.rows:  # each lease's check: at lease expiry or the attempt deadline, the earlier
            limits = [r.start_to_close_s for r in out.rows if r.start_to_close_s is not None]
            self.hub.timer_due(shard.id, min([lease_s, *limits]))
        lease = policy.duration(lease_s)  # (one Duration for the batch)
        return history_pb2.LeaseTasksResponse(
            tasks=[convert.leased_to_proto(shard.id, r, lease) for r in out.rows],
            next_tenant_cursor=out.next_cursor, more=out.more)

    @rpc
    async def RecordHeartbeats(self, request, context):
        """See history.proto: extend leases; stale ones are LEASE_LOST."""
        shard = self.shards.get(request.shard_id)
        _batch(request.leases, "leases")
        leases = [convert.lease_ref(p, i, shard.id) for i, p in enumerate(request.leases)]
        lease_s = convert.lease_seconds(request.lease_duration if request.HasField("lease_duration") else None,
                                        self.cfg.lease_duration_s)
        if not leases:
            return history_pb2.RecordHeartbeatsResponse()
        async with shard.conn() as conn:
            results = await lifecycle.record_heartbeats(conn, self.store, leases, lease_s, self.cfg.cancel_grace_s)
        out = history_pb2.RecordHeartbeatsResponse()
        for r in results:
            item = out.results.add(task_id=r.task_id, lease_epoch=r.lease_epoch, action=_ACTIONS[r.action],
                                   reason=r.reason)
            if r.kill_after_s is not None:
                item.kill_after.CopyFrom(policy.duration(r.kill_after_s))
        return out

    @rpc
    async def CompleteTasks(self, request, context):
        """See history.proto: apply attempt outcomes fenced by the lease epoch."""
        shard = self.shards.get(request.shard_id)
        _batch(request.completions, "completions")
        try:
            items = [convert.completion(p, i, shard.id) for i, p in enumerate(request.completions)]
            suspensions = False
        except InvalidArgument:  # SUSPENDED completions (or a bad one): off the ordinary path
            items = [wfconvert.completion(p, i, shard.id) for i, p in enumerate(request.completions)]
            suspensions = True
        if not items:
            return history_pb2.CompleteTasksResponse()
        async with shard.conn() as conn:
            results = await lifecycle.complete_tasks(conn, self.store, items, self.rand, suspensions=suspensions)
        self.hub.timer_due(shard.id, min((r.retry_in_s for r in results if r.retry_in_s is not None),
                                         default=None))
        if suspensions and any(r.accepted and r.state == taskstate.TaskState.ENQUEUED for r in results):
            self.hub.publish(shard.id)  # a run woke at once: the event that completed its wait came first
        return history_pb2.CompleteTasksResponse(results=[
            worker_pb2.CompletionResult(task_id=r.task_id, accepted=r.accepted, reason=r.reason,
                                        state=taskstate.to_proto(r.state) if r.state else 0)
            for r in results])

    @rpc_stream
    async def WatchReady(self, request_iterator, context):
        """See history.proto: coalesced ready events for the watched shards, while the caller
        says it wants them."""
        first = await _first_watch_request(request_iterator)
        if first is None:
            return
        shard_ids = list(first.shard_ids) or self.shards.ids
        for sid in shard_ids:
            self.shards.get(sid)  # unknown shards are refused up front
        await context.send_initial_metadata(())  # accepted: the caller knows history is up
        watcher = self.hub.watch(shard_ids)
        watcher.want(first.wanted)  # wanted from the start: every shard once, as after any flip
        # Bounded like every call: a caller without a shorter deadline reopens after this.
        ends = asyncio.get_running_loop().call_later(MAX_WATCH_S, watcher.close)
        reader = asyncio.ensure_future(_read_wants(request_iterator, watcher))
        reader.add_done_callback(lambda _t: watcher.close())  # the caller's side ended (or broke)
        try:
            while True:
                ready = await watcher.next()
                if not ready:
                    if reader.done() and not reader.cancelled() and reader.exception() is not None:
                        raise reader.exception()
                    return
                for sid in ready:
                    yield history_pb2.WatchReadyResponse(shard_id=sid)
        finally:
            ends.cancel()
            reader.cancel()
            self.hub.unwatch(watcher)

    @rpc
    async def ListTasks(self, request, context):
        """See history.proto: one page of the tenant's matching tasks, newest first (no attempts)."""
        shard = self.shards.get(request.shard_id)
        tenant_id, app_id = convert.scope(request.tenant_id, request.app_id)
        f = convert.task_filter(request.filter)
        size = convert.page_size(request.page_size)
        cursor = convert.list_cursor(request.cursor)
        async with shard.conn() as conn:
            page = await tasks.list_tasks(conn, self.store, tenant_id, app_id, f, cursor, size)
        return history_pb2.ListTasksResponse(
            tasks=[convert.task_to_proto(r) for r in page.rows],
            next_cursor=convert.format_cursor(*page.next_cursor) if page.next_cursor else "")

    @rpc
    async def CountTasks(self, request, context):
        """See history.proto: how many of the tenant's tasks match."""
        shard = self.shards.get(request.shard_id)
        tenant_id, app_id = convert.scope(request.tenant_id, request.app_id)
        f = convert.task_filter(request.filter)
        async with shard.conn() as conn:
            n = await tasks.count_tasks(conn, self.store, tenant_id, app_id, f)
        return history_pb2.CountTasksResponse(count=n)

    @rpc
    async def StartBulkOperation(self, request, context):
        """See history.proto: start this shard's part (idempotent per operation_id)."""
        shard = self.shards.get(request.shard_id)
        tenant_id, app_id = convert.scope(request.tenant_id, request.app_id)
        kind = convert.bulk_kind(request.kind)
        _batch(request.registered_task_types, "registered_task_types", 10_000)
        req = operations.BulkStart(
            operation_id=convert.operation_id(request.operation_id), tenant_id=tenant_id, app_id=app_id, kind=kind,
            filter=convert.bulk_filter(request.filter, kind),
            registered_task_types=tuple(convert.task_type_name(t, f"registered_task_types[{i}]")
                                        for i, t in enumerate(request.registered_task_types)))
        async with shard.conn() as conn:
            await operations.start(conn, self.store, req)
            row, failures = await operations.get(conn, self.store, req.operation_id, tenant_id)
        self.on_bulk_start()
        return history_pb2.StartBulkOperationResponse(operation=convert.bulk_to_proto(row, failures))

    @rpc
    async def GetBulkOperation(self, request, context):
        """See history.proto: this shard's part; NOT_FOUND unless the tenant owns it."""
        shard = self.shards.get(request.shard_id)
        operation_id = convert.operation_id(request.operation_id)
        tenant_id = convert.scope(request.tenant_id, "-")[0]
        async with shard.conn() as conn:
            row, failures = await operations.get(conn, self.store, operation_id, tenant_id)
        return history_pb2.GetBulkOperationResponse(operation=convert.bulk_to_proto(row, failures))

    @rpc
    async def CancelBulkOperation(self, request, context):
        """See history.proto: stop this shard's part at its next batch."""
        shard = self.shards.get(request.shard_id)
        operation_id = convert.operation_id(request.operation_id)
        tenant_id = convert.scope(request.tenant_id, "-")[0]
        async with shard.conn() as conn:
            row, failures = await operations.cancel(conn, self.store, operation_id, tenant_id)
        return history_pb2.CancelBulkOperationResponse(operation=convert.bulk_to_proto(row, failures))

    @rpc
    async def WorkflowStep(self, request, context):
        """See history.proto: one step op of a workflow run, fenced by its lease."""
        op = wfconvert.step_request(request.step)
        shard = self.shards.get(op.shard_id)
        async with shard.conn() as conn:
            answer = await steps.run_step(conn, self.store, op)
        return history_pb2.WorkflowStepResponse(step=_step_response(answer))

    @rpc
    async def GetWorkflowSteps(self, request, context):
        """See history.proto: a page of a run's step log and its pending sleep or wait."""
        shard = self.shards.get(request.shard_id)
        workflow_id = convert.task_id(request.workflow_id, "workflow_id")
        if not request.tenant_id:
            raise InvalidArgument("tenant_id is required")
        if request.from_position < 0:
            raise InvalidArgument(f"from_position must be 0 or more, got {request.from_position}")
        size = wfconvert.step_page_size(request.page_size)
        async with shard.conn() as conn:
            page = await reads.step_page(conn, self.store, workflow_id, request.tenant_id, request.from_position,
                                         size)
        out = history_pb2.GetWorkflowStepsResponse(steps=[wfconvert.step_to_proto(s) for s in page.steps],
                                                   step_count=page.step_count, next_position=page.next_position)
        for s in out.steps:
            counts = page.fanouts.get(s.position)
            if counts is not None:
                s.child_count, s.children_done = counts
        if page.pending is not None:
            out.pending.CopyFrom(wfconvert.pending_to_proto(page.pending))
        return out

    @rpc
    async def ListWorkflowChildren(self, request, context):
        """See history.proto: a page of a fan-out's children by index, with their states."""
        shard = self.shards.get(request.shard_id)
        workflow_id = convert.task_id(request.workflow_id, "workflow_id")
        if not request.tenant_id:
            raise InvalidArgument("tenant_id is required")
        if request.position < 0 or request.from_index < 0:
            raise InvalidArgument("position and from_index must be 0 or more")
        size = wfconvert.step_page_size(request.page_size)
        if self.mesh is None:
            raise InvalidArgument("ListWorkflowChildren needs the history server's shard routing")
        async with shard.conn() as conn:
            page, nxt = await reads.children_page(self.mesh, conn, workflow_id, request.tenant_id, request.position,
                                                  request.from_index, size)
        out = history_pb2.ListWorkflowChildrenResponse(next_index=nxt)
        for c in page:
            run = out.children.add(index=c.index, child_id=c.child_id, task_type=c.task_type,
                                   state=taskstate.to_proto(c.state) if c.state else 0)
            value = convert.json_value(c.result)
            if value is not None:
                run.result.CopyFrom(value)
            if c.error is not None:
                run.error.CopyFrom(tasks_pb2.TaskError(error_class=c.error.error_class, message=c.error.message))
        return out

    @rpc
    async def DeliverEvent(self, request, context):
        """See history.proto: an event into one run's inbox, or to the shard's matching waits."""
        e = wfconvert.event(request)
        shard = self.shards.get(e.shard_id)
        async with shard.conn() as conn:
            if e.workflow_id is not None:
                out = await events.deliver_to_run(conn, self.store, e)
            else:
                out = await events.broadcast(conn, self.store, e)
        if out.woken:
            self.hub.publish(shard.id)  # after commit: the woken runs are ready now
        return history_pb2.DeliverEventResponse(delivered=out.delivered)
