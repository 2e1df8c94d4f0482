import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from ratchet.internal.worker.v1 import worker_pb2 as _worker_pb2
from ratchet.api.apps.v1 import apps_pb2 as _apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2 as _tasks_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EnqueueScheduledRequest(_message.Message):
    __slots__ = ("tenant_id", "app_id", "schedule_id", "scheduled_time", "task")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_TIME_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    app_id: str
    schedule_id: str
    scheduled_time: _timestamp_pb2.Timestamp
    task: _tasks_pb2.EnqueueTaskRequest
    def __init__(self, tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., schedule_id: _Optional[str] = ..., scheduled_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., task: _Optional[_Union[_tasks_pb2.EnqueueTaskRequest, _Mapping]] = ...) -> None: ...

class EnqueueScheduledResponse(_message.Message):
    __slots__ = ("task_id", "deduplicated")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    deduplicated: bool
    def __init__(self, task_id: _Optional[str] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class GetActiveDeploymentRequest(_message.Message):
    __slots__ = ("app_id",)
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    def __init__(self, app_id: _Optional[str] = ...) -> None: ...

class GetActiveDeploymentResponse(_message.Message):
    __slots__ = ("app_id", "tenant_id", "deployment")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    tenant_id: str
    deployment: _apps_pb2.Deployment
    def __init__(self, app_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., deployment: _Optional[_Union[_apps_pb2.Deployment, _Mapping]] = ...) -> None: ...

class GetBundleRequest(_message.Message):
    __slots__ = ("digest",)
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    digest: str
    def __init__(self, digest: _Optional[str] = ...) -> None: ...

class GetBundleResponse(_message.Message):
    __slots__ = ("bundle",)
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    bundle: bytes
    def __init__(self, bundle: _Optional[bytes] = ...) -> None: ...

class StartChildrenRequest(_message.Message):
    __slots__ = ("tenant_id", "app_id", "parent_id", "position", "child_ids", "children")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    CHILD_IDS_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    app_id: str
    parent_id: str
    position: int
    child_ids: _containers.RepeatedScalarFieldContainer[str]
    children: _containers.RepeatedCompositeFieldContainer[_worker_pb2.ChildSpec]
    def __init__(self, tenant_id: _Optional[str] = ..., app_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., position: _Optional[int] = ..., child_ids: _Optional[_Iterable[str]] = ..., children: _Optional[_Iterable[_Union[_worker_pb2.ChildSpec, _Mapping]]] = ...) -> None: ...

class StartChildrenResponse(_message.Message):
    __slots__ = ("created",)
    CREATED_FIELD_NUMBER: _ClassVar[int]
    created: int
    def __init__(self, created: _Optional[int] = ...) -> None: ...
