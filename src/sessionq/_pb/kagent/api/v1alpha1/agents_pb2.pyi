import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from sessionq._pb.kagent.api.v1alpha1 import common_pb2 as _common_pb2
from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2 as _sessions_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EgressDestination(_message.Message):
    __slots__ = ("url", "credential_headers")
    class CredentialHeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    URL_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_HEADERS_FIELD_NUMBER: _ClassVar[int]
    url: str
    credential_headers: _containers.ScalarMap[str, str]
    def __init__(self, url: _Optional[str] = ..., credential_headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AgentSpec(_message.Message):
    __slots__ = ("ref", "template", "egress")
    REF_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    EGRESS_FIELD_NUMBER: _ClassVar[int]
    ref: _common_pb2.ResourceReference
    template: str
    egress: _containers.RepeatedCompositeFieldContainer[EgressDestination]
    def __init__(self, ref: _Optional[_Union[_common_pb2.ResourceReference, _Mapping]] = ..., template: _Optional[str] = ..., egress: _Optional[_Iterable[_Union[EgressDestination, _Mapping]]] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ("type", "status", "reason", "message", "last_transition_time")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_TRANSITION_TIME_FIELD_NUMBER: _ClassVar[int]
    type: str
    status: str
    reason: str
    message: str
    last_transition_time: _timestamp_pb2.Timestamp
    def __init__(self, type: _Optional[str] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., last_transition_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Revision(_message.Message):
    __slots__ = ("id", "number", "state", "template_atespace", "template_name", "failure", "created_at", "prepared_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ATESPACE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_NAME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    PREPARED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    number: int
    state: str
    template_atespace: str
    template_name: str
    failure: _sessions_pb2.Failure
    created_at: _timestamp_pb2.Timestamp
    prepared_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., number: _Optional[int] = ..., state: _Optional[str] = ..., template_atespace: _Optional[str] = ..., template_name: _Optional[str] = ..., failure: _Optional[_Union[_sessions_pb2.Failure, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., prepared_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("ref", "spec", "conditions", "desired_revision", "latest_successful_revision", "revisions", "created_at", "updated_at")
    REF_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    DESIRED_REVISION_FIELD_NUMBER: _ClassVar[int]
    LATEST_SUCCESSFUL_REVISION_FIELD_NUMBER: _ClassVar[int]
    REVISIONS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    ref: _common_pb2.ResourceReference
    spec: AgentSpec
    conditions: _containers.RepeatedCompositeFieldContainer[Condition]
    desired_revision: str
    latest_successful_revision: str
    revisions: _containers.RepeatedCompositeFieldContainer[Revision]
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, ref: _Optional[_Union[_common_pb2.ResourceReference, _Mapping]] = ..., spec: _Optional[_Union[AgentSpec, _Mapping]] = ..., conditions: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., desired_revision: _Optional[str] = ..., latest_successful_revision: _Optional[str] = ..., revisions: _Optional[_Iterable[_Union[Revision, _Mapping]]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ApplyAgentRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: AgentSpec
    def __init__(self, spec: _Optional[_Union[AgentSpec, _Mapping]] = ...) -> None: ...

class ApplyAgentResponse(_message.Message):
    __slots__ = ("agent", "revision_created")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    REVISION_CREATED_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    revision_created: bool
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ..., revision_created: _Optional[bool] = ...) -> None: ...

class GetAgentRequest(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: _common_pb2.ResourceReference
    def __init__(self, agent: _Optional[_Union[_common_pb2.ResourceReference, _Mapping]] = ...) -> None: ...

class GetAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("namespace", "page")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    page: _common_pb2.PageRequest
    def __init__(self, namespace: _Optional[str] = ..., page: _Optional[_Union[_common_pb2.PageRequest, _Mapping]] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents", "page")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    page: _common_pb2.PageResponse
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ..., page: _Optional[_Union[_common_pb2.PageResponse, _Mapping]] = ...) -> None: ...

class DeleteAgentRequest(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: _common_pb2.ResourceReference
    def __init__(self, agent: _Optional[_Union[_common_pb2.ResourceReference, _Mapping]] = ...) -> None: ...

class DeleteAgentResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
