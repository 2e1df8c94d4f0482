import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_ENQUEUED: _ClassVar[TaskState]
    TASK_STATE_LEASED: _ClassVar[TaskState]
    TASK_STATE_RETRY_WAIT: _ClassVar[TaskState]
    TASK_STATE_SUCCEEDED: _ClassVar[TaskState]
    TASK_STATE_FAILED: _ClassVar[TaskState]
    TASK_STATE_CANCELED: _ClassVar[TaskState]
    TASK_STATE_EXPIRED: _ClassVar[TaskState]
    TASK_STATE_WAITING: _ClassVar[TaskState]

class AttemptOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_OUTCOME_UNSPECIFIED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_RUNNING: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_SUCCEEDED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_FAILED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_LEASE_EXPIRED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_TIMED_OUT: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_CRASHED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_CANCELED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_SUSPENDED: _ClassVar[AttemptOutcome]

class BulkOperationKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BULK_OPERATION_KIND_UNSPECIFIED: _ClassVar[BulkOperationKind]
    BULK_OPERATION_KIND_RETRY: _ClassVar[BulkOperationKind]
    BULK_OPERATION_KIND_CANCEL: _ClassVar[BulkOperationKind]

class BulkOperationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BULK_OPERATION_STATE_UNSPECIFIED: _ClassVar[BulkOperationState]
    BULK_OPERATION_STATE_RUNNING: _ClassVar[BulkOperationState]
    BULK_OPERATION_STATE_SUCCEEDED: _ClassVar[BulkOperationState]
    BULK_OPERATION_STATE_CANCELED: _ClassVar[BulkOperationState]
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_ENQUEUED: TaskState
TASK_STATE_LEASED: TaskState
TASK_STATE_RETRY_WAIT: TaskState
TASK_STATE_SUCCEEDED: TaskState
TASK_STATE_FAILED: TaskState
TASK_STATE_CANCELED: TaskState
TASK_STATE_EXPIRED: TaskState
TASK_STATE_WAITING: TaskState
ATTEMPT_OUTCOME_UNSPECIFIED: AttemptOutcome
ATTEMPT_OUTCOME_RUNNING: AttemptOutcome
ATTEMPT_OUTCOME_SUCCEEDED: AttemptOutcome
ATTEMPT_OUTCOME_FAILED: AttemptOutcome
ATTEMPT_OUTCOME_LEASE_EXPIRED: AttemptOutcome
ATTEMPT_OUTCOME_TIMED_OUT: AttemptOutcome
ATTEMPT_OUTCOME_CRASHED: AttemptOutcome
ATTEMPT_OUTCOME_CANCELED: AttemptOutcome
ATTEMPT_OUTCOME_SUSPENDED: AttemptOutcome
BULK_OPERATION_KIND_UNSPECIFIED: BulkOperationKind
BULK_OPERATION_KIND_RETRY: BulkOperationKind
BULK_OPERATION_KIND_CANCEL: BulkOperationKind
BULK_OPERATION_STATE_UNSPECIFIED: BulkOperationState
BULK_OPERATION_STATE_RUNNING: BulkOperationState
BULK_OPERATION_STATE_SUCCEEDED: BulkOperationState
BULK_OPERATION_STATE_CANCELED: BulkOperationState

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "base", "factor", "cap", "jitter", "non_retryable", "rules")
    class RulesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ErrorRule
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ErrorRule, _Mapping]] = ...) -> None: ...
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    CAP_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    NON_RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    base: _duration_pb2.Duration
    factor: float
    cap: _duration_pb2.Duration
    jitter: bool
    non_retryable: _containers.RepeatedScalarFieldContainer[str]
    rules: _containers.MessageMap[str, ErrorRule]
    def __init__(self, max_attempts: _Optional[int] = ..., base: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., factor: _Optional[float] = ..., cap: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., jitter: _Optional[bool] = ..., non_retryable: _Optional[_Iterable[str]] = ..., rules: _Optional[_Mapping[str, ErrorRule]] = ...) -> None: ...

class ErrorRule(_message.Message):
    __slots__ = ("non_retryable", "max_attempts", "base", "factor", "cap", "jitter")
    NON_RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    CAP_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    non_retryable: bool
    max_attempts: int
    base: _duration_pb2.Duration
    factor: float
    cap: _duration_pb2.Duration
    jitter: bool
    def __init__(self, non_retryable: _Optional[bool] = ..., max_attempts: _Optional[int] = ..., base: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., factor: _Optional[float] = ..., cap: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., jitter: _Optional[bool] = ...) -> None: ...

