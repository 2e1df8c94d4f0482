import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from ratchet.api.tasks.v1 import tasks_pb2 as _tasks_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaseAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_ACTION_UNSPECIFIED: _ClassVar[LeaseAction]
    LEASE_ACTION_CONTINUE: _ClassVar[LeaseAction]
    LEASE_ACTION_CANCEL: _ClassVar[LeaseAction]
    LEASE_ACTION_LEASE_LOST: _ClassVar[LeaseAction]

class CompletionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPLETION_OUTCOME_UNSPECIFIED: _ClassVar[CompletionOutcome]
    COMPLETION_OUTCOME_SUCCEEDED: _ClassVar[CompletionOutcome]
    COMPLETION_OUTCOME_FAILED: _ClassVar[CompletionOutcome]
    COMPLETION_OUTCOME_CANCELED: _ClassVar[CompletionOutcome]
    COMPLETION_OUTCOME_CRASHED: _ClassVar[CompletionOutcome]
    COMPLETION_OUTCOME_SUSPENDED: _ClassVar[CompletionOutcome]

class StepOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_OP_UNSPECIFIED: _ClassVar[StepOp]
    STEP_OP_BEGIN: _ClassVar[StepOp]
    STEP_OP_COMMIT: _ClassVar[StepOp]

class StepKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_KIND_UNSPECIFIED: _ClassVar[StepKind]
    STEP_KIND_STEP: _ClassVar[StepKind]
    STEP_KIND_VERSION: _ClassVar[StepKind]
    STEP_KIND_SLEEP: _ClassVar[StepKind]
    STEP_KIND_WAIT: _ClassVar[StepKind]
    STEP_KIND_PARALLEL: _ClassVar[StepKind]
    STEP_KIND_CHILD: _ClassVar[StepKind]
    STEP_KIND_ON_CANCEL: _ClassVar[StepKind]
    STEP_KIND_COMPENSATE: _ClassVar[StepKind]

