import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from ratchet.api.tasks.v1 import tasks_pb2 as _tasks_pb2
from ratchet.api.workflows.v1 import workflows_pb2 as _workflows_pb2
from ratchet.internal.worker.v1 import worker_pb2 as _worker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NewTask(_message.Message):
    __slots__ = ("task_id", "tenant_id", "app_id", "task_type", "queue", "payload_json", "delay", "run_at", "idempotency_key", "fingerprint", "retry", "timeouts", "non_retryable", "schedule_id", "scheduled_time", "parent")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUTS_FIELD_NUMBER: _ClassVar[int]
    NON_RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_TIME_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    tenant_id: str
    app_id: str
    task_type: str
    queue: str
    payload_json: bytes
    delay: _duration_pb2.Duration
    run_at: _timestamp_pb2.Timestamp
    idempotency_key: str
    fingerprint: str
    retry: _tasks_pb2.RetryPolicy
    timeouts: _tasks_pb2.Timeouts
    non_retryable: _containers.RepeatedScalarFieldContainer[str]
    schedule_id: str
    scheduled_time: _timestamp_pb2.Timestamp
    parent: ChildOf
    def __init__(self, task_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., task_type: _Optional[str] = ..., queue: _Optional[str] = ..., payload_json: _Optional[bytes] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., fingerprint: _Optional[str] = ..., retry: _Optional[_Union[_tasks_pb2.RetryPolicy, _Mapping]] = ..., timeouts: _Optional[_Union[_tasks_pb2.Timeouts, _Mapping]] = ..., non_retryable: _Optional[_Iterable[str]] = ..., schedule_id: _Optional[str] = ..., scheduled_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., parent: _Optional[_Union[ChildOf, _Mapping]] = ...) -> None: ...

class ChildOf(_message.Message):
    __slots__ = ("parent_id", "position", "index")
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    parent_id: str
    position: int
    index: int
    def __init__(self, parent_id: _Optional[str] = ..., position: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class CreateTasksRequest(_message.Message):
    __slots__ = ("shard_id", "tasks", "shared", "columns")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    tasks: _containers.RepeatedCompositeFieldContainer[NewTask]
    shared: NewTask
    columns: TaskColumns
    def __init__(self, shard_id: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[NewTask, _Mapping]]] = ..., shared: _Optional[_Union[NewTask, _Mapping]] = ..., columns: _Optional[_Union[TaskColumns, _Mapping]] = ...) -> None: ...

class TaskColumns(_message.Message):
    __slots__ = ("task_ids", "payloads_json")
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    PAYLOADS_JSON_FIELD_NUMBER: _ClassVar[int]
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    payloads_json: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, task_ids: _Optional[_Iterable[str]] = ..., payloads_json: _Optional[_Iterable[bytes]] = ...) -> None: ...

class CreateResult(_message.Message):
    __slots__ = ("task_id", "deduplicated", "conflict")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    deduplicated: bool
    conflict: bool
    def __init__(self, task_id: _Optional[str] = ..., deduplicated: _Optional[bool] = ..., conflict: _Optional[bool] = ...) -> None: ...

class CreateTasksResponse(_message.Message):
    __slots__ = ("results", "all_created")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ALL_CREATED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreateResult]
    all_created: bool
    def __init__(self, results: _Optional[_Iterable[_Union[CreateResult, _Mapping]]] = ..., all_created: _Optional[bool] = ...) -> None: ...

class CreateTasksStreamRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[CreateTasksCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[CreateTasksCall, _Mapping]]] = ...) -> None: ...

class CreateTasksCall(_message.Message):
    __slots__ = ("call_id", "request", "timeout_ms")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    request: CreateTasksRequest
    timeout_ms: int
    def __init__(self, call_id: _Optional[int] = ..., request: _Optional[_Union[CreateTasksRequest, _Mapping]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class CreateTasksStreamResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[CreateTasksAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[CreateTasksAnswer, _Mapping]]] = ...) -> None: ...

