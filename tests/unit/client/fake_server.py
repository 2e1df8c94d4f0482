"""An in-process gateway (TaskService, ScheduleService, BreakerService) that
fails on cue and records what it received."""

from __future__ import annotations

import hashlib
import threading
from concurrent import futures

import grpc
from google.protobuf import timestamp_pb2

from ratchet.api.schedules.v1 import schedules_pb2, schedules_pb2_grpc
from ratchet.api.tasks.v1 import breakers_pb2, breakers_pb2_grpc, tasks_pb2, tasks_pb2_grpc


class FakeTasks(tasks_pb2_grpc.TaskServiceServicer):
    """Fails the first `fail_with` codes in order, then answers; records every request."""

    def __init__(self):
        self.fail_with: list[grpc.StatusCode] = []
        self.requests: list = []
        self.metadata: list[dict] = []
        self.tasks: dict[str, tasks_pb2.Task] = {}
        self.listable: list[tasks_pb2.Task] = []  # what ListTasks pages through, in order
        self.operations: dict[str, tasks_pb2.BulkOperation] = {}
        self.lock = threading.Lock()

    def _maybe_fail(self, request, context):
        with self.lock:
            self.requests.append(request)
            self.metadata.append(dict(context.invocation_metadata()))
            code = self.fail_with.pop(0) if self.fail_with else None
        if code is not None:
            context.abort(code, f"injected {code.name}")

    def EnqueueTask(self, request, context):
        self._maybe_fail(request, context)
        return tasks_pb2.EnqueueTaskResponse(task_id=request.task_id or f"task-for-{request.idempotency_key}")

    def EnqueueTasks(self, request, context):
        self._maybe_fail(request, context)
        if request.HasField("columns"):
            return tasks_pb2.EnqueueTasksResponse(task_ids=request.columns.task_ids)
        return tasks_pb2.EnqueueTasksResponse(task_ids=[t.task_id or f"task-for-{t.idempotency_key}"
                                                        for t in request.tasks])

    def GetTask(self, request, context):
        self._maybe_fail(request, context)
        task = self.tasks.get(request.task_id)
        if task is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"task {request.task_id} not found")
        return tasks_pb2.GetTaskResponse(task=task)

    def CancelTask(self, request, context):
        self._maybe_fail(request, context)
        return tasks_pb2.CancelTaskResponse(state=tasks_pb2.TASK_STATE_CANCELED)

    def ListTasks(self, request, context):
        self._maybe_fail(request, context)
        # Like the gateway: the token is bound to the filter, so a changed filter is refused.
        bare = tasks_pb2.ListTasksRequest()
        bare.CopyFrom(request)
        bare.ClearField("page_token")
        bare.ClearField("page_size")
        digest = hashlib.sha256(bare.SerializeToString(deterministic=True)).hexdigest()[:8]
        offset = 0
        if request.page_token:
            token_digest, _, start = request.page_token.partition(":")
            if token_digest != digest:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_token belongs to a different filter")
            offset = int(start)
        size = request.page_size or 100
        page = self.listable[offset:offset + size]
        more = offset + size < len(self.listable)
        return tasks_pb2.ListTasksResponse(tasks=page, next_page_token=f"{digest}:{offset + size}" if more else "")

    def _start(self, kind, request, context):
        self._maybe_fail(request, context)
        matched = 3
        if request.dry_run:
            return matched, None
        op_id = f"op-{request.request_id}"
        with self.lock:
            op = self.operations.setdefault(op_id, tasks_pb2.BulkOperation(
                operation_id=op_id, kind=kind, state=tasks_pb2.BULK_OPERATION_STATE_RUNNING,
                filter=request.filter, matched=matched, created_at=timestamp_pb2.Timestamp(seconds=1_767_225_600)))
        return matched, op

    def RetryTasks(self, request, context):
        matched, op = self._start(tasks_pb2.BULK_OPERATION_KIND_RETRY, request, context)
        return tasks_pb2.RetryTasksResponse(matched=matched, operation=op)

    def CancelTasks(self, request, context):
        matched, op = self._start(tasks_pb2.BULK_OPERATION_KIND_CANCEL, request, context)
        return tasks_pb2.CancelTasksResponse(matched=matched, operation=op)

    def _operation(self, request, context) -> tasks_pb2.BulkOperation:
        self._maybe_fail(request, context)
        op = self.operations.get(request.operation_id)
        if op is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"operation {request.operation_id} not found")
        return op

    def GetBulkOperation(self, request, context):
        op = self._operation(request, context)
        with self.lock:  # one item per read, one of them failing
            if op.state == tasks_pb2.BULK_OPERATION_STATE_RUNNING:
                op.processed += 1
                if op.processed == 2:
                    op.failed += 1
                    op.failures.add(task_id="t-2", reason="task type 'gone' is not registered")
                else:
                    op.succeeded += 1
                if op.processed == op.matched:
                    op.state = tasks_pb2.BULK_OPERATION_STATE_SUCCEEDED
                    op.finished_at.FromSeconds(1_767_225_660)
        return tasks_pb2.GetBulkOperationResponse(operation=op)

    def CancelBulkOperation(self, request, context):
        op = self._operation(request, context)
        with self.lock:
            if op.state == tasks_pb2.BULK_OPERATION_STATE_RUNNING:
                op.state = tasks_pb2.BULK_OPERATION_STATE_CANCELED
        return tasks_pb2.CancelBulkOperationResponse(operation=op)


