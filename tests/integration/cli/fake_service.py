"""A stand-in for any Ratchet service, to test the local platform's process
management without the real mesh: gRPC health SERVING on the configured port
and, when the config looks like the gateway's, tiny in-memory Tenant, Task
and App services.

    python -m tests.integration.cli.fake_service --config FILE

Extra config keys steer it: fake_exit_code (exit at once with that code).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import uuid

import grpc

from ratchet.api.apps.v1 import apps_pb2, apps_pb2_grpc
from ratchet.api.tasks.v1 import tasks_pb2, tasks_pb2_grpc
from ratchet.api.tenants.v1 import tenants_pb2, tenants_pb2_grpc
from ratchet.libs.rpc.server import Server, run_until_signal


def _bearer(context) -> str:
    value = dict(context.invocation_metadata()).get("authorization", "")
    return value.partition(" ")[2]


class Tenants(tenants_pb2_grpc.TenantServiceServicer):
    def __init__(self, admin_sha: str, keys: dict):
        self.admin_sha, self.keys = admin_sha, keys

    async def CreateTenant(self, request, context):
        if hashlib.sha256(_bearer(context).encode()).hexdigest() != self.admin_sha:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "admin key required")
        if request.name in self.keys.values():
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"tenant {request.name} exists")
        key = f"rk_fake_{uuid.uuid4().hex}"
        self.keys[key] = request.name
        return tenants_pb2.CreateTenantResponse(tenant_id=str(uuid.uuid4()), app_id=str(uuid.uuid4()),
                                                app="default", api_key=key)


class Tasks(tasks_pb2_grpc.TaskServiceServicer):
    """Every task succeeds at once with {"echo": payload}."""

    def __init__(self, keys: dict):
        self.keys, self.tasks, self.by_key = keys, {}, {}

    async def _auth(self, context):
        if _bearer(context) not in self.keys:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "unknown or revoked API key")

    async def EnqueueTask(self, request, context):
        await self._auth(context)
        if request.idempotency_key in self.by_key:
            return tasks_pb2.EnqueueTaskResponse(task_id=self.by_key[request.idempotency_key], deduplicated=True)
        task_id = str(uuid.uuid4())
        task = tasks_pb2.Task(task_id=task_id, task_type=request.task_type, queue=request.queue or "default",
                              state=tasks_pb2.TASK_STATE_SUCCEEDED, attempt=1, max_attempts=5,
                              idempotency_key=request.idempotency_key)
        task.payload.CopyFrom(request.payload)
        task.result.struct_value.fields["echo"].CopyFrom(request.payload)
        self.tasks[task_id] = task
        self.by_key[request.idempotency_key] = task_id
        return tasks_pb2.EnqueueTaskResponse(task_id=task_id)

    async def GetTask(self, request, context):
        await self._auth(context)
        if request.task_id not in self.tasks:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"task {request.task_id} not found")
        return tasks_pb2.GetTaskResponse(task=self.tasks[request.task_id])

    async def CancelTask(self, request, context):
        task = (await self.GetTask(request, context)).task
        return tasks_pb2.CancelTaskResponse(state=task.state)


class Apps(apps_pb2_grpc.AppServiceServicer):
    async def CreateDeployment(self, request, context):
        if "sha256:" + hashlib.sha256(request.bundle).hexdigest() != request.digest:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "digest does not match the bundle")
        return apps_pb2.CreateDeploymentResponse(deployment=apps_pb2.Deployment(
            app=request.app, digest=request.digest, module=request.module, handlers=request.handlers,
            created=True))


async def serve(config: dict) -> None:
    register, names = [], []
    if "control_dsn" in config:
        keys: dict = {}
        register = [(tenants_pb2_grpc.add_TenantServiceServicer_to_server, Tenants(config["admin_key_sha256"], keys)),
                    (tasks_pb2_grpc.add_TaskServiceServicer_to_server, Tasks(keys)),
                    (apps_pb2_grpc.add_AppServiceServicer_to_server, Apps())]
        names = ["ratchet.api.tenants.v1.TenantService", "ratchet.api.tasks.v1.TaskService",
                 "ratchet.api.apps.v1.AppService"]
    server = Server(register, names, host=config.get("host", "127.0.0.1"), port=config["grpc_port"])

    async def main(stop: asyncio.Event) -> None:
        await server.start()
        await server.set_serving(True)
        await stop.wait()
        await server.stop(0.5)

    await run_until_signal(main)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    with open(parser.parse_args().config) as f:
        config = json.load(f)
    if config.get("fake_exit_code") is not None:
        print("fake service: exiting on purpose", flush=True)
        return int(config["fake_exit_code"])
    asyncio.run(serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
