import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from ratchet.api.apps.v1 import apps_pb2 as _apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2 as _tasks_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
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
