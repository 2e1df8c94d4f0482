"""In-memory peers of the gateway on real grpc.aio servers: history (tasks,
search, bulk operations, workflow step logs and events), the cron service and
the dispatcher's breaker admin.

They check what the gateway sends (routing, tenant scoping, cursors) and
record every call, so tests can assert that bad input sent nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import uuid

import grpc
from google.protobuf import json_format, struct_pb2, timestamp_pb2

from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.api.tasks.v1 import breakers_pb2, tasks_pb2
from ratchet.api.workflows.v1 import workflows_pb2 as wpb
from ratchet.internal.cron.v1 import cron_pb2 as cpb
from ratchet.internal.cron.v1 import cron_pb2_grpc
from ratchet.internal.dispatcher.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from ratchet.internal.history.v1 import history_pb2, history_pb2_grpc
from ratchet.libs.rpc.errors import ServiceError, Unavailable
from ratchet.libs.shardmap import ShardMap, new_task_id
from ratchet.services.gateway.children import child_ids
from ratchet.services.history import callstream
from ratchet.services.history.errors import InvalidArgument
from ratchet.services.history.handlers import _create_answer, _create_frame

S = tasks_pb2
TERMINAL = {S.TASK_STATE_SUCCEEDED, S.TASK_STATE_FAILED, S.TASK_STATE_CANCELED, S.TASK_STATE_EXPIRED}
UTC = dt.UTC


def stamp(when: dt.datetime) -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromDatetime(when)
    return t


@dataclasses.dataclass
class Row:
    """What the fake keeps of a task beyond its NewTask."""

    state: int
    created_at: dt.datetime
    finished_at: dt.datetime | None = None
    error_class: str = ""

    @property
    def sort_at(self) -> dt.datetime:
        return self.finished_at if self.state in TERMINAL and self.finished_at else self.created_at


def _expanded(req: history_pb2.CreateTasksRequest) -> history_pb2.CreateTasksRequest:
    """req with its columns as tasks and its `shared` fields on every task: the one shape this
    fake keeps (and records in `calls`), whichever form the gateway sent."""
    out = history_pb2.CreateTasksRequest(shard_id=req.shard_id, tasks=req.tasks)
    for task_id, payload in zip(req.columns.task_ids, req.columns.payloads_json, strict=True):
        out.tasks.add(task_id=task_id, payload_json=payload)
    if req.HasField("shared"):
        for task in out.tasks:
            task.MergeFrom(req.shared)  # (disjoint fields: the gateway sets each in one place)
    return out


class FakeHistory(history_pb2_grpc.HistoryServiceServicer):
    """An in-memory history: idempotency by (tenant, app, key), tenant-scoped reads,
    ListTasks with history's cursor format, CountTasks, and bulk operations that
    finish at once (or stay RUNNING while hold_bulk is set)."""

    def __init__(self, shard_ids: list[int]):
        self.shard_map = ShardMap.even(shard_ids)
        self.tasks: dict[str, history_pb2.NewTask] = {}
        self.states: dict[str, int] = {}
        self.rows: dict[str, Row] = {}
        self.keys: dict[tuple[str, str, str], tuple[str, str]] = {}
        self.calls: list[tuple[str, object]] = []
        self.delay_s = 0.0
        self.down: set[int] = set()
        self.silent: set[int] = set()  # shards whose reads never answer (the caller's deadline passes)
        self.creates_down: set[int] = set()  # shards whose CreateTasks fail UNAVAILABLE
        self.hold_bulk = False
        self.ops: dict[tuple[int, str], tuple[history_pb2.StartBulkOperationRequest, tasks_pb2.BulkOperation]] = {}
        # Workflow runs (tasks of any type: history does not know kinds): their step logs,
        # open waits (position, name, match), inboxes (name, data) and attempts.
        self.steps: dict[str, list[wpb.Step]] = {}
        self.waits: dict[str, tuple[int, str, dict]] = {}
        self.inbox: dict[str, list[tuple[str, dict]]] = {}
        self.attempts: dict[str, int] = {}
        # Fan-outs: (parent, position) -> {index: child id} of the children created.
        self.children: dict[tuple[str, int], dict[int, str]] = {}
        self.event_ids: dict[tuple[str, str], int] = {}  # (run, event_id) -> what it delivered

    # -- tasks -------------------------------------------------------------
    async def CreateTasks(self, request, context):
        try:
            return await self._create(request)
        except ServiceError as e:
            await context.abort(e.code, str(e))

    async def CreateTasksStream(self, request_iterator, context):
        await context.send_initial_metadata(((callstream.STREAM_HEADER, callstream.CONTRACT),))
        async for reply in callstream.serve(request_iterator, lambda m: self._create(m.request), _create_answer,
                                            lambda m: m.timeout_ms / 1000 or None, "CreateTasks", asyncio.Event(),
                                            calls_of=lambda m: m.calls, frame=_create_frame):
            yield reply

    async def _create(self, request: history_pb2.CreateTasksRequest) -> history_pb2.CreateTasksResponse:
        request = _expanded(request)
        self.calls.append(("CreateTasks", request))
        if request.shard_id in self.creates_down:
            raise Unavailable(f"shard {request.shard_id} database unreachable")
        if len(request.tasks) > 1000:  # (history's limit per request)
            raise InvalidArgument(f"a CreateTasks request holds at most 1000 tasks, got {len(request.tasks)}")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        results, conflict, new = [], False, []
        for t in request.tasks:
            if self.shard_map.shard_for_task(t.task_id) != request.shard_id:
                raise InvalidArgument(f"task {t.task_id} is not on {request.shard_id}")
            known = self.keys.get((t.tenant_id, t.app_id, t.idempotency_key)) if t.idempotency_key else None
            owner = self.tasks.get(t.task_id)
            if known is None and owner is not None:  # (history: an id that exists is its create resent)
                if (owner.tenant_id, owner.app_id, owner.task_type) != (t.tenant_id, t.app_id, t.task_type):
                    raise InvalidArgument(f"tasks[0].task_id {t.task_id} is already taken; mint a new id")
                results.append(history_pb2.CreateResult(task_id=t.task_id, deduplicated=True))
            elif known is None:
                results.append(history_pb2.CreateResult(task_id=t.task_id))
                new.append(t)
            elif known[1] == t.fingerprint:
                results.append(history_pb2.CreateResult(task_id=known[0], deduplicated=True))
            else:
                conflict = True
                results.append(history_pb2.CreateResult(task_id=known[0], conflict=True))
        if not conflict:
            for t in new:
                self._insert(t, S.TASK_STATE_ENQUEUED, dt.datetime.now(UTC))
                if t.HasField("parent"):
                    self.children.setdefault((t.parent.parent_id, t.parent.position), {})[t.parent.index] = t.task_id
                if t.idempotency_key:
                    self.keys[(t.tenant_id, t.app_id, t.idempotency_key)] = (t.task_id, t.fingerprint)
        return history_pb2.CreateTasksResponse(results=results)

    def _insert(self, t: history_pb2.NewTask, state: int, created: dt.datetime, finished=None, error_class=""):
        self.tasks[t.task_id] = t
        self.states[t.task_id] = state
        self.rows[t.task_id] = Row(state, created, finished, error_class)

    def add(self, tenant_id: str, app_id: str, task_type: str, state: int, created: dt.datetime,
            finished: dt.datetime | None = None, error_class: str = "", queue: str = "default") -> str:
        """A task placed directly (as if it had run), for search and bulk tests."""
        t = history_pb2.NewTask(task_id=new_task_id(), tenant_id=tenant_id, app_id=app_id, task_type=task_type,
                                queue=queue, payload_json=b"null")
        self._insert(t, state, created, finished, error_class)
        return t.task_id

    async def _owned(self, request, context, task_id: str | None = None) -> history_pb2.NewTask:
        task_id = task_id or request.task_id
        t = self.tasks.get(task_id)
        if t is None or t.tenant_id != request.tenant_id or \
                self.shard_map.shard_for_task(task_id) != request.shard_id:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such task")
        return t

    def _task(self, task_id: str, with_payload: bool = True) -> tasks_pb2.Task:
        t, row = self.tasks[task_id], self.rows[task_id]
        task = S.Task(task_id=t.task_id, task_type=t.task_type, queue=t.queue, state=self.states[task_id],
                      attempt=self.attempts.get(task_id, 0),
                      max_attempts=t.retry.max_attempts, version=1, idempotency_key=t.idempotency_key,
                      retry=t.retry, timeouts=t.timeouts, created_at=stamp(row.created_at),
                      schedule_id=t.schedule_id, parent_workflow_id=t.parent.parent_id)
        if with_payload:
            task.payload.CopyFrom(json_format.Parse(t.payload_json.decode(), struct_pb2.Value()))
        if row.finished_at:
            task.finished_at.CopyFrom(stamp(row.finished_at))
        if row.error_class:
            task.error.error_class = row.error_class
        if t.HasField("scheduled_time"):
            task.scheduled_time.CopyFrom(t.scheduled_time)
        return task

    async def GetTask(self, request, context):
        self.calls.append(("GetTask", request))
        await self._owned(request, context)
        return history_pb2.GetTaskResponse(task=self._task(request.task_id))

    async def CancelTask(self, request, context):
        self.calls.append(("CancelTask", request))
        await self._owned(request, context)
        self.states[request.task_id] = S.TASK_STATE_CANCELED
        self.rows[request.task_id].state = S.TASK_STATE_CANCELED
        return history_pb2.CancelTaskResponse(state=S.TASK_STATE_CANCELED)

    # -- search ------------------------------------------------------------
    async def _up(self, name: str, request, context) -> None:
        self.calls.append((name, request))
        if request.shard_id in self.down:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"shard {request.shard_id} database unreachable")
        if request.shard_id in self.silent:
            await asyncio.sleep(60)  # (the gRPC deadline cancels this)

    def _matching(self, shard_id: int, tenant_id: str, app_id: str, f: tasks_pb2.TaskFilter) -> list[str]:
        out = []
        for task_id, t in self.tasks.items():
            row = self.rows[task_id]
            if self.shard_map.shard_for_task(task_id) != shard_id or (t.tenant_id, t.app_id) != (tenant_id, app_id):
                continue
            if (f.states and row.state not in f.states) or (f.task_type and t.task_type != f.task_type) or \
                    (f.queue and t.queue != f.queue) or (f.error_class and row.error_class != f.error_class):
                continue
            if f.HasField("since") and row.sort_at < f.since.ToDatetime(UTC):
                continue
            if f.HasField("until") and row.sort_at >= f.until.ToDatetime(UTC):
                continue
            out.append(task_id)
        return out

    async def ListTasks(self, request, context):
        await self._up("ListTasks", request, context)
        ids = sorted(self._matching(request.shard_id, request.tenant_id, request.app_id, request.filter),
                     key=lambda i: (self.rows[i].sort_at, i), reverse=True)
        if request.cursor:
            at, _, tid = request.cursor.rpartition("|")
            key = (dt.datetime.fromisoformat(at.replace("Z", "+00:00")), tid)
            ids = [i for i in ids if (self.rows[i].sort_at, i) < key]
        page = ids[:request.page_size]
        out = history_pb2.ListTasksResponse(tasks=[self._task(i, with_payload=False) for i in page])
        if len(ids) > request.page_size:
            last = page[-1]
            at = self.rows[last].sort_at.isoformat(timespec="microseconds").replace("+00:00", "Z")
            out.next_cursor = f"{at}|{last}"
        return out

    async def CountTasks(self, request, context):
        await self._up("CountTasks", request, context)
        return history_pb2.CountTasksResponse(
            count=len(self._matching(request.shard_id, request.tenant_id, request.app_id, request.filter)))

    # -- bulk operations -----------------------------------------------------
    async def StartBulkOperation(self, request, context):
        await self._up("StartBulkOperation", request, context)
        key = (request.shard_id, request.operation_id)
        if key not in self.ops:
            ids = sorted(self._matching(request.shard_id, request.tenant_id, request.app_id, request.filter))
            failures = [S.BulkItemFailure(task_id=i, reason="handler removed by a deploy") for i in ids
                        if request.kind == S.BULK_OPERATION_KIND_RETRY
                        and self.tasks[i].task_type not in request.registered_task_types]
            now = dt.datetime.now(UTC)
            op = S.BulkOperation(operation_id=request.operation_id, kind=request.kind, filter=request.filter,
                                 matched=len(ids), created_at=stamp(now), state=S.BULK_OPERATION_STATE_RUNNING)
            if not self.hold_bulk:
                op.state = S.BULK_OPERATION_STATE_SUCCEEDED
                op.processed, op.failed, op.succeeded = len(ids), len(failures), len(ids) - len(failures)
                op.failures.extend(failures)
                op.finished_at.CopyFrom(stamp(now))
            self.ops[key] = (request, op)
        return history_pb2.StartBulkOperationResponse(operation=self.ops[key][1])

    async def _op(self, request, context) -> tasks_pb2.BulkOperation:
        found = self.ops.get((request.shard_id, request.operation_id))
        if found is None or found[0].tenant_id != request.tenant_id:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"bulk operation {request.operation_id} not found")
        return found[1]

    async def GetBulkOperation(self, request, context):
        await self._up("GetBulkOperation", request, context)
        return history_pb2.GetBulkOperationResponse(operation=await self._op(request, context))

    async def CancelBulkOperation(self, request, context):
        await self._up("CancelBulkOperation", request, context)
        op = await self._op(request, context)
        if op.state == S.BULK_OPERATION_STATE_RUNNING:
            op.state = S.BULK_OPERATION_STATE_CANCELED
            op.finished_at.GetCurrentTime()
        return history_pb2.CancelBulkOperationResponse(operation=op)


    # -- workflows -----------------------------------------------------------
    def set_state(self, task_id: str, state: int, attempt: int | None = None) -> None:
        self.states[task_id] = self.rows[task_id].state = state
        if state in TERMINAL:
            self.rows[task_id].finished_at = dt.datetime.now(UTC)
        if attempt is not None:
            self.attempts[task_id] = attempt

    def log(self, task_id: str, *steps: wpb.Step, wait: tuple[str, dict] | None = None) -> None:
        """Append steps to a run's log; `wait` adds an open wait (name, match) at its end."""
        log = self.steps.setdefault(task_id, [])
        for st in steps:
            st.position = len(log)
            log.append(st)
        if wait is not None:
            name, match = wait
            log.append(wpb.Step(position=len(log), name=name, kind=wpb.STEP_KIND_WAIT,
                                state=wpb.STEP_STATE_RUNNING, attempt=1))
            self.waits[task_id] = (len(log) - 1, name, match)

    async def GetWorkflowSteps(self, request, context):
        self.calls.append(("GetWorkflowSteps", request))
        await self._owned(request, context, request.workflow_id)
        if not 1 <= request.page_size <= 1000:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"page_size {request.page_size}")
        log = self.steps.get(request.workflow_id, [])
        page = log[request.from_position:request.from_position + request.page_size]
        end = request.from_position + len(page)
        out = history_pb2.GetWorkflowStepsResponse(steps=page, step_count=len(log),
                                                   next_position=end if end < len(log) else -1)
        wait = self.waits.get(request.workflow_id)
        if wait is not None:
            out.pending.CopyFrom(wpb.PendingWait(position=wait[0], kind=wpb.STEP_KIND_WAIT, name=wait[1]))
            out.pending.match.update(wait[2])
        return out

    def _consume(self, task_id: str, data: dict) -> None:
        position, _, _ = self.waits.pop(task_id)
        step = self.steps[task_id][position]
        step.state = wpb.STEP_STATE_COMPLETED
        step.result.struct_value.update(data)
        if self.states[task_id] == S.TASK_STATE_WAITING:
            self.set_state(task_id, S.TASK_STATE_ENQUEUED)

    def _matches(self, task_id: str, tenant_id: str, name: str, data: dict) -> bool:
        wait = self.waits.get(task_id)
        return wait is not None and self.tasks[task_id].tenant_id == tenant_id and wait[1] == name \
            and all(data.get(k) == v for k, v in wait[2].items())

    async def DeliverEvent(self, request, context):
        await self._up("DeliverEvent", request, context)
        data = json.loads(request.data_json)
        if not request.workflow_id:
            woken = [t for t in sorted(self.waits) if self.shard_map.shard_for_task(t) == request.shard_id
                     and self._matches(t, request.tenant_id, request.name, data)]
            for t in woken:
                self._consume(t, data)
            return history_pb2.DeliverEventResponse(delivered=len(woken))
        await self._owned(request, context, request.workflow_id)
        seen = self.event_ids.get((request.workflow_id, request.event_id)) if request.event_id else None
        if seen is not None:  # (a resend: kept once, answered as the first delivery)
            return history_pb2.DeliverEventResponse(delivered=seen)
        if self.states[request.workflow_id] in TERMINAL:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the run has ended")
        delivered = 0
        if self._matches(request.workflow_id, request.tenant_id, request.name, data):
            self._consume(request.workflow_id, data)
            delivered = 1
        else:
            self.inbox.setdefault(request.workflow_id, []).append((request.name, data))
        if request.event_id:
            self.event_ids[request.workflow_id, request.event_id] = delivered
        return history_pb2.DeliverEventResponse(delivered=delivered)


    async def ListWorkflowChildren(self, request, context):
        """The fan-out's children by index (ids as history mints them; a child not created
        yet has no state); NOT_FOUND unless the position is a PARALLEL or CHILD step."""
        self.calls.append(("ListWorkflowChildren", request))
        await self._owned(request, context, request.workflow_id)
        if not 1 <= request.page_size <= 1000 or request.from_index < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"page {request.from_index}/{request.page_size}")
        log = self.steps.get(request.workflow_id, [])
        step = log[request.position] if 0 <= request.position < len(log) else None
        if step is None or step.kind not in (wpb.STEP_KIND_PARALLEL, wpb.STEP_KIND_CHILD):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no fan-out at position {request.position}")
        ids = child_ids(request.workflow_id, request.position, step.child_count)
        end = min(step.child_count, request.from_index + request.page_size)
        out = history_pb2.ListWorkflowChildrenResponse(next_index=end if end < step.child_count else -1)
        for i in range(request.from_index, end):
            c = out.children.add(index=i, child_id=ids[i])
            t = self.tasks.get(ids[i])
            if t is not None:
                c.task_type, c.state = t.task_type, self.states[ids[i]]
        return out


