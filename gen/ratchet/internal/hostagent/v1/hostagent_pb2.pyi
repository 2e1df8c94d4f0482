from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListSandboxesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Sandbox(_message.Message):
    __slots__ = ("sandbox_id", "pid", "app_id", "digest", "task_id", "attempt")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    pid: int
    app_id: str
    digest: str
    task_id: str
    attempt: int
    def __init__(self, sandbox_id: _Optional[str] = ..., pid: _Optional[int] = ..., app_id: _Optional[str] = ..., digest: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class ListSandboxesResponse(_message.Message):
    __slots__ = ("worker_id", "sandboxes")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    sandboxes: _containers.RepeatedCompositeFieldContainer[Sandbox]
    def __init__(self, worker_id: _Optional[str] = ..., sandboxes: _Optional[_Iterable[_Union[Sandbox, _Mapping]]] = ...) -> None: ...
