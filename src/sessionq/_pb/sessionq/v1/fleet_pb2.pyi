import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from sessionq._pb.kagent.api.v1alpha1 import common_pb2 as _common_pb2
from sessionq._pb.kagent.api.v1alpha1 import runtime_pb2 as _runtime_pb2
from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2 as _sessions_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActorState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTOR_STATE_UNSPECIFIED: _ClassVar[ActorState]
    ACTOR_STATE_RUNNING: _ClassVar[ActorState]
    ACTOR_STATE_PAUSED: _ClassVar[ActorState]
    ACTOR_STATE_SUSPENDED: _ClassVar[ActorState]

class BulkActionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BULK_ACTION_KIND_UNSPECIFIED: _ClassVar[BulkActionKind]
    BULK_ACTION_KIND_SUSPEND: _ClassVar[BulkActionKind]
    BULK_ACTION_KIND_RESUME: _ClassVar[BulkActionKind]
    BULK_ACTION_KIND_DELETE: _ClassVar[BulkActionKind]
    BULK_ACTION_KIND_SET_IDLE_TTL: _ClassVar[BulkActionKind]

class BulkActionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BULK_ACTION_STATE_UNSPECIFIED: _ClassVar[BulkActionState]
    BULK_ACTION_STATE_RUNNING: _ClassVar[BulkActionState]
    BULK_ACTION_STATE_DONE: _ClassVar[BulkActionState]
ACTOR_STATE_UNSPECIFIED: ActorState
ACTOR_STATE_RUNNING: ActorState
ACTOR_STATE_PAUSED: ActorState
ACTOR_STATE_SUSPENDED: ActorState
BULK_ACTION_KIND_UNSPECIFIED: BulkActionKind
BULK_ACTION_KIND_SUSPEND: BulkActionKind
BULK_ACTION_KIND_RESUME: BulkActionKind
BULK_ACTION_KIND_DELETE: BulkActionKind
BULK_ACTION_KIND_SET_IDLE_TTL: BulkActionKind
BULK_ACTION_STATE_UNSPECIFIED: BulkActionState
BULK_ACTION_STATE_RUNNING: BulkActionState
BULK_ACTION_STATE_DONE: BulkActionState