class FakeCron(cron_pb2_grpc.CronServiceServicer):
    """Schedules in memory, scoped to the Caller; cron "bad" is refused as the real one would."""

    def __init__(self):
        self.schedules: dict[str, tuple[cpb.Caller, spb.Schedule]] = {}
        self.calls: list[tuple[str, object]] = []

    async def _mine(self, name: str, request, context) -> spb.Schedule:
        self.calls.append((name, request))
        found = self.schedules.get(request.request.schedule_id)
        if found is None or found[0] != request.caller:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"schedule {request.request.schedule_id} not found")
        return found[1]

    async def CreateSchedule(self, request, context):
        self.calls.append(("CreateSchedule", request))
        r = request.request
        if r.cron == "bad":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "cron 'bad' is malformed: expected 5 or 6 fields")
        s = spb.Schedule(schedule_id=str(uuid.uuid4()), cron=r.cron, timezone=r.timezone or "UTC",
                         task_template=r.task_template, overlap_policy=r.overlap_policy or spb.OVERLAP_POLICY_ALLOW,
                         state=spb.SCHEDULE_STATE_ACTIVE)
        self.schedules[s.schedule_id] = (request.caller, s)
        return cpb.CreateScheduleResponse(response=spb.CreateScheduleResponse(schedule=s))

    async def GetSchedule(self, request, context):
        s = await self._mine("GetSchedule", request, context)
        return cpb.GetScheduleResponse(response=spb.GetScheduleResponse(schedule=s))

    async def ListSchedules(self, request, context):
        self.calls.append(("ListSchedules", request))
        mine = [s for c, s in self.schedules.values() if c == request.caller]
        return cpb.ListSchedulesResponse(response=spb.ListSchedulesResponse(schedules=mine))

    async def PauseSchedule(self, request, context):
        s = await self._mine("PauseSchedule", request, context)
        s.state = spb.SCHEDULE_STATE_PAUSED
        return cpb.PauseScheduleResponse(response=spb.PauseScheduleResponse(schedule=s))

    async def ResumeSchedule(self, request, context):
        s = await self._mine("ResumeSchedule", request, context)
        s.state = spb.SCHEDULE_STATE_ACTIVE
        return cpb.ResumeScheduleResponse(response=spb.ResumeScheduleResponse(schedule=s))

    async def DeleteSchedule(self, request, context):
        s = await self._mine("DeleteSchedule", request, context)
        del self.schedules[s.schedule_id]
        return cpb.DeleteScheduleResponse()

    async def TriggerSchedule(self, request, context):
        await self._mine("TriggerSchedule", request, context)
        return cpb.TriggerScheduleResponse(response=spb.TriggerScheduleResponse(task_id=new_task_id()))


