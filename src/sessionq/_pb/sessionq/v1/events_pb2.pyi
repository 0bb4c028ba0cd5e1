import datetime

from sessionq._pb.buf.validate import validate_pb2 as _validate_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from sessionq._pb.kagent.api.v1alpha1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_KIND_UNSPECIFIED: _ClassVar[EventKind]
    EVENT_KIND_CREATED: _ClassVar[EventKind]
    EVENT_KIND_READY: _ClassVar[EventKind]
    EVENT_KIND_SUSPENDED: _ClassVar[EventKind]
    EVENT_KIND_RESUMED: _ClassVar[EventKind]
    EVENT_KIND_PAUSED: _ClassVar[EventKind]
    EVENT_KIND_CHECKPOINTED: _ClassVar[EventKind]
    EVENT_KIND_FORKED: _ClassVar[EventKind]
    EVENT_KIND_QUIESCENCE_FAILED: _ClassVar[EventKind]
    EVENT_KIND_EXPIRING_SOON: _ClassVar[EventKind]
    EVENT_KIND_EXPIRED: _ClassVar[EventKind]
    EVENT_KIND_DELETING: _ClassVar[EventKind]
    EVENT_KIND_DELETED: _ClassVar[EventKind]
    EVENT_KIND_RUNTIME_LOST: _ClassVar[EventKind]
EVENT_KIND_UNSPECIFIED: EventKind
EVENT_KIND_CREATED: EventKind
EVENT_KIND_READY: EventKind
EVENT_KIND_SUSPENDED: EventKind
EVENT_KIND_RESUMED: EventKind
EVENT_KIND_PAUSED: EventKind
EVENT_KIND_CHECKPOINTED: EventKind
EVENT_KIND_FORKED: EventKind
EVENT_KIND_QUIESCENCE_FAILED: EventKind
EVENT_KIND_EXPIRING_SOON: EventKind
EVENT_KIND_EXPIRED: EventKind
EVENT_KIND_DELETING: EventKind
EVENT_KIND_DELETED: EventKind
EVENT_KIND_RUNTIME_LOST: EventKind

class Event(_message.Message):
    __slots__ = ("id", "session_id", "kind", "type", "owner", "agent_namespace", "agent_name", "operation_id", "task_id", "payload", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    session_id: str
    kind: EventKind
    type: str
    owner: str
    agent_namespace: str
    agent_name: str
    operation_id: str
    task_id: str
    payload: _struct_pb2.Struct
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., session_id: _Optional[str] = ..., kind: _Optional[_Union[EventKind, str]] = ..., type: _Optional[str] = ..., owner: _Optional[str] = ..., agent_namespace: _Optional[str] = ..., agent_name: _Optional[str] = ..., operation_id: _Optional[str] = ..., task_id: _Optional[str] = ..., payload: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("session_id", "kinds", "page")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    kinds: _containers.RepeatedScalarFieldContainer[EventKind]
    page: _common_pb2.PageRequest
    def __init__(self, session_id: _Optional[str] = ..., kinds: _Optional[_Iterable[_Union[EventKind, str]]] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ("events", "page", "cursor")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    page: _common_pb2.PageResponse
    cursor: str
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageResponse, _Mapping]] = ..., cursor: _Optional[str] = ...) -> None: ...

class Webhook(_message.Message):
    __slots__ = ("id", "owner", "url", "event_types", "agent_namespace", "agent_name", "enabled", "consecutive_failures", "last_failure", "created_at", "disabled_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DISABLED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    owner: str
    url: str
    event_types: _containers.RepeatedScalarFieldContainer[EventKind]
    agent_namespace: str
    agent_name: str
    enabled: bool
    consecutive_failures: int
    last_failure: str
    created_at: _timestamp_pb2.Timestamp
    disabled_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., owner: _Optional[str] = ..., url: _Optional[str] = ..., event_types: _Optional[_Iterable[_Union[EventKind, str]]] = ..., agent_namespace: _Optional[str] = ..., agent_name: _Optional[str] = ..., enabled: _Optional[bool] = ..., consecutive_failures: _Optional[int] = ..., last_failure: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., disabled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., **kwargs) -> None: ...

class CreateWebhookRequest(_message.Message):
    __slots__ = ("url", "event_types", "agent_namespace", "agent_name")
    URL_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_FIELD_NUMBER: _ClassVar[int]
    url: str
    event_types: _containers.RepeatedScalarFieldContainer[EventKind]
    agent_namespace: str
    agent_name: str
    def __init__(self, url: _Optional[str] = ..., event_types: _Optional[_Iterable[_Union[EventKind, str]]] = ..., agent_namespace: _Optional[str] = ..., agent_name: _Optional[str] = ..., **kwargs) -> None: ...

class CreateWebhookResponse(_message.Message):
    __slots__ = ("webhook", "secret")
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    webhook: Webhook
    secret: str
    def __init__(self, webhook: _Optional[_Union[Webhook, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListWebhooksRequest(_message.Message):
    __slots__ = ("page",)
    PAGE_FIELD_NUMBER: _ClassVar[int]
    page: _common_pb2.PageRequest
    def __init__(self, page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class ListWebhooksResponse(_message.Message):
    __slots__ = ("webhooks", "page")
    WEBHOOKS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    webhooks: _containers.RepeatedCompositeFieldContainer[Webhook]
    page: _common_pb2.PageResponse
    def __init__(self, webhooks: _Optional[_Iterable[_Union[Webhook, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageResponse, _Mapping]] = ...) -> None: ...

class DeleteWebhookRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteWebhookResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