class FleetSession(_message.Message):
    __slots__ = ("session", "labels", "idle_ttl", "actor_state", "last_activity_at")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_FIELD_NUMBER: _ClassVar[int]
    ACTOR_STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVITY_AT_FIELD_NUMBER: _ClassVar[int]
    session: _sessions_pb2.Session
    labels: _containers.ScalarMap[str, str]
    idle_ttl: _duration_pb2.Duration
    actor_state: ActorState
    last_activity_at: _timestamp_pb2.Timestamp
    def __init__(self, session: _Optional[_Union[_sessions_pb2.Session, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., idle_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., actor_state: _Optional[_Union[ActorState, str]] = ..., last_activity_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SessionFilter(_message.Message):
    __slots__ = ("agent", "states", "selector", "creator", "created_after", "created_before", "active_after", "active_before", "actor_states", "all_creators")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    CREATOR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_AFTER_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_STATES_FIELD_NUMBER: _ClassVar[int]
    ALL_CREATORS_FIELD_NUMBER: _ClassVar[int]
    agent: _common_pb2.ResourceReference
    states: _containers.RepeatedScalarFieldContainer[_runtime_pb2.RuntimeState]
    selector: str
    creator: str
    created_after: _timestamp_pb2.Timestamp
    created_before: _timestamp_pb2.Timestamp
    active_after: _timestamp_pb2.Timestamp
    active_before: _timestamp_pb2.Timestamp
    actor_states: _containers.RepeatedScalarFieldContainer[ActorState]
    all_creators: bool
    def __init__(self, agent: _Optional[_Union[_common_pb2.ResourceReference, _Mapping]] = ..., states: _Optional[_Iterable[_Union[_runtime_pb2.RuntimeState, str]]] = ..., selector: _Optional[str] = ..., creator: _Optional[str] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., active_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., active_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actor_states: _Optional[_Iterable[_Union[ActorState, str]]] = ..., all_creators: _Optional[bool] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("session", "labels", "idle_ttl")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_FIELD_NUMBER: _ClassVar[int]
    session: _sessions_pb2.CreateSessionRequest
    labels: _containers.ScalarMap[str, str]
    idle_ttl: _duration_pb2.Duration
    def __init__(self, session: _Optional[_Union[_sessions_pb2.CreateSessionRequest, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., idle_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: FleetSession
    def __init__(self, session: _Optional[_Union[FleetSession, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: FleetSession
    def __init__(self, session: _Optional[_Union[FleetSession, _Mapping]] = ...) -> None: ...

class UpdateSessionLabelsRequest(_message.Message):
    __slots__ = ("session_id", "set", "remove", "replace")
    class SetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    set: _containers.ScalarMap[str, str]
    remove: _containers.RepeatedScalarFieldContainer[str]
    replace: bool
    def __init__(self, session_id: _Optional[str] = ..., set: _Optional[_Mapping[str, str]] = ..., remove: _Optional[_Iterable[str]] = ..., replace: _Optional[bool] = ...) -> None: ...

class UpdateSessionLabelsResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: FleetSession
    def __init__(self, session: _Optional[_Union[FleetSession, _Mapping]] = ...) -> None: ...

class SetSessionIdleTtlRequest(_message.Message):
    __slots__ = ("session_id", "idle_ttl")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    idle_ttl: _duration_pb2.Duration
    def __init__(self, session_id: _Optional[str] = ..., idle_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SetSessionIdleTtlResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: FleetSession
    def __init__(self, session: _Optional[_Union[FleetSession, _Mapping]] = ...) -> None: ...

class SearchSessionsRequest(_message.Message):
    __slots__ = ("filter", "page")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    filter: SessionFilter
    page: _common_pb2.PageRequest
    def __init__(self, filter: _Optional[_Union[SessionFilter, _Mapping]] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class SearchSessionsResponse(_message.Message):
    __slots__ = ("sessions", "page")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[FleetSession]
    page: _common_pb2.PageResponse
    def __init__(self, sessions: _Optional[_Iterable[_Union[FleetSession, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageResponse, _Mapping]] = ...) -> None: ...

class CountSessionsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: SessionFilter
    def __init__(self, filter: _Optional[_Union[SessionFilter, _Mapping]] = ...) -> None: ...

class CountSessionsResponse(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class BulkAction(_message.Message):
    __slots__ = ("id", "kind", "state", "matched", "processed", "admitted", "unchanged", "refused", "created_at", "finished_at", "filter")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    PROCESSED_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: BulkActionKind
    state: BulkActionState
    matched: int
    processed: int
    admitted: int
    unchanged: int
    refused: int
    created_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    filter: SessionFilter
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[BulkActionKind, str]] = ..., state: _Optional[_Union[BulkActionState, str]] = ..., matched: _Optional[int] = ..., processed: _Optional[int] = ..., admitted: _Optional[int] = ..., unchanged: _Optional[int] = ..., refused: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., filter: _Optional[_Union[SessionFilter, _Mapping]] = ...) -> None: ...

class BulkActionItem(_message.Message):
    __slots__ = ("session_id", "code", "message")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    code: str
    message: str
    def __init__(self, session_id: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class StartBulkActionRequest(_message.Message):
    __slots__ = ("request_id", "kind", "filter", "idle_ttl", "dry_run")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    kind: BulkActionKind
    filter: SessionFilter
    idle_ttl: _duration_pb2.Duration
    dry_run: bool
    def __init__(self, request_id: _Optional[str] = ..., kind: _Optional[_Union[BulkActionKind, str]] = ..., filter: _Optional[_Union[SessionFilter, _Mapping]] = ..., idle_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class StartBulkActionResponse(_message.Message):
    __slots__ = ("action", "count", "first_page")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_PAGE_FIELD_NUMBER: _ClassVar[int]
    action: BulkAction
    count: int
    first_page: _containers.RepeatedCompositeFieldContainer[FleetSession]
    def __init__(self, action: _Optional[_Union[BulkAction, _Mapping]] = ..., count: _Optional[int] = ..., first_page: _Optional[_Iterable[_Union[FleetSession, _Mapping]]] = ...) -> None: ...

class GetBulkActionRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetBulkActionResponse(_message.Message):
    __slots__ = ("action",)
    ACTION_FIELD_NUMBER: _ClassVar[int]
    action: BulkAction
    def __init__(self, action: _Optional[_Union[BulkAction, _Mapping]] = ...) -> None: ...

class ListBulkActionItemsRequest(_message.Message):
    __slots__ = ("id", "page")
    ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    page: _common_pb2.PageRequest
    def __init__(self, id: _Optional[str] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class ListBulkActionItemsResponse(_message.Message):
    __slots__ = ("items", "page")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[BulkActionItem]
    page: _common_pb2.PageResponse
    def __init__(self, items: _Optional[_Iterable[_Union[BulkActionItem, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageResponse, _Mapping]] = ...) -> None: ...

class SessionUsage(_message.Message):
    __slots__ = ("turns", "running_seconds", "running", "snapshots", "checkpoints_held", "resumes", "resume_seconds_total", "resume_seconds_max", "snapshot_bytes", "snapshots_sized")
    TURNS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_HELD_FIELD_NUMBER: _ClassVar[int]
    RESUMES_FIELD_NUMBER: _ClassVar[int]
    RESUME_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RESUME_SECONDS_MAX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_BYTES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_SIZED_FIELD_NUMBER: _ClassVar[int]
    turns: int
    running_seconds: float
    running: bool
    snapshots: int
    checkpoints_held: int
    resumes: int
    resume_seconds_total: float
    resume_seconds_max: float
    snapshot_bytes: int
    snapshots_sized: int
    def __init__(self, turns: _Optional[int] = ..., running_seconds: _Optional[float] = ..., running: _Optional[bool] = ..., snapshots: _Optional[int] = ..., checkpoints_held: _Optional[int] = ..., resumes: _Optional[int] = ..., resume_seconds_total: _Optional[float] = ..., resume_seconds_max: _Optional[float] = ..., snapshot_bytes: _Optional[int] = ..., snapshots_sized: _Optional[int] = ...) -> None: ...

class GetSessionUsageRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionUsageResponse(_message.Message):
    __slots__ = ("usage",)
    USAGE_FIELD_NUMBER: _ClassVar[int]
    usage: SessionUsage
    def __init__(self, usage: _Optional[_Union[SessionUsage, _Mapping]] = ...) -> None: ...