class Timeouts(_message.Message):
    __slots__ = ("schedule_to_start", "start_to_close", "schedule_to_close")
    SCHEDULE_TO_START_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TO_CLOSE_FIELD_NUMBER: _ClassVar[int]
    schedule_to_start: _duration_pb2.Duration
    start_to_close: _duration_pb2.Duration
    schedule_to_close: _duration_pb2.Duration
    def __init__(self, schedule_to_start: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., start_to_close: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., schedule_to_close: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class EnqueueTaskRequest(_message.Message):
    __slots__ = ("task_type", "payload", "queue", "delay", "run_at", "idempotency_key", "retry", "timeouts", "task_id", "payload_json")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUTS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    payload: _struct_pb2.Value
    queue: str
    delay: _duration_pb2.Duration
    run_at: _timestamp_pb2.Timestamp
    idempotency_key: str
    retry: RetryPolicy
    timeouts: Timeouts
    task_id: str
    payload_json: str
    def __init__(self, task_type: _Optional[str] = ..., payload: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., queue: _Optional[str] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., timeouts: _Optional[_Union[Timeouts, _Mapping]] = ..., task_id: _Optional[str] = ..., payload_json: _Optional[str] = ...) -> None: ...

class EnqueueTaskResponse(_message.Message):
    __slots__ = ("task_id", "deduplicated")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    deduplicated: bool
    def __init__(self, task_id: _Optional[str] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class EnqueueTaskStreamRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[EnqueueTaskCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[EnqueueTaskCall, _Mapping]]] = ...) -> None: ...

class EnqueueTaskCall(_message.Message):
    __slots__ = ("call_id", "request", "timeout_ms", "batch")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    request: EnqueueTaskRequest
    timeout_ms: int
    batch: EnqueueTasksRequest
    def __init__(self, call_id: _Optional[int] = ..., request: _Optional[_Union[EnqueueTaskRequest, _Mapping]] = ..., timeout_ms: _Optional[int] = ..., batch: _Optional[_Union[EnqueueTasksRequest, _Mapping]] = ...) -> None: ...

class EnqueueTaskStreamResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[EnqueueTaskAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[EnqueueTaskAnswer, _Mapping]]] = ...) -> None: ...

class EnqueueTaskAnswer(_message.Message):
    __slots__ = ("call_id", "response", "error", "batch_response")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BATCH_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    response: EnqueueTaskResponse
    error: CallError
    batch_response: EnqueueTasksResponse
    def __init__(self, call_id: _Optional[int] = ..., response: _Optional[_Union[EnqueueTaskResponse, _Mapping]] = ..., error: _Optional[_Union[CallError, _Mapping]] = ..., batch_response: _Optional[_Union[EnqueueTasksResponse, _Mapping]] = ...) -> None: ...

class CallError(_message.Message):
    __slots__ = ("code", "message", "fields")
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    fields: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., fields: _Optional[_Mapping[str, str]] = ...) -> None: ...

class EnqueueTasksRequest(_message.Message):
    __slots__ = ("tasks", "columns")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[EnqueueTaskRequest]
    columns: TaskColumns
    def __init__(self, tasks: _Optional[_Iterable[_Union[EnqueueTaskRequest, _Mapping]]] = ..., columns: _Optional[_Union[TaskColumns, _Mapping]] = ...) -> None: ...

class TaskColumns(_message.Message):
    __slots__ = ("task_type", "queue", "task_ids", "payloads_json")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    PAYLOADS_JSON_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    queue: str
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    payloads_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, task_type: _Optional[str] = ..., queue: _Optional[str] = ..., task_ids: _Optional[_Iterable[str]] = ..., payloads_json: _Optional[_Iterable[str]] = ...) -> None: ...

class EnqueueTasksResponse(_message.Message):
    __slots__ = ("task_ids",)
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, task_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class CancelTaskResponse(_message.Message):
    __slots__ = ("state", "cancel_requested")
    STATE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    state: TaskState
    cancel_requested: bool
    def __init__(self, state: _Optional[_Union[TaskState, str]] = ..., cancel_requested: _Optional[bool] = ...) -> None: ...

