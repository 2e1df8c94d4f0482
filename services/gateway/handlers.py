"""The thin RPC edge: authenticate, call the domain, nothing else.

gRPC (server.py) and REST (rest/) both dispatch here, method by method, from
the proto descriptors, so both transports give the same answers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar

from google.protobuf import descriptor as _descriptor
from google.protobuf.message import Message

from ratchet.api.apps.v1 import apps_pb2, apps_pb2_grpc
from ratchet.api.schedules.v1 import schedules_pb2, schedules_pb2_grpc
from ratchet.api.tasks.v1 import breakers_pb2, breakers_pb2_grpc, tasks_pb2, tasks_pb2_grpc
from ratchet.api.tenants.v1 import tenants_pb2, tenants_pb2_grpc
from ratchet.api.workflows.v1 import workflows_pb2, workflows_pb2_grpc
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.libs.rpc import errors
from ratchet.services.gateway import tenants
from ratchet.services.gateway.auth import Authenticator
from ratchet.services.gateway.breakers import BreakerApi
from ratchet.services.gateway.bulk import BulkApi
from ratchet.services.gateway.children import ChildrenApi
from ratchet.services.gateway.deployments import Deployments
from ratchet.services.gateway.listing import TaskLister
from ratchet.services.gateway.schedules import ScheduleApi
from ratchet.services.gateway.store import ControlStore
from ratchet.services.gateway.tasks import TaskApi
from ratchet.services.gateway.workflows import WorkflowApi


@dataclasses.dataclass(frozen=True)
class Call:
    """What a handler knows of the call: lower-case metadata and time left (seconds)."""

    metadata: Mapping[str, str]
    timeout: float


Handler = Callable[[Message, Call], Awaitable[Message]]


class TaskHandlers:
    """ratchet.api.tasks.v1.TaskService."""

    service = tasks_pb2.DESCRIPTOR.services_by_name["TaskService"]
    add_to_server = staticmethod(tasks_pb2_grpc.add_TaskServiceServicer_to_server)
    # Streaming RPCs that carry calls of unary ones as messages (libs/rpc/callstream):
    # stream method -> ((call field, unary method, answer field), ...). A call carries at
    # most one of the fields; one with none is a call of the first method (an empty request).
    call_streams: ClassVar[dict[str, tuple[tuple[str, str, str], ...]]] = {
        "EnqueueTaskStream": (("request", "EnqueueTask", "response"), ("batch", "EnqueueTasks", "batch_response"))}

    def __init__(self, auth: Authenticator, tasks: TaskApi, lister: TaskLister, bulk: BulkApi):
        self.auth, self.tasks, self.lister, self.bulk = auth, tasks, lister, bulk

    async def EnqueueTask(self, req: tasks_pb2.EnqueueTaskRequest, call: Call) -> tasks_pb2.EnqueueTaskResponse:
        return await self.tasks.enqueue(await self.auth.app(call.metadata), req, call.timeout)

    async def EnqueueTasks(self, req: tasks_pb2.EnqueueTasksRequest, call: Call) -> tasks_pb2.EnqueueTasksResponse:
        return await self.tasks.enqueue_batch(await self.auth.app(call.metadata), req, call.timeout)

    async def GetTask(self, req: tasks_pb2.GetTaskRequest, call: Call) -> tasks_pb2.GetTaskResponse:
        return await self.tasks.get(await self.auth.app(call.metadata), req, call.timeout)

    async def CancelTask(self, req: tasks_pb2.CancelTaskRequest, call: Call) -> tasks_pb2.CancelTaskResponse:
        return await self.tasks.cancel(await self.auth.app(call.metadata), req, call.timeout)

    async def ListTasks(self, req: tasks_pb2.ListTasksRequest, call: Call) -> tasks_pb2.ListTasksResponse:
        return await self.lister.list(await self.auth.app(call.metadata), req, call.timeout)

    async def RetryTasks(self, req: tasks_pb2.RetryTasksRequest, call: Call) -> tasks_pb2.RetryTasksResponse:
        return await self.bulk.retry(await self.auth.app(call.metadata), req, call.timeout)

    async def CancelTasks(self, req: tasks_pb2.CancelTasksRequest, call: Call) -> tasks_pb2.CancelTasksResponse:
        return await self.bulk.cancel_tasks(await self.auth.app(call.metadata), req, call.timeout)

    async def GetBulkOperation(self, req: tasks_pb2.GetBulkOperationRequest,
                               call: Call) -> tasks_pb2.GetBulkOperationResponse:
        return await self.bulk.get(await self.auth.app(call.metadata), req, call.timeout)

    async def CancelBulkOperation(self, req: tasks_pb2.CancelBulkOperationRequest,
                                  call: Call) -> tasks_pb2.CancelBulkOperationResponse:
        return await self.bulk.cancel(await self.auth.app(call.metadata), req, call.timeout)


class WorkflowHandlers:
    """ratchet.api.workflows.v1.WorkflowService."""

    service = workflows_pb2.DESCRIPTOR.services_by_name["WorkflowService"]
    add_to_server = staticmethod(workflows_pb2_grpc.add_WorkflowServiceServicer_to_server)

    def __init__(self, auth: Authenticator, workflows: WorkflowApi):
        self.auth, self.workflows = auth, workflows

    async def StartWorkflow(self, req: workflows_pb2.StartWorkflowRequest,
                            call: Call) -> workflows_pb2.StartWorkflowResponse:
        return await self.workflows.start(await self.auth.app(call.metadata), req, call.timeout)

    async def GetWorkflow(self, req: workflows_pb2.GetWorkflowRequest, call: Call) -> workflows_pb2.GetWorkflowResponse:
        return await self.workflows.get(await self.auth.app(call.metadata), req, call.timeout)

    async def ListWorkflowChildren(self, req: workflows_pb2.ListWorkflowChildrenRequest,
                                   call: Call) -> workflows_pb2.ListWorkflowChildrenResponse:
        return await self.workflows.children(await self.auth.app(call.metadata), req, call.timeout)

    async def ListWorkflows(self, req: workflows_pb2.ListWorkflowsRequest,
                            call: Call) -> workflows_pb2.ListWorkflowsResponse:
        return await self.workflows.list_runs(await self.auth.app(call.metadata), req, call.timeout)

    async def CancelWorkflow(self, req: workflows_pb2.CancelWorkflowRequest,
                             call: Call) -> workflows_pb2.CancelWorkflowResponse:
        return await self.workflows.cancel(await self.auth.app(call.metadata), req, call.timeout)

    async def SendEvent(self, req: workflows_pb2.SendEventRequest, call: Call) -> workflows_pb2.SendEventResponse:
        return await self.workflows.broadcast(await self.auth.app(call.metadata), req, call.timeout)

    async def SendWorkflowEvent(self, req: workflows_pb2.SendWorkflowEventRequest,
                                call: Call) -> workflows_pb2.SendWorkflowEventResponse:
        return await self.workflows.send_to_run(await self.auth.app(call.metadata), req, call.timeout)


class BreakerHandlers:
    """ratchet.api.tasks.v1.BreakerService (forwarded to the dispatcher)."""

    service = breakers_pb2.DESCRIPTOR.services_by_name["BreakerService"]
    add_to_server = staticmethod(breakers_pb2_grpc.add_BreakerServiceServicer_to_server)

    def __init__(self, auth: Authenticator, breakers: BreakerApi):
        self.auth, self.breakers = auth, breakers

    async def ListBreakers(self, req: breakers_pb2.ListBreakersRequest,
                           call: Call) -> breakers_pb2.ListBreakersResponse:
        return await self.breakers.list(await self.auth.app(call.metadata), req, call.timeout)

    async def ResetBreaker(self, req: breakers_pb2.ResetBreakerRequest,
                           call: Call) -> breakers_pb2.ResetBreakerResponse:
        return await self.breakers.reset(await self.auth.app(call.metadata), req, call.timeout)


class ScheduleHandlers:
    """ratchet.api.schedules.v1.ScheduleService (forwarded to the cron service)."""

    service = schedules_pb2.DESCRIPTOR.services_by_name["ScheduleService"]
    add_to_server = staticmethod(schedules_pb2_grpc.add_ScheduleServiceServicer_to_server)

    def __init__(self, auth: Authenticator, schedules: ScheduleApi):
        self.auth, self.schedules = auth, schedules

    async def CreateSchedule(self, req: schedules_pb2.CreateScheduleRequest,
                             call: Call) -> schedules_pb2.CreateScheduleResponse:
        return await self.schedules.create(await self.auth.app(call.metadata), req, call.timeout)

    async def _forward(self, rpc: str, req: Message, call: Call) -> Message:
        return await self.schedules.forward(rpc, await self.auth.app(call.metadata), req, call.timeout)

    async def GetSchedule(self, req: schedules_pb2.GetScheduleRequest, call: Call) -> Message:
        return await self._forward("GetSchedule", req, call)

    async def ListSchedules(self, req: schedules_pb2.ListSchedulesRequest, call: Call) -> Message:
        return await self._forward("ListSchedules", req, call)

    async def PauseSchedule(self, req: schedules_pb2.PauseScheduleRequest, call: Call) -> Message:
        return await self._forward("PauseSchedule", req, call)

    async def ResumeSchedule(self, req: schedules_pb2.ResumeScheduleRequest, call: Call) -> Message:
        return await self._forward("ResumeSchedule", req, call)

    async def DeleteSchedule(self, req: schedules_pb2.DeleteScheduleRequest, call: Call) -> Message:
        return await self._forward("DeleteSchedule", req, call)

    async def TriggerSchedule(self, req: schedules_pb2.TriggerScheduleRequest, call: Call) -> Message:
        return await self._forward("TriggerSchedule", req, call)


class AppHandlers:
    """ratchet.api.apps.v1.AppService."""

    service = apps_pb2.DESCRIPTOR.services_by_name["AppService"]
    add_to_server = staticmethod(apps_pb2_grpc.add_AppServiceServicer_to_server)

    def __init__(self, auth: Authenticator, deployments: Deployments):
        self.auth, self.deployments = auth, deployments

    async def CreateDeployment(self, req: apps_pb2.CreateDeploymentRequest,
                               call: Call) -> apps_pb2.CreateDeploymentResponse:
        dep = await self.deployments.create(await self.auth.app(call.metadata), req, call.timeout)
        return apps_pb2.CreateDeploymentResponse(deployment=dep)


class TenantHandlers:
    """ratchet.api.tenants.v1.TenantService (admin key only)."""

    service = tenants_pb2.DESCRIPTOR.services_by_name["TenantService"]
    add_to_server = staticmethod(tenants_pb2_grpc.add_TenantServiceServicer_to_server)

    def __init__(self, auth: Authenticator, store: ControlStore):
        self.auth, self.store = auth, store

    async def CreateTenant(self, req: tenants_pb2.CreateTenantRequest, call: Call) -> tenants_pb2.CreateTenantResponse:
        self.auth.admin(call.metadata)
        return await tenants.create_tenant(self.store, req)


class ControlHandlers:
    """ratchet.internal.gateway.v1.ControlService (mesh tokens only: host agents and
    the cron service, config host_token_sha256; gRPC only)."""

    service = control_pb2.DESCRIPTOR.services_by_name["ControlService"]
    add_to_server = staticmethod(control_pb2_grpc.add_ControlServiceServicer_to_server)

    def __init__(self, auth: Authenticator, deployments: Deployments, tasks: TaskApi, children: ChildrenApi):
        self.auth, self.deployments, self.tasks, self.children = auth, deployments, tasks, children

    async def GetActiveDeployment(self, req: control_pb2.GetActiveDeploymentRequest,
                                  call: Call) -> control_pb2.GetActiveDeploymentResponse:
        self.auth.host(call.metadata)
        tenant_id, dep = await self.deployments.active(req.app_id)
        return control_pb2.GetActiveDeploymentResponse(app_id=req.app_id, tenant_id=tenant_id, deployment=dep)

    async def GetBundle(self, req: control_pb2.GetBundleRequest, call: Call) -> control_pb2.GetBundleResponse:
        self.auth.host(call.metadata)
        return control_pb2.GetBundleResponse(bundle=await self.deployments.bundle(req.digest))

    async def EnqueueScheduled(self, req: control_pb2.EnqueueScheduledRequest,
                               call: Call) -> control_pb2.EnqueueScheduledResponse:
        self.auth.host(call.metadata)
        return await self.tasks.enqueue_scheduled(req, call.timeout)

    async def StartChildren(self, req: control_pb2.StartChildrenRequest,
                            call: Call) -> control_pb2.StartChildrenResponse:
        self.auth.host(call.metadata)
        return await self.children.start(req, call.timeout)


def method(handlers: object, m: _descriptor.MethodDescriptor) -> Handler:
    """The handler of one RPC; every method a service declares must have one."""
    fn = getattr(handlers, m.name, None)
    if fn is None:
        raise RuntimeError(f"{type(handlers).__name__} does not implement {m.full_name}")
    return fn


async def invoke(fn: Handler, req: Message, call: Call) -> Message:
    """Run a handler; whatever it raises leaves as a ServiceError (libs/rpc/errors.status_of:
    a timeout is DEADLINE_EXCEEDED, anything else INTERNAL, logged with its traceback)."""
    try:
        return await fn(req, call)
    except errors.ServiceError:
        raise
    except Exception as e:  # the edge: every transport answers what status_of makes of it
        raise errors.status_of(e, getattr(fn, "__name__", str(fn))) from e
