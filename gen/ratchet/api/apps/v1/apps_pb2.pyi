import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from ratchet.api.tasks.v1 import tasks_pb2 as _tasks_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HandlerKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HANDLER_KIND_UNSPECIFIED: _ClassVar[HandlerKind]
    HANDLER_KIND_TASK: _ClassVar[HandlerKind]
    HANDLER_KIND_WORKFLOW: _ClassVar[HandlerKind]

class WorkflowResume(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKFLOW_RESUME_UNSPECIFIED: _ClassVar[WorkflowResume]
    WORKFLOW_RESUME_LATEST: _ClassVar[WorkflowResume]
    WORKFLOW_RESUME_PINNED: _ClassVar[WorkflowResume]
HANDLER_KIND_UNSPECIFIED: HandlerKind
HANDLER_KIND_TASK: HandlerKind
HANDLER_KIND_WORKFLOW: HandlerKind
WORKFLOW_RESUME_UNSPECIFIED: WorkflowResume
WORKFLOW_RESUME_LATEST: WorkflowResume
WORKFLOW_RESUME_PINNED: WorkflowResume

class Handler(_message.Message):
    __slots__ = ("name", "retry", "timeouts", "non_retryable", "kind", "resume")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUTS_FIELD_NUMBER: _ClassVar[int]
    NON_RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    name: str
    retry: _tasks_pb2.RetryPolicy
    timeouts: _tasks_pb2.Timeouts
    non_retryable: _containers.RepeatedScalarFieldContainer[str]
    kind: HandlerKind
    resume: WorkflowResume
    def __init__(self, name: _Optional[str] = ..., retry: _Optional[_Union[_tasks_pb2.RetryPolicy, _Mapping]] = ..., timeouts: _Optional[_Union[_tasks_pb2.Timeouts, _Mapping]] = ..., non_retryable: _Optional[_Iterable[str]] = ..., kind: _Optional[_Union[HandlerKind, str]] = ..., resume: _Optional[_Union[WorkflowResume, str]] = ...) -> None: ...

class CreateDeploymentRequest(_message.Message):
    __slots__ = ("app", "bundle", "digest", "module", "handlers", "allow_dropping_live_handlers")
    APP_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    MODULE_FIELD_NUMBER: _ClassVar[int]
    HANDLERS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_DROPPING_LIVE_HANDLERS_FIELD_NUMBER: _ClassVar[int]
    app: str
    bundle: bytes
    digest: str
    module: str
    handlers: _containers.RepeatedCompositeFieldContainer[Handler]
    allow_dropping_live_handlers: bool
    def __init__(self, app: _Optional[str] = ..., bundle: _Optional[bytes] = ..., digest: _Optional[str] = ..., module: _Optional[str] = ..., handlers: _Optional[_Iterable[_Union[Handler, _Mapping]]] = ..., allow_dropping_live_handlers: _Optional[bool] = ...) -> None: ...

class CreateDeploymentResponse(_message.Message):
    __slots__ = ("deployment",)
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    deployment: Deployment
    def __init__(self, deployment: _Optional[_Union[Deployment, _Mapping]] = ...) -> None: ...

class Deployment(_message.Message):
    __slots__ = ("app", "digest", "module", "handlers", "created_at", "created")
    APP_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    MODULE_FIELD_NUMBER: _ClassVar[int]
    HANDLERS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    app: str
    digest: str
    module: str
    handlers: _containers.RepeatedCompositeFieldContainer[Handler]
    created_at: _timestamp_pb2.Timestamp
    created: bool
    def __init__(self, app: _Optional[str] = ..., digest: _Optional[str] = ..., module: _Optional[str] = ..., handlers: _Optional[_Iterable[_Union[Handler, _Mapping]]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...
