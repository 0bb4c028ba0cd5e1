from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class RuntimeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUNTIME_STATE_UNSPECIFIED: _ClassVar[RuntimeState]
    RUNTIME_STATE_CREATING: _ClassVar[RuntimeState]
    RUNTIME_STATE_READY: _ClassVar[RuntimeState]
    RUNTIME_STATE_SUSPENDED: _ClassVar[RuntimeState]
    RUNTIME_STATE_FAILED: _ClassVar[RuntimeState]
    RUNTIME_STATE_DELETING: _ClassVar[RuntimeState]
    RUNTIME_STATE_DELETED: _ClassVar[RuntimeState]

class RuntimeOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUNTIME_OPERATION_UNSPECIFIED: _ClassVar[RuntimeOperation]
    RUNTIME_OPERATION_CREATE: _ClassVar[RuntimeOperation]
    RUNTIME_OPERATION_SUSPEND: _ClassVar[RuntimeOperation]
    RUNTIME_OPERATION_RESUME: _ClassVar[RuntimeOperation]
    RUNTIME_OPERATION_DELETE: _ClassVar[RuntimeOperation]
    RUNTIME_OPERATION_NONE: _ClassVar[RuntimeOperation]

class CheckpointState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHECKPOINT_STATE_UNSPECIFIED: _ClassVar[CheckpointState]
    CHECKPOINT_STATE_CREATING: _ClassVar[CheckpointState]
    CHECKPOINT_STATE_READY: _ClassVar[CheckpointState]
    CHECKPOINT_STATE_FAILED: _ClassVar[CheckpointState]
    CHECKPOINT_STATE_DELETING: _ClassVar[CheckpointState]

class SessionSharePermission(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_SHARE_PERMISSION_UNSPECIFIED: _ClassVar[SessionSharePermission]
    SESSION_SHARE_PERMISSION_READ_ONLY: _ClassVar[SessionSharePermission]
    SESSION_SHARE_PERMISSION_READ_WRITE: _ClassVar[SessionSharePermission]
RUNTIME_STATE_UNSPECIFIED: RuntimeState
RUNTIME_STATE_CREATING: RuntimeState
RUNTIME_STATE_READY: RuntimeState
RUNTIME_STATE_SUSPENDED: RuntimeState
RUNTIME_STATE_FAILED: RuntimeState
RUNTIME_STATE_DELETING: RuntimeState
RUNTIME_STATE_DELETED: RuntimeState
RUNTIME_OPERATION_UNSPECIFIED: RuntimeOperation
RUNTIME_OPERATION_CREATE: RuntimeOperation
RUNTIME_OPERATION_SUSPEND: RuntimeOperation
RUNTIME_OPERATION_RESUME: RuntimeOperation
RUNTIME_OPERATION_DELETE: RuntimeOperation
RUNTIME_OPERATION_NONE: RuntimeOperation
CHECKPOINT_STATE_UNSPECIFIED: CheckpointState
CHECKPOINT_STATE_CREATING: CheckpointState
CHECKPOINT_STATE_READY: CheckpointState
CHECKPOINT_STATE_FAILED: CheckpointState
CHECKPOINT_STATE_DELETING: CheckpointState
SESSION_SHARE_PERMISSION_UNSPECIFIED: SessionSharePermission
SESSION_SHARE_PERMISSION_READ_ONLY: SessionSharePermission
SESSION_SHARE_PERMISSION_READ_WRITE: SessionSharePermission

class ResourceReference(_message.Message):
    __slots__ = ("namespace", "name")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class PageRequest(_message.Message):
    __slots__ = ("limit", "page_token")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    limit: int
    page_token: str
    def __init__(self, limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class PageResponse(_message.Message):
    __slots__ = ("next_page_token",)
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    def __init__(self, next_page_token: _Optional[str] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("reason", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
