"""An in-process TaskService that fails on cue and records what it received."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc

from ratchet.api.tasks.v1 import tasks_pb2, tasks_pb2_grpc


class FakeTasks(tasks_pb2_grpc.TaskServiceServicer):
    """Fails the first `fail_with` codes in order, then answers; records every request."""

    def __init__(self):
        self.fail_with: list[grpc.StatusCode] = []
        self.requests: list = []
        self.metadata: list[dict] = []
        self.tasks: dict[str, tasks_pb2.Task] = {}
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
        return tasks_pb2.EnqueueTaskResponse(task_id=f"task-for-{request.idempotency_key}")

    def EnqueueTasks(self, request, context):
        self._maybe_fail(request, context)
        return tasks_pb2.EnqueueTasksResponse(task_ids=[f"task-for-{t.idempotency_key}" for t in request.tasks])

    def GetTask(self, request, context):
        self._maybe_fail(request, context)
        task = self.tasks.get(request.task_id)
        if task is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"task {request.task_id} not found")
        return tasks_pb2.GetTaskResponse(task=task)

    def CancelTask(self, request, context):
        self._maybe_fail(request, context)
        return tasks_pb2.CancelTaskResponse(state=tasks_pb2.TASK_STATE_CANCELED)


class FakeServer:
    """Serves FakeTasks on a loopback port for the length of a test."""

    def __init__(self):
        self.tasks = FakeTasks()
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        tasks_pb2_grpc.add_TaskServiceServicer_to_server(self.tasks, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(0)