class TaskError(_message.Message):
    __slots__ = ("error_class", "message", "stack")
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STACK_FIELD_NUMBER: _ClassVar[int]
    error_class: str
    message: str
    stack: str
    def __init__(self, error_class: _Optional[str] = ..., message: _Optional[str] = ..., stack: _Optional[str] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("attempt", "lease_epoch", "worker_id", "started_at", "finished_at", "outcome", "error")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    lease_epoch: int
    worker_id: str
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    outcome: AttemptOutcome
    error: TaskError
    def __init__(self, attempt: _Optional[int] = ..., lease_epoch: _Optional[int] = ..., worker_id: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[AttemptOutcome, str]] = ..., error: _Optional[_Union[TaskError, _Mapping]] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "task_type", "queue", "state", "attempt", "max_attempts", "version", "payload", "result", "error", "idempotency_key", "cancel_requested", "created_at", "run_at", "updated_at", "started_at", "finished_at", "retry", "timeouts", "attempts", "schedule_id", "scheduled_time", "checkpoint", "retried_as", "retry_of", "parent_workflow_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_TIME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    RETRIED_AS_FIELD_NUMBER: _ClassVar[int]
    RETRY_OF_FIELD_NUMBER: _ClassVar[int]
    PARENT_WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    task_type: str
    queue: str
    state: TaskState
    attempt: int
    max_attempts: int
    version: int
    payload: _struct_pb2.Value
    result: _struct_pb2.Value
    error: TaskError
    idempotency_key: str
    cancel_requested: bool
    created_at: _timestamp_pb2.Timestamp
    run_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    retry: RetryPolicy
    timeouts: Timeouts
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    schedule_id: str
    scheduled_time: _timestamp_pb2.Timestamp
    checkpoint: _struct_pb2.Value
    retried_as: str
    retry_of: str
    parent_workflow_id: str
    def __init__(self, task_id: _Optional[str] = ..., task_type: _Optional[str] = ..., queue: _Optional[str] = ..., state: _Optional[_Union[TaskState, str]] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., version: _Optional[int] = ..., payload: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., result: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error: _Optional[_Union[TaskError, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., cancel_requested: _Optional[bool] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., timeouts: _Optional[_Union[Timeouts, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., schedule_id: _Optional[str] = ..., scheduled_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., checkpoint: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., retried_as: _Optional[str] = ..., retry_of: _Optional[str] = ..., parent_workflow_id: _Optional[str] = ...) -> None: ...

class TaskFilter(_message.Message):
    __slots__ = ("states", "task_type", "queue", "error_class", "since", "until")
    STATES_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[TaskState]
    task_type: str
    queue: str
    error_class: str
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    def __init__(self, states: _Optional[_Iterable[_Union[TaskState, str]]] = ..., task_type: _Optional[str] = ..., queue: _Optional[str] = ..., error_class: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("state", "task_type", "queue", "error_class", "since", "until", "page_size", "page_token")
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    state: TaskState
    task_type: str
    queue: str
    error_class: str
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, state: _Optional[_Union[TaskState, str]] = ..., task_type: _Optional[str] = ..., queue: _Optional[str] = ..., error_class: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    next_page_token: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class BulkItemFailure(_message.Message):
    __slots__ = ("task_id", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class BulkOperation(_message.Message):
    __slots__ = ("operation_id", "kind", "state", "filter", "matched", "processed", "succeeded", "failed", "skipped", "failures", "created_at", "finished_at")
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    PROCESSED_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    kind: BulkOperationKind
    state: BulkOperationState
    filter: TaskFilter
    matched: int
    processed: int
    succeeded: int
    failed: int
    skipped: int
    failures: _containers.RepeatedCompositeFieldContainer[BulkItemFailure]
    created_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    def __init__(self, operation_id: _Optional[str] = ..., kind: _Optional[_Union[BulkOperationKind, str]] = ..., state: _Optional[_Union[BulkOperationState, str]] = ..., filter: _Optional[_Union[TaskFilter, _Mapping]] = ..., matched: _Optional[int] = ..., processed: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., skipped: _Optional[int] = ..., failures: _Optional[_Iterable[_Union[BulkItemFailure, _Mapping]]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RetryTasksRequest(_message.Message):
    __slots__ = ("filter", "dry_run", "request_id")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    filter: TaskFilter
    dry_run: bool
    request_id: str
    def __init__(self, filter: _Optional[_Union[TaskFilter, _Mapping]] = ..., dry_run: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class RetryTasksResponse(_message.Message):
    __slots__ = ("matched", "operation")
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    matched: int
    operation: BulkOperation
    def __init__(self, matched: _Optional[int] = ..., operation: _Optional[_Union[BulkOperation, _Mapping]] = ...) -> None: ...

class CancelTasksRequest(_message.Message):
    __slots__ = ("filter", "dry_run", "request_id")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    filter: TaskFilter
    dry_run: bool
    request_id: str
    def __init__(self, filter: _Optional[_Union[TaskFilter, _Mapping]] = ..., dry_run: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class CancelTasksResponse(_message.Message):
    __slots__ = ("matched", "operation")
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    matched: int
    operation: BulkOperation
    def __init__(self, matched: _Optional[int] = ..., operation: _Optional[_Union[BulkOperation, _Mapping]] = ...) -> None: ...

class GetBulkOperationRequest(_message.Message):
    __slots__ = ("operation_id",)
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    def __init__(self, operation_id: _Optional[str] = ...) -> None: ...

class GetBulkOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: BulkOperation
    def __init__(self, operation: _Optional[_Union[BulkOperation, _Mapping]] = ...) -> None: ...

class CancelBulkOperationRequest(_message.Message):
    __slots__ = ("operation_id",)
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    def __init__(self, operation_id: _Optional[str] = ...) -> None: ...

class CancelBulkOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: BulkOperation
    def __init__(self, operation: _Optional[_Union[BulkOperation, _Mapping]] = ...) -> None: ...