class FakeSchedules(schedules_pb2_grpc.ScheduleServiceServicer):
    """Schedules in a dict; creation is idempotent per request_id, as the contract says."""

    def __init__(self, tasks: FakeTasks):
        self._fail = tasks._maybe_fail  # one failure script and request log for the whole gateway
        self.schedules: dict[str, schedules_pb2.Schedule] = {}
        self.by_request: dict[str, str] = {}
        self.deleted_once: set[str] = set()

    def _get(self, schedule_id, context) -> schedules_pb2.Schedule:
        if schedule_id not in self.schedules:
            context.abort(grpc.StatusCode.NOT_FOUND, f"schedule {schedule_id} not found")
        return self.schedules[schedule_id]

    def CreateSchedule(self, request, context):
        if request.cron.startswith("61 "):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "cron: minute 61 is out of range 0..59")
        sid = self.by_request.get(request.request_id) or f"sch-{len(self.schedules) + 1}"
        if sid not in self.schedules:
            self.by_request[request.request_id] = sid
            self.schedules[sid] = schedules_pb2.Schedule(
                schedule_id=sid, cron=request.cron, timezone=request.timezone, task_template=request.task_template,
                overlap_policy=request.overlap_policy, state=schedules_pb2.SCHEDULE_STATE_ACTIVE,
                next_fire_time=timestamp_pb2.Timestamp(seconds=1_767_225_600))
            if request.HasField("catchup_window"):
                self.schedules[sid].catchup_window.CopyFrom(request.catchup_window)
        self._fail(request, context)  # after the write: the answer is lost, the schedule exists
        return schedules_pb2.CreateScheduleResponse(schedule=self.schedules[sid])

    def GetSchedule(self, request, context):
        self._fail(request, context)
        return schedules_pb2.GetScheduleResponse(schedule=self._get(request.schedule_id, context))

    def ListSchedules(self, request, context):
        self._fail(request, context)
        items = sorted(self.schedules)
        start = int(request.page_token or 0)
        size = request.page_size or 100
        more = start + size < len(items)
        return schedules_pb2.ListSchedulesResponse(schedules=[self.schedules[k] for k in items[start:start + size]],
                                                   next_page_token=str(start + size) if more else "")

    def PauseSchedule(self, request, context):
        self._fail(request, context)
        s = self._get(request.schedule_id, context)
        s.state = schedules_pb2.SCHEDULE_STATE_PAUSED
        s.ClearField("next_fire_time")
        return schedules_pb2.PauseScheduleResponse(schedule=s)

    def ResumeSchedule(self, request, context):
        self._fail(request, context)
        s = self._get(request.schedule_id, context)
        s.state = schedules_pb2.SCHEDULE_STATE_ACTIVE
        s.next_fire_time.FromSeconds(1_767_225_600)
        return schedules_pb2.ResumeScheduleResponse(schedule=s)

    def DeleteSchedule(self, request, context):
        self._get(request.schedule_id, context)
        del self.schedules[request.schedule_id]
        self._fail(request, context)  # after the write, as a lost answer
        return schedules_pb2.DeleteScheduleResponse()

    def TriggerSchedule(self, request, context):
        self._fail(request, context)
        s = self._get(request.schedule_id, context)
        if s.overlap_policy == schedules_pb2.OVERLAP_POLICY_SKIP:
            return schedules_pb2.TriggerScheduleResponse(skipped=True)
        return schedules_pb2.TriggerScheduleResponse(task_id=f"task-of-{s.schedule_id}")


class FakeBreakers(breakers_pb2_grpc.BreakerServiceServicer):
    """One open breaker on "poison"."""

    def __init__(self, tasks: FakeTasks):
        self._fail = tasks._maybe_fail
        self.breakers = {"poison": breakers_pb2.Breaker(
            task_type="poison", state=breakers_pb2.BREAKER_STATE_OPEN, crashes=5,
            reason="5 sandbox crashes within 60s", opened_at=timestamp_pb2.Timestamp(seconds=1_767_225_600),
            probe_at=timestamp_pb2.Timestamp(seconds=1_767_225_900),
            last_crashes=[breakers_pb2.BreakerCrash(task_id="t-9", error_class="SandboxCrashed",
                                                    message="signal 9", at=timestamp_pb2.Timestamp(seconds=1))])}

    def ListBreakers(self, request, context):
        self._fail(request, context)
        return breakers_pb2.ListBreakersResponse(breakers=list(self.breakers.values()))

    def ResetBreaker(self, request, context):
        self._fail(request, context)
        if request.task_type not in self.breakers:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no breaker for task type {request.task_type!r}")
        b = self.breakers.pop(request.task_type)
        return breakers_pb2.ResetBreakerResponse(breaker=breakers_pb2.Breaker(
            task_type=b.task_type, state=breakers_pb2.BREAKER_STATE_CLOSED))


class FakeServer:
    """Serves the fakes on a loopback port for the length of a test."""

    def __init__(self):
        self.tasks = FakeTasks()
        self.schedules = FakeSchedules(self.tasks)
        self.breakers = FakeBreakers(self.tasks)
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        tasks_pb2_grpc.add_TaskServiceServicer_to_server(self.tasks, self.server)
        schedules_pb2_grpc.add_ScheduleServiceServicer_to_server(self.schedules, self.server)
        breakers_pb2_grpc.add_BreakerServiceServicer_to_server(self.breakers, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(0)
