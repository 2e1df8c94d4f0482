import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BREAKER_STATE_UNSPECIFIED: _ClassVar[BreakerState]
    BREAKER_STATE_CLOSED: _ClassVar[BreakerState]
    BREAKER_STATE_OPEN: _ClassVar[BreakerState]
    BREAKER_STATE_HALF_OPEN: _ClassVar[BreakerState]
BREAKER_STATE_UNSPECIFIED: BreakerState
BREAKER_STATE_CLOSED: BreakerState
BREAKER_STATE_OPEN: BreakerState
BREAKER_STATE_HALF_OPEN: BreakerState

class BreakerCrash(_message.Message):
    __slots__ = ("task_id", "error_class", "message", "at")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    error_class: str
    message: str
    at: _timestamp_pb2.Timestamp
    def __init__(self, task_id: _Optional[str] = ..., error_class: _Optional[str] = ..., message: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Breaker(_message.Message):
    __slots__ = ("task_type", "state", "reason", "crashes", "opened_at", "probe_at", "last_crashes")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CRASHES_FIELD_NUMBER: _ClassVar[int]
    OPENED_AT_FIELD_NUMBER: _ClassVar[int]
    PROBE_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_CRASHES_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    state: BreakerState
    reason: str
    crashes: int
    opened_at: _timestamp_pb2.Timestamp
    probe_at: _timestamp_pb2.Timestamp
    last_crashes: _containers.RepeatedCompositeFieldContainer[BreakerCrash]
    def __init__(self, task_type: _Optional[str] = ..., state: _Optional[_Union[BreakerState, str]] = ..., reason: _Optional[str] = ..., crashes: _Optional[int] = ..., opened_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., probe_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_crashes: _Optional[_Iterable[_Union[BreakerCrash, _Mapping]]] = ...) -> None: ...

class ListBreakersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListBreakersResponse(_message.Message):
    __slots__ = ("breakers",)
    BREAKERS_FIELD_NUMBER: _ClassVar[int]
    breakers: _containers.RepeatedCompositeFieldContainer[Breaker]
    def __init__(self, breakers: _Optional[_Iterable[_Union[Breaker, _Mapping]]] = ...) -> None: ...

class ResetBreakerRequest(_message.Message):
    __slots__ = ("task_type",)
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    def __init__(self, task_type: _Optional[str] = ...) -> None: ...

class ResetBreakerResponse(_message.Message):
    __slots__ = ("breaker",)
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    breaker: Breaker
    def __init__(self, breaker: _Optional[_Union[Breaker, _Mapping]] = ...) -> None: ...