class CreateTasksAnswer(_message.Message):
    __slots__ = ("call_id", "response", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    response: CreateTasksResponse
    error: CallError
    def __init__(self, call_id: _Optional[int] = ..., response: _Optional[_Union[CreateTasksResponse, _Mapping]] = ..., error: _Optional[_Union[CallError, _Mapping]] = ...) -> None: ...

class CallError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("shard_id", "task_id", "tenant_id")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    task_id: str
    tenant_id: str
    def __init__(self, shard_id: _Optional[int] = ..., task_id: _Optional[str] = ..., tenant_id: _Optional[str] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: _tasks_pb2.Task
    def __init__(self, task: _Optional[_Union[_tasks_pb2.Task, _Mapping]] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("shard_id", "task_id", "tenant_id")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    task_id: str
    tenant_id: str
    def __init__(self, shard_id: _Optional[int] = ..., task_id: _Optional[str] = ..., tenant_id: _Optional[str] = ...) -> None: ...

class CancelTaskResponse(_message.Message):
    __slots__ = ("state", "cancel_requested")
    STATE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    state: _tasks_pb2.TaskState
    cancel_requested: bool
    def __init__(self, state: _Optional[_Union[_tasks_pb2.TaskState, str]] = ..., cancel_requested: _Optional[bool] = ...) -> None: ...

class LeaseTasksRequest(_message.Message):
    __slots__ = ("shard_id", "worker_id", "max_tasks", "app_ids", "tenant_cursor", "lease_duration", "type_limits")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    APP_IDS_FIELD_NUMBER: _ClassVar[int]
    TENANT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    TYPE_LIMITS_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    worker_id: str
    max_tasks: int
    app_ids: _containers.RepeatedScalarFieldContainer[str]
    tenant_cursor: str
    lease_duration: _duration_pb2.Duration
    type_limits: _containers.RepeatedCompositeFieldContainer[TaskTypeLimit]
    def __init__(self, shard_id: _Optional[int] = ..., worker_id: _Optional[str] = ..., max_tasks: _Optional[int] = ..., app_ids: _Optional[_Iterable[str]] = ..., tenant_cursor: _Optional[str] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., type_limits: _Optional[_Iterable[_Union[TaskTypeLimit, _Mapping]]] = ...) -> None: ...

class TaskTypeLimit(_message.Message):
    __slots__ = ("tenant_id", "app_id", "task_type", "max_tasks")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    app_id: str
    task_type: str
    max_tasks: int
    def __init__(self, tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., task_type: _Optional[str] = ..., max_tasks: _Optional[int] = ...) -> None: ...

class LeaseTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_tenant_cursor", "more")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_TENANT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[_worker_pb2.LeasedTask]
    next_tenant_cursor: str
    more: bool
    def __init__(self, tasks: _Optional[_Iterable[_Union[_worker_pb2.LeasedTask, _Mapping]]] = ..., next_tenant_cursor: _Optional[str] = ..., more: _Optional[bool] = ...) -> None: ...

class RecordHeartbeatsRequest(_message.Message):
    __slots__ = ("shard_id", "leases", "lease_duration")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    leases: _containers.RepeatedCompositeFieldContainer[_worker_pb2.LeaseRef]
    lease_duration: _duration_pb2.Duration
    def __init__(self, shard_id: _Optional[int] = ..., leases: _Optional[_Iterable[_Union[_worker_pb2.LeaseRef, _Mapping]]] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RecordHeartbeatsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_worker_pb2.HeartbeatResult]
    def __init__(self, results: _Optional[_Iterable[_Union[_worker_pb2.HeartbeatResult, _Mapping]]] = ...) -> None: ...

class CompleteTasksRequest(_message.Message):
    __slots__ = ("shard_id", "completions")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    completions: _containers.RepeatedCompositeFieldContainer[_worker_pb2.Completion]
    def __init__(self, shard_id: _Optional[int] = ..., completions: _Optional[_Iterable[_Union[_worker_pb2.Completion, _Mapping]]] = ...) -> None: ...

class CompleteTasksResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_worker_pb2.CompletionResult]
    def __init__(self, results: _Optional[_Iterable[_Union[_worker_pb2.CompletionResult, _Mapping]]] = ...) -> None: ...

class WatchReadyRequest(_message.Message):
    __slots__ = ("shard_ids", "wanted")
    SHARD_IDS_FIELD_NUMBER: _ClassVar[int]
    WANTED_FIELD_NUMBER: _ClassVar[int]
    shard_ids: _containers.RepeatedScalarFieldContainer[int]
    wanted: bool
    def __init__(self, shard_ids: _Optional[_Iterable[int]] = ..., wanted: _Optional[bool] = ...) -> None: ...

class WatchReadyResponse(_message.Message):
    __slots__ = ("shard_id",)
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    def __init__(self, shard_id: _Optional[int] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("shard_id", "tenant_id", "app_id", "filter", "page_size", "cursor")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    tenant_id: str
    app_id: str
    filter: _tasks_pb2.TaskFilter
    page_size: int
    cursor: str
    def __init__(self, shard_id: _Optional[int] = ..., tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., filter: _Optional[_Union[_tasks_pb2.TaskFilter, _Mapping]] = ..., page_size: _Optional[int] = ..., cursor: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_cursor")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[_tasks_pb2.Task]
    next_cursor: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[_tasks_pb2.Task, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class CountTasksRequest(_message.Message):
    __slots__ = ("shard_id", "tenant_id", "app_id", "filter")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    tenant_id: str
    app_id: str
    filter: _tasks_pb2.TaskFilter
    def __init__(self, shard_id: _Optional[int] = ..., tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., filter: _Optional[_Union[_tasks_pb2.TaskFilter, _Mapping]] = ...) -> None: ...

class CountTasksResponse(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class StartBulkOperationRequest(_message.Message):
    __slots__ = ("shard_id", "operation_id", "tenant_id", "app_id", "kind", "filter", "registered_task_types")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_TASK_TYPES_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    operation_id: str
    tenant_id: str
    app_id: str
    kind: _tasks_pb2.BulkOperationKind
    filter: _tasks_pb2.TaskFilter
    registered_task_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, shard_id: _Optional[int] = ..., operation_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., kind: _Optional[_Union[_tasks_pb2.BulkOperationKind, str]] = ..., filter: _Optional[_Union[_tasks_pb2.TaskFilter, _Mapping]] = ..., registered_task_types: _Optional[_Iterable[str]] = ...) -> None: ...

class StartBulkOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: _tasks_pb2.BulkOperation
    def __init__(self, operation: _Optional[_Union[_tasks_pb2.BulkOperation, _Mapping]] = ...) -> None: ...

class GetBulkOperationRequest(_message.Message):
    __slots__ = ("shard_id", "operation_id", "tenant_id")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    operation_id: str
    tenant_id: str
    def __init__(self, shard_id: _Optional[int] = ..., operation_id: _Optional[str] = ..., tenant_id: _Optional[str] = ...) -> None: ...

class GetBulkOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: _tasks_pb2.BulkOperation
    def __init__(self, operation: _Optional[_Union[_tasks_pb2.BulkOperation, _Mapping]] = ...) -> None: ...

class CancelBulkOperationRequest(_message.Message):
    __slots__ = ("shard_id", "operation_id", "tenant_id")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    operation_id: str
    tenant_id: str
    def __init__(self, shard_id: _Optional[int] = ..., operation_id: _Optional[str] = ..., tenant_id: _Optional[str] = ...) -> None: ...

class CancelBulkOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: _tasks_pb2.BulkOperation
    def __init__(self, operation: _Optional[_Union[_tasks_pb2.BulkOperation, _Mapping]] = ...) -> None: ...

class WorkflowStepRequest(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: _worker_pb2.StepRequest
    def __init__(self, step: _Optional[_Union[_worker_pb2.StepRequest, _Mapping]] = ...) -> None: ...

class WorkflowStepResponse(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: _worker_pb2.StepResponse
    def __init__(self, step: _Optional[_Union[_worker_pb2.StepResponse, _Mapping]] = ...) -> None: ...

class GetWorkflowStepsRequest(_message.Message):
    __slots__ = ("shard_id", "workflow_id", "tenant_id", "from_position", "page_size")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_POSITION_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    workflow_id: str
    tenant_id: str
    from_position: int
    page_size: int
    def __init__(self, shard_id: _Optional[int] = ..., workflow_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., from_position: _Optional[int] = ..., page_size: _Optional[int] = ...) -> None: ...

class GetWorkflowStepsResponse(_message.Message):
    __slots__ = ("steps", "step_count", "pending", "next_position")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    NEXT_POSITION_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[_workflows_pb2.Step]
    step_count: int
    pending: _workflows_pb2.PendingWait
    next_position: int
    def __init__(self, steps: _Optional[_Iterable[_Union[_workflows_pb2.Step, _Mapping]]] = ..., step_count: _Optional[int] = ..., pending: _Optional[_Union[_workflows_pb2.PendingWait, _Mapping]] = ..., next_position: _Optional[int] = ...) -> None: ...

class DeliverEventRequest(_message.Message):
    __slots__ = ("shard_id", "tenant_id", "name", "data_json", "workflow_id", "event_id")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    tenant_id: str
    name: str
    data_json: bytes
    workflow_id: str
    event_id: str
    def __init__(self, shard_id: _Optional[int] = ..., tenant_id: _Optional[str] = ..., name: _Optional[str] = ..., data_json: _Optional[bytes] = ..., workflow_id: _Optional[str] = ..., event_id: _Optional[str] = ...) -> None: ...

class DeliverEventResponse(_message.Message):
    __slots__ = ("delivered",)
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    delivered: int
    def __init__(self, delivered: _Optional[int] = ...) -> None: ...

class ListWorkflowChildrenRequest(_message.Message):
    __slots__ = ("shard_id", "workflow_id", "tenant_id", "position", "from_index", "page_size")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    workflow_id: str
    tenant_id: str
    position: int
    from_index: int
    page_size: int
    def __init__(self, shard_id: _Optional[int] = ..., workflow_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., position: _Optional[int] = ..., from_index: _Optional[int] = ..., page_size: _Optional[int] = ...) -> None: ...

class ListWorkflowChildrenResponse(_message.Message):
    __slots__ = ("children", "next_index")
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    NEXT_INDEX_FIELD_NUMBER: _ClassVar[int]
    children: _containers.RepeatedCompositeFieldContainer[_workflows_pb2.ChildRun]
    next_index: int
    def __init__(self, children: _Optional[_Iterable[_Union[_workflows_pb2.ChildRun, _Mapping]]] = ..., next_index: _Optional[int] = ...) -> None: ...
