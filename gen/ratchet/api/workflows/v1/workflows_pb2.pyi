import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from ratchet.api.tasks.v1 import tasks_pb2 as _tasks_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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

class StepState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_STATE_UNSPECIFIED: _ClassVar[StepState]
    STEP_STATE_RUNNING: _ClassVar[StepState]
    STEP_STATE_COMPLETED: _ClassVar[StepState]
    STEP_STATE_FAILED: _ClassVar[StepState]
STEP_KIND_UNSPECIFIED: StepKind
STEP_KIND_STEP: StepKind
STEP_KIND_VERSION: StepKind
STEP_KIND_SLEEP: StepKind
STEP_KIND_WAIT: StepKind
STEP_KIND_PARALLEL: StepKind
STEP_KIND_CHILD: StepKind
STEP_KIND_ON_CANCEL: StepKind
STEP_KIND_COMPENSATE: StepKind
STEP_STATE_UNSPECIFIED: StepState
STEP_STATE_RUNNING: StepState
STEP_STATE_COMPLETED: StepState
STEP_STATE_FAILED: StepState

class StartWorkflowRequest(_message.Message):
    __slots__ = ("workflow_type", "input", "idempotency_key", "delay", "queue", "workflow_id")
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    workflow_type: str
    input: _struct_pb2.Value
    idempotency_key: str
    delay: _duration_pb2.Duration
    queue: str
    workflow_id: str
    def __init__(self, workflow_type: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., queue: _Optional[str] = ..., workflow_id: _Optional[str] = ...) -> None: ...

