import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from sessionq._pb.kagent.api.v1alpha1 import checkpoints_pb2 as _checkpoints_pb2
from sessionq._pb.kagent.api.v1alpha1 import common_pb2 as _common_pb2
from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2 as _sessions_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TurnCheckpointability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_CHECKPOINTABILITY_UNSPECIFIED: _ClassVar[TurnCheckpointability]
    TURN_CHECKPOINTABILITY_RETAINED: _ClassVar[TurnCheckpointability]
    TURN_CHECKPOINTABILITY_NOT_SETTLED: _ClassVar[TurnCheckpointability]
    TURN_CHECKPOINTABILITY_PENDING: _ClassVar[TurnCheckpointability]
    TURN_CHECKPOINTABILITY_CHECKPOINTED: _ClassVar[TurnCheckpointability]
    TURN_CHECKPOINTABILITY_RELEASED: _ClassVar[TurnCheckpointability]
    TURN_CHECKPOINTABILITY_NOT_RETAINED: _ClassVar[TurnCheckpointability]

class TagKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TAG_KIND_UNSPECIFIED: _ClassVar[TagKind]
    TAG_KIND_CHECKPOINT: _ClassVar[TagKind]
    TAG_KIND_TURN_PIN: _ClassVar[TagKind]
    TAG_KIND_OTHER: _ClassVar[TagKind]
TURN_CHECKPOINTABILITY_UNSPECIFIED: TurnCheckpointability
TURN_CHECKPOINTABILITY_RETAINED: TurnCheckpointability
TURN_CHECKPOINTABILITY_NOT_SETTLED: TurnCheckpointability
TURN_CHECKPOINTABILITY_PENDING: TurnCheckpointability
TURN_CHECKPOINTABILITY_CHECKPOINTED: TurnCheckpointability
TURN_CHECKPOINTABILITY_RELEASED: TurnCheckpointability
TURN_CHECKPOINTABILITY_NOT_RETAINED: TurnCheckpointability
TAG_KIND_UNSPECIFIED: TagKind
TAG_KIND_CHECKPOINT: TagKind
TAG_KIND_TURN_PIN: TagKind
TAG_KIND_OTHER: TagKind

class Turn(_message.Message):
    __slots__ = ("task_id", "sequence", "state", "created_at", "updated_at", "checkpointability", "message", "checkpoint_id", "checkpointable")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTABILITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTABLE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    sequence: int
    state: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    checkpointability: TurnCheckpointability
    message: str
    checkpoint_id: str
    checkpointable: bool
    def __init__(self, task_id: _Optional[str] = ..., sequence: _Optional[int] = ..., state: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., checkpointability: _Optional[_Union[TurnCheckpointability, str]] = ..., message: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., checkpointable: _Optional[bool] = ...) -> None: ...

class ListTurnsRequest(_message.Message):
    __slots__ = ("session_id", "page")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    page: _common_pb2.PageRequest
    def __init__(self, session_id: _Optional[str] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class ListTurnsResponse(_message.Message):
    __slots__ = ("turns", "page")
    TURNS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    turns: _containers.RepeatedCompositeFieldContainer[Turn]
    page: _common_pb2.PageResponse
    def __init__(self, turns: _Optional[_Iterable[_Union[Turn, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageResponse, _Mapping]] = ...) -> None: ...

class CreateTurnCheckpointRequest(_message.Message):
    __slots__ = ("session_id", "task_id", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    task_id: str
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., task_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateTurnCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: _checkpoints_pb2.Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[_checkpoints_pb2.Checkpoint, _Mapping]] = ...) -> None: ...

class ForkAtTurnRequest(_message.Message):
    __slots__ = ("session_id", "task_id", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    task_id: str
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., task_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ForkAtTurnResponse(_message.Message):
    __slots__ = ("session", "checkpoint_id")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    session: _sessions_pb2.Session
    checkpoint_id: str
    def __init__(self, session: _Optional[_Union[_sessions_pb2.Session, _Mapping]] = ..., checkpoint_id: _Optional[str] = ...) -> None: ...

class Tag(_message.Message):
    __slots__ = ("atespace", "name", "actor", "snapshot_generation", "created_at", "kind", "session_id", "checkpoint_id", "task_id", "state")
    ATESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    atespace: str
    name: str
    actor: str
    snapshot_generation: int
    created_at: _timestamp_pb2.Timestamp
    kind: TagKind
    session_id: str
    checkpoint_id: str
    task_id: str
    state: str
    def __init__(self, atespace: _Optional[str] = ..., name: _Optional[str] = ..., actor: _Optional[str] = ..., snapshot_generation: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[_Union[TagKind, str]] = ..., session_id: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., task_id: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class ListTagsRequest(_message.Message):
    __slots__ = ("atespace", "page")
    ATESPACE_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    atespace: str
    page: _common_pb2.PageRequest
    def __init__(self, atespace: _Optional[str] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class ListTagsResponse(_message.Message):
    __slots__ = ("tags", "page")
    TAGS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    tags: _containers.RepeatedCompositeFieldContainer[Tag]
    page: _common_pb2.PageResponse
    def __init__(self, tags: _Optional[_Iterable[_Union[Tag, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageResponse, _Mapping]] = ...) -> None: ...