class ParallelFailure(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PARALLEL_FAILURE_UNSPECIFIED: _ClassVar[ParallelFailure]
    PARALLEL_FAILURE_COLLECT: _ClassVar[ParallelFailure]
    PARALLEL_FAILURE_FAIL_FAST: _ClassVar[ParallelFailure]

class StepStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_STATUS_UNSPECIFIED: _ClassVar[StepStatus]
    STEP_STATUS_RUN: _ClassVar[StepStatus]
    STEP_STATUS_DONE: _ClassVar[StepStatus]
    STEP_STATUS_SUSPEND: _ClassVar[StepStatus]
    STEP_STATUS_MISMATCH: _ClassVar[StepStatus]
    STEP_STATUS_ABSENT: _ClassVar[StepStatus]
    STEP_STATUS_CANCELLED: _ClassVar[StepStatus]
LEASE_ACTION_UNSPECIFIED: LeaseAction
LEASE_ACTION_CONTINUE: LeaseAction
LEASE_ACTION_CANCEL: LeaseAction
LEASE_ACTION_LEASE_LOST: LeaseAction
COMPLETION_OUTCOME_UNSPECIFIED: CompletionOutcome
COMPLETION_OUTCOME_SUCCEEDED: CompletionOutcome
COMPLETION_OUTCOME_FAILED: CompletionOutcome
COMPLETION_OUTCOME_CANCELED: CompletionOutcome
COMPLETION_OUTCOME_CRASHED: CompletionOutcome
COMPLETION_OUTCOME_SUSPENDED: CompletionOutcome
STEP_OP_UNSPECIFIED: StepOp
STEP_OP_BEGIN: StepOp
STEP_OP_COMMIT: StepOp
STEP_KIND_UNSPECIFIED: StepKind
STEP_KIND_STEP: StepKind
STEP_KIND_VERSION: StepKind
STEP_KIND_SLEEP: StepKind
STEP_KIND_WAIT: StepKind
STEP_KIND_PARALLEL: StepKind
STEP_KIND_CHILD: StepKind
STEP_KIND_ON_CANCEL: StepKind
STEP_KIND_COMPENSATE: StepKind
PARALLEL_FAILURE_UNSPECIFIED: ParallelFailure
PARALLEL_FAILURE_COLLECT: ParallelFailure
PARALLEL_FAILURE_FAIL_FAST: ParallelFailure
STEP_STATUS_UNSPECIFIED: StepStatus
STEP_STATUS_RUN: StepStatus
STEP_STATUS_DONE: StepStatus
STEP_STATUS_SUSPEND: StepStatus
STEP_STATUS_MISMATCH: StepStatus
STEP_STATUS_ABSENT: StepStatus
STEP_STATUS_CANCELLED: StepStatus

class PollRequest(_message.Message):
    __slots__ = ("worker_id", "capacity", "app_ids", "max_wait")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    APP_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    capacity: int
    app_ids: _containers.RepeatedScalarFieldContainer[str]
    max_wait: _duration_pb2.Duration
    def __init__(self, worker_id: _Optional[str] = ..., capacity: _Optional[int] = ..., app_ids: _Optional[_Iterable[str]] = ..., max_wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PollResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[LeasedTask]
    def __init__(self, tasks: _Optional[_Iterable[_Union[LeasedTask, _Mapping]]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "leases")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    def __init__(self, worker_id: _Optional[str] = ..., leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[HeartbeatResult]
    def __init__(self, results: _Optional[_Iterable[_Union[HeartbeatResult, _Mapping]]] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("worker_id", "completions")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    completions: _containers.RepeatedCompositeFieldContainer[Completion]
    def __init__(self, worker_id: _Optional[str] = ..., completions: _Optional[_Iterable[_Union[Completion, _Mapping]]] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CompletionResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CompletionResult, _Mapping]]] = ...) -> None: ...

class LeasedTask(_message.Message):
    __slots__ = ("shard_id", "task_id", "tenant_id", "app_id", "task_type", "queue", "payload_json", "attempt", "max_attempts", "lease_epoch", "lease_duration", "start_to_close", "scheduled_at", "schedule_id", "scheduled_time", "last_checkpoint_json")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_AT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_JSON_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    task_id: str
    tenant_id: str
    app_id: str
    task_type: str
    queue: str
    payload_json: bytes
    attempt: int
    max_attempts: int
    lease_epoch: int
    lease_duration: _duration_pb2.Duration
    start_to_close: _duration_pb2.Duration
    scheduled_at: _timestamp_pb2.Timestamp
    schedule_id: str
    scheduled_time: _timestamp_pb2.Timestamp
    last_checkpoint_json: bytes
    def __init__(self, shard_id: _Optional[int] = ..., task_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., task_type: _Optional[str] = ..., queue: _Optional[str] = ..., payload_json: _Optional[bytes] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., lease_epoch: _Optional[int] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., start_to_close: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., scheduled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., schedule_id: _Optional[str] = ..., scheduled_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_checkpoint_json: _Optional[bytes] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ("shard_id", "task_id", "lease_epoch", "checkpoint_json")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_JSON_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    task_id: str
    lease_epoch: int
    checkpoint_json: bytes
    def __init__(self, shard_id: _Optional[int] = ..., task_id: _Optional[str] = ..., lease_epoch: _Optional[int] = ..., checkpoint_json: _Optional[bytes] = ...) -> None: ...

class HeartbeatResult(_message.Message):
    __slots__ = ("task_id", "lease_epoch", "action", "reason", "kill_after")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    KILL_AFTER_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_epoch: int
    action: LeaseAction
    reason: str
    kill_after: _duration_pb2.Duration
    def __init__(self, task_id: _Optional[str] = ..., lease_epoch: _Optional[int] = ..., action: _Optional[_Union[LeaseAction, str]] = ..., reason: _Optional[str] = ..., kill_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Completion(_message.Message):
    __slots__ = ("shard_id", "task_id", "lease_epoch", "outcome", "result_json", "error", "fatal", "retry_after", "tenant_id", "app_id", "task_type", "checkpoint_json", "suspend_position", "wake_after")
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FATAL_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_JSON_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_POSITION_FIELD_NUMBER: _ClassVar[int]
    WAKE_AFTER_FIELD_NUMBER: _ClassVar[int]
    shard_id: int
    task_id: str
    lease_epoch: int
    outcome: CompletionOutcome
    result_json: bytes
    error: _tasks_pb2.TaskError
    fatal: bool
    retry_after: _duration_pb2.Duration
    tenant_id: str
    app_id: str
    task_type: str
    checkpoint_json: bytes
    suspend_position: int
    wake_after: _duration_pb2.Duration
    def __init__(self, shard_id: _Optional[int] = ..., task_id: _Optional[str] = ..., lease_epoch: _Optional[int] = ..., outcome: _Optional[_Union[CompletionOutcome, str]] = ..., result_json: _Optional[bytes] = ..., error: _Optional[_Union[_tasks_pb2.TaskError, _Mapping]] = ..., fatal: _Optional[bool] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., task_type: _Optional[str] = ..., checkpoint_json: _Optional[bytes] = ..., suspend_position: _Optional[int] = ..., wake_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CompletionResult(_message.Message):
    __slots__ = ("task_id", "accepted", "state", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    accepted: bool
    state: _tasks_pb2.TaskState
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., accepted: _Optional[bool] = ..., state: _Optional[_Union[_tasks_pb2.TaskState, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class ChildSpec(_message.Message):
    __slots__ = ("task_type", "payload_json")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    payload_json: bytes
    def __init__(self, task_type: _Optional[str] = ..., payload_json: _Optional[bytes] = ...) -> None: ...

class ChildOutcome(_message.Message):
    __slots__ = ("index", "child_id", "state", "result_json", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CHILD_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    child_id: str
    state: _tasks_pb2.TaskState
    result_json: bytes
    error: _tasks_pb2.TaskError
    def __init__(self, index: _Optional[int] = ..., child_id: _Optional[str] = ..., state: _Optional[_Union[_tasks_pb2.TaskState, str]] = ..., result_json: _Optional[bytes] = ..., error: _Optional[_Union[_tasks_pb2.TaskError, _Mapping]] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("lease", "op", "position", "name", "kind", "result_json", "error", "fatal", "duration", "match_json", "version", "children", "on_failure")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FATAL_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    MATCH_JSON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    op: StepOp
    position: int
    name: str
    kind: StepKind
    result_json: bytes
    error: _tasks_pb2.TaskError
    fatal: bool
    duration: _duration_pb2.Duration
    match_json: bytes
    version: int
    children: _containers.RepeatedCompositeFieldContainer[ChildSpec]
    on_failure: ParallelFailure
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., op: _Optional[_Union[StepOp, str]] = ..., position: _Optional[int] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[StepKind, str]] = ..., result_json: _Optional[bytes] = ..., error: _Optional[_Union[_tasks_pb2.TaskError, _Mapping]] = ..., fatal: _Optional[bool] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., match_json: _Optional[bytes] = ..., version: _Optional[int] = ..., children: _Optional[_Iterable[_Union[ChildSpec, _Mapping]]] = ..., on_failure: _Optional[_Union[ParallelFailure, str]] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("status", "attempt", "result_json", "error", "wake_after", "logged_name", "logged_kind", "child_ids", "children", "ahead", "compensate_from")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WAKE_AFTER_FIELD_NUMBER: _ClassVar[int]
    LOGGED_NAME_FIELD_NUMBER: _ClassVar[int]
    LOGGED_KIND_FIELD_NUMBER: _ClassVar[int]
    CHILD_IDS_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    AHEAD_FIELD_NUMBER: _ClassVar[int]
    COMPENSATE_FROM_FIELD_NUMBER: _ClassVar[int]
    status: StepStatus
    attempt: int
    result_json: bytes
    error: _tasks_pb2.TaskError
    wake_after: _duration_pb2.Duration
    logged_name: str
    logged_kind: StepKind
    child_ids: _containers.RepeatedScalarFieldContainer[str]
    children: _containers.RepeatedCompositeFieldContainer[ChildOutcome]
    ahead: _containers.RepeatedCompositeFieldContainer[LoggedStep]
    compensate_from: int
    def __init__(self, status: _Optional[_Union[StepStatus, str]] = ..., attempt: _Optional[int] = ..., result_json: _Optional[bytes] = ..., error: _Optional[_Union[_tasks_pb2.TaskError, _Mapping]] = ..., wake_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., logged_name: _Optional[str] = ..., logged_kind: _Optional[_Union[StepKind, str]] = ..., child_ids: _Optional[_Iterable[str]] = ..., children: _Optional[_Iterable[_Union[ChildOutcome, _Mapping]]] = ..., ahead: _Optional[_Iterable[_Union[LoggedStep, _Mapping]]] = ..., compensate_from: _Optional[int] = ...) -> None: ...

class LoggedStep(_message.Message):
    __slots__ = ("position", "name", "kind", "attempt", "result_json")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    position: int
    name: str
    kind: StepKind
    attempt: int
    result_json: bytes
    def __init__(self, position: _Optional[int] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[StepKind, str]] = ..., attempt: _Optional[int] = ..., result_json: _Optional[bytes] = ...) -> None: ...
