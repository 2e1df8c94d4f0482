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
LEASE_ACTION_UNSPECIFIED: LeaseAction
LEASE_ACTION_CONTINUE: LeaseAction
LEASE_ACTION_CANCEL: LeaseAction
LEASE_ACTION_LEASE_LOST: LeaseAction
COMPLETION_OUTCOME_UNSPECIFIED: CompletionOutcome
COMPLETION_OUTCOME_SUCCEEDED: CompletionOutcome
COMPLETION_OUTCOME_FAILED: CompletionOutcome
COMPLETION_OUTCOME_CANCELED: CompletionOutcome
COMPLETION_OUTCOME_CRASHED: CompletionOutcome

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
    __slots__ = ("shard_id", "task_id", "lease_epoch", "outcome", "result_json", "error", "fatal", "retry_after", "tenant_id", "app_id", "task_type", "checkpoint_json")
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
    def __init__(self, shard_id: _Optional[int] = ..., task_id: _Optional[str] = ..., lease_epoch: _Optional[int] = ..., outcome: _Optional[_Union[CompletionOutcome, str]] = ..., result_json: _Optional[bytes] = ..., error: _Optional[_Union[_tasks_pb2.TaskError, _Mapping]] = ..., fatal: _Optional[bool] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., task_type: _Optional[str] = ..., checkpoint_json: _Optional[bytes] = ...) -> None: ...

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