class StartWorkflowResponse(_message.Message):
    __slots__ = ("workflow_id", "deduplicated")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    deduplicated: bool
    def __init__(self, workflow_id: _Optional[str] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class GetWorkflowRequest(_message.Message):
    __slots__ = ("workflow_id", "step_page_size", "step_page_token")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    STEP_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    step_page_size: int
    step_page_token: str
    def __init__(self, workflow_id: _Optional[str] = ..., step_page_size: _Optional[int] = ..., step_page_token: _Optional[str] = ...) -> None: ...

class GetWorkflowResponse(_message.Message):
    __slots__ = ("workflow", "steps", "next_step_page_token")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_STEP_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workflow: Workflow
    steps: _containers.RepeatedCompositeFieldContainer[Step]
    next_step_page_token: str
    def __init__(self, workflow: _Optional[_Union[Workflow, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[Step, _Mapping]]] = ..., next_step_page_token: _Optional[str] = ...) -> None: ...

class Workflow(_message.Message):
    __slots__ = ("workflow_id", "workflow_type", "state", "input", "result", "error", "activations", "idempotency_key", "cancel_requested", "created_at", "updated_at", "finished_at", "step_count", "pending")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ACTIVATIONS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    workflow_type: str
    state: _tasks_pb2.TaskState
    input: _struct_pb2.Value
    result: _struct_pb2.Value
    error: _tasks_pb2.TaskError
    activations: int
    idempotency_key: str
    cancel_requested: bool
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    step_count: int
    pending: PendingWait
    def __init__(self, workflow_id: _Optional[str] = ..., workflow_type: _Optional[str] = ..., state: _Optional[_Union[_tasks_pb2.TaskState, str]] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., result: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error: _Optional[_Union[_tasks_pb2.TaskError, _Mapping]] = ..., activations: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., cancel_requested: _Optional[bool] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., step_count: _Optional[int] = ..., pending: _Optional[_Union[PendingWait, _Mapping]] = ...) -> None: ...

class PendingWait(_message.Message):
    __slots__ = ("position", "kind", "name", "match", "wake_at")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    WAKE_AT_FIELD_NUMBER: _ClassVar[int]
    position: int
    kind: StepKind
    name: str
    match: _struct_pb2.Struct
    wake_at: _timestamp_pb2.Timestamp
    def __init__(self, position: _Optional[int] = ..., kind: _Optional[_Union[StepKind, str]] = ..., name: _Optional[str] = ..., match: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., wake_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("position", "name", "kind", "state", "attempt", "result", "error", "fatal", "started_at", "finished_at", "wake_at", "child_count", "children_done")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FATAL_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    WAKE_AT_FIELD_NUMBER: _ClassVar[int]
    CHILD_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_DONE_FIELD_NUMBER: _ClassVar[int]
    position: int
    name: str
    kind: StepKind
    state: StepState
    attempt: int
    result: _struct_pb2.Value
    error: _tasks_pb2.TaskError
    fatal: bool
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    wake_at: _timestamp_pb2.Timestamp
    child_count: int
    children_done: int
    def __init__(self, position: _Optional[int] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[StepKind, str]] = ..., state: _Optional[_Union[StepState, str]] = ..., attempt: _Optional[int] = ..., result: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error: _Optional[_Union[_tasks_pb2.TaskError, _Mapping]] = ..., fatal: _Optional[bool] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., wake_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., child_count: _Optional[int] = ..., children_done: _Optional[int] = ...) -> None: ...

class ChildRun(_message.Message):
    __slots__ = ("index", "child_id", "task_type", "state", "result", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CHILD_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    child_id: str
    task_type: str
    state: _tasks_pb2.TaskState
    result: _struct_pb2.Value
    error: _tasks_pb2.TaskError
    def __init__(self, index: _Optional[int] = ..., child_id: _Optional[str] = ..., task_type: _Optional[str] = ..., state: _Optional[_Union[_tasks_pb2.TaskState, str]] = ..., result: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error: _Optional[_Union[_tasks_pb2.TaskError, _Mapping]] = ...) -> None: ...

class ListWorkflowChildrenRequest(_message.Message):
    __slots__ = ("workflow_id", "position", "page_size", "page_token")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    position: int
    page_size: int
    page_token: str
    def __init__(self, workflow_id: _Optional[str] = ..., position: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWorkflowChildrenResponse(_message.Message):
    __slots__ = ("children", "next_page_token")
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    children: _containers.RepeatedCompositeFieldContainer[ChildRun]
    next_page_token: str
    def __init__(self, children: _Optional[_Iterable[_Union[ChildRun, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListWorkflowsRequest(_message.Message):
    __slots__ = ("state", "workflow_type", "page_size", "page_token")
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    state: _tasks_pb2.TaskState
    workflow_type: str
    page_size: int
    page_token: str
    def __init__(self, state: _Optional[_Union[_tasks_pb2.TaskState, str]] = ..., workflow_type: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWorkflowsResponse(_message.Message):
    __slots__ = ("workflows", "next_page_token")
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workflows: _containers.RepeatedCompositeFieldContainer[Workflow]
    next_page_token: str
    def __init__(self, workflows: _Optional[_Iterable[_Union[Workflow, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelWorkflowRequest(_message.Message):
    __slots__ = ("workflow_id",)
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    def __init__(self, workflow_id: _Optional[str] = ...) -> None: ...

class CancelWorkflowResponse(_message.Message):
    __slots__ = ("state", "cancel_requested")
    STATE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    state: _tasks_pb2.TaskState
    cancel_requested: bool
    def __init__(self, state: _Optional[_Union[_tasks_pb2.TaskState, str]] = ..., cancel_requested: _Optional[bool] = ...) -> None: ...

class SendEventRequest(_message.Message):
    __slots__ = ("name", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    data: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SendEventResponse(_message.Message):
    __slots__ = ("delivered",)
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    delivered: int
    def __init__(self, delivered: _Optional[int] = ...) -> None: ...

class SendWorkflowEventRequest(_message.Message):
    __slots__ = ("workflow_id", "name", "data", "event_id")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    name: str
    data: _struct_pb2.Struct
    event_id: str
    def __init__(self, workflow_id: _Optional[str] = ..., name: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., event_id: _Optional[str] = ...) -> None: ...

class SendWorkflowEventResponse(_message.Message):
    __slots__ = ("delivered",)
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    delivered: bool
    def __init__(self, delivered: _Optional[bool] = ...) -> None: ...
