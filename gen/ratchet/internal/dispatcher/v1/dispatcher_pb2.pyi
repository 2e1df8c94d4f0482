from ratchet.api.tasks.v1 import breakers_pb2 as _breakers_pb2
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
