from ratchet.api.schedules.v1 import schedules_pb2 as _schedules_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Caller(_message.Message):
    __slots__ = ("tenant_id", "app_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    app_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("caller", "request")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller: Caller
    request: _schedules_pb2.CreateScheduleRequest
    def __init__(self, caller: _Optional[_Union[Caller, _Mapping]] = ..., request: _Optional[_Union[_schedules_pb2.CreateScheduleRequest, _Mapping]] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _schedules_pb2.CreateScheduleResponse
    def __init__(self, response: _Optional[_Union[_schedules_pb2.CreateScheduleResponse, _Mapping]] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("caller", "request")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller: Caller
    request: _schedules_pb2.GetScheduleRequest
    def __init__(self, caller: _Optional[_Union[Caller, _Mapping]] = ..., request: _Optional[_Union[_schedules_pb2.GetScheduleRequest, _Mapping]] = ...) -> None: ...

class GetScheduleResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _schedules_pb2.GetScheduleResponse
    def __init__(self, response: _Optional[_Union[_schedules_pb2.GetScheduleResponse, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("caller", "request")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller: Caller
    request: _schedules_pb2.ListSchedulesRequest
    def __init__(self, caller: _Optional[_Union[Caller, _Mapping]] = ..., request: _Optional[_Union[_schedules_pb2.ListSchedulesRequest, _Mapping]] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _schedules_pb2.ListSchedulesResponse
    def __init__(self, response: _Optional[_Union[_schedules_pb2.ListSchedulesResponse, _Mapping]] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("caller", "request")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller: Caller
    request: _schedules_pb2.PauseScheduleRequest
    def __init__(self, caller: _Optional[_Union[Caller, _Mapping]] = ..., request: _Optional[_Union[_schedules_pb2.PauseScheduleRequest, _Mapping]] = ...) -> None: ...

class PauseScheduleResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _schedules_pb2.PauseScheduleResponse
    def __init__(self, response: _Optional[_Union[_schedules_pb2.PauseScheduleResponse, _Mapping]] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ("caller", "request")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller: Caller
    request: _schedules_pb2.ResumeScheduleRequest
    def __init__(self, caller: _Optional[_Union[Caller, _Mapping]] = ..., request: _Optional[_Union[_schedules_pb2.ResumeScheduleRequest, _Mapping]] = ...) -> None: ...

class ResumeScheduleResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _schedules_pb2.ResumeScheduleResponse
    def __init__(self, response: _Optional[_Union[_schedules_pb2.ResumeScheduleResponse, _Mapping]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("caller", "request")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller: Caller
    request: _schedules_pb2.DeleteScheduleRequest
    def __init__(self, caller: _Optional[_Union[Caller, _Mapping]] = ..., request: _Optional[_Union[_schedules_pb2.DeleteScheduleRequest, _Mapping]] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _schedules_pb2.DeleteScheduleResponse
    def __init__(self, response: _Optional[_Union[_schedules_pb2.DeleteScheduleResponse, _Mapping]] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ("caller", "request")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    caller: Caller
    request: _schedules_pb2.TriggerScheduleRequest
    def __init__(self, caller: _Optional[_Union[Caller, _Mapping]] = ..., request: _Optional[_Union[_schedules_pb2.TriggerScheduleRequest, _Mapping]] = ...) -> None: ...

class TriggerScheduleResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _schedules_pb2.TriggerScheduleResponse
    def __init__(self, response: _Optional[_Union[_schedules_pb2.TriggerScheduleResponse, _Mapping]] = ...) -> None: ...
