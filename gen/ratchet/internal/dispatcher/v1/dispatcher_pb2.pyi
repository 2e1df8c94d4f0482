import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from ratchet.api.tasks.v1 import breakers_pb2 as _breakers_pb2
from ratchet.internal.history.v1 import history_pb2 as _history_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListBreakersRequest(_message.Message):
    __slots__ = ("tenant_id", "app_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    app_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ...) -> None: ...

class ListBreakersResponse(_message.Message):
    __slots__ = ("breakers",)
    BREAKERS_FIELD_NUMBER: _ClassVar[int]
    breakers: _containers.RepeatedCompositeFieldContainer[_breakers_pb2.Breaker]
    def __init__(self, breakers: _Optional[_Iterable[_Union[_breakers_pb2.Breaker, _Mapping]]] = ...) -> None: ...

class ResetBreakerRequest(_message.Message):
    __slots__ = ("tenant_id", "app_id", "task_type")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    app_id: str
    task_type: str
    def __init__(self, tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., task_type: _Optional[str] = ...) -> None: ...

class ResetBreakerResponse(_message.Message):
    __slots__ = ("breaker",)
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    breaker: _breakers_pb2.Breaker
    def __init__(self, breaker: _Optional[_Union[_breakers_pb2.Breaker, _Mapping]] = ...) -> None: ...

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
    tasks: _containers.RepeatedCompositeFieldContainer[_history_pb2.LeasedTask]
    def __init__(self, tasks: _Optional[_Iterable[_Union[_history_pb2.LeasedTask, _Mapping]]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "leases")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    leases: _containers.RepeatedCompositeFieldContainer[_history_pb2.LeaseRef]
    def __init__(self, worker_id: _Optional[str] = ..., leases: _Optional[_Iterable[_Union[_history_pb2.LeaseRef, _Mapping]]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_history_pb2.HeartbeatResult]
    def __init__(self, results: _Optional[_Iterable[_Union[_history_pb2.HeartbeatResult, _Mapping]]] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("worker_id", "completions")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    completions: _containers.RepeatedCompositeFieldContainer[_history_pb2.Completion]
    def __init__(self, worker_id: _Optional[str] = ..., completions: _Optional[_Iterable[_Union[_history_pb2.Completion, _Mapping]]] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_history_pb2.CompletionResult]
    def __init__(self, results: _Optional[_Iterable[_Union[_history_pb2.CompletionResult, _Mapping]]] = ...) -> None: ...