class FakeDispatcher(dispatcher_pb2_grpc.BreakerAdminServiceServicer):
    """Breakers keyed (tenant, app, task_type)."""

    def __init__(self):
        self.breakers: dict[tuple[str, str, str], breakers_pb2.Breaker] = {}
        self.calls: list[tuple[str, object]] = []

    async def ListBreakers(self, request, context):
        self.calls.append(("ListBreakers", request))
        return dispatcher_pb2.ListBreakersResponse(breakers=[
            b for (t, a, _), b in sorted(self.breakers.items()) if (t, a) == (request.tenant_id, request.app_id)])

    async def ResetBreaker(self, request, context):
        self.calls.append(("ResetBreaker", request))
        key = (request.tenant_id, request.app_id, request.task_type)
        b = self.breakers.setdefault(key, breakers_pb2.Breaker(task_type=request.task_type))
        b.state, b.reason, b.crashes = breakers_pb2.BREAKER_STATE_CLOSED, "", 0
        b.ClearField("opened_at")
        b.ClearField("probe_at")
        return dispatcher_pb2.ResetBreakerResponse(breaker=b)


async def start_peers(history: FakeHistory, cron: FakeCron, dispatcher: FakeDispatcher
                      ) -> tuple[grpc.aio.Server, int]:
    """One real grpc.aio server serving all three fakes (each target points at it)."""
    server = grpc.aio.server()
    history_pb2_grpc.add_HistoryServiceServicer_to_server(history, server)
    cron_pb2_grpc.add_CronServiceServicer_to_server(cron, server)
    dispatcher_pb2_grpc.add_BreakerAdminServiceServicer_to_server(dispatcher, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port
