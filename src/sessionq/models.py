"""Typed rows that the store returns. Built from the JSON the procedures return."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Self
from uuid import UUID


def _ts(v: Any) -> datetime | None:
    if v is None or isinstance(v, datetime):
        return v
    return datetime.fromisoformat(v)


def _uuid(v: Any) -> UUID | None:
    if v is None or isinstance(v, UUID):
        return v
    return UUID(v)


class Row:
    """Build a dataclass from a dict, converting uuid and timestamp columns by their annotation."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        kwargs: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            v = data.get(f.name)
            t = str(f.type)
            if "UUID" in t:
                v = _uuid(v)
            elif "datetime" in t:
                v = _ts(v)
            kwargs[f.name] = v
        return cls(**kwargs)


@dataclass(frozen=True)
class Session(Row):
    id: UUID
    creator: str
    request_kind: str
    request_id: str
    agent_namespace: str
    agent_name: str
    revision_id: UUID | None
    name: str
    state: str
    operation: str
    operation_id: UUID | None
    executor_id: UUID | None
    executor_expires_at: datetime | None
    failure_reason: str | None
    failure_message: str | None
    failed_operation_id: UUID | None
    actor_atespace: str
    actor_name: str
    actor_template: str
    actor_uid: str | None
    snapshot_generation: int | None
    snapshot_uri: str | None
    deletion_reason: str | None
    source_checkpoint_id: UUID | None
    pinned_checkpoint_id: UUID | None
    dispatch_id: UUID | None
    dispatch_expires_at: datetime | None
    dispatch_message: dict[str, Any] | None
    dispatch_task_id: str | None
    dispatch_failure: dict[str, Any] | None
    active_task_id: str | None
    unsettled_task_id: str | None
    last_event_seq: int
    last_event_at: datetime | None
    idle_boundary_id: UUID | None
    idle_boundary_at: datetime | None
    idle_executor: UUID | None
    idle_claimed_at: datetime | None
    snapshot_status: str | None
    snapshot_event_seq: int | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Task(Row):
    id: str
    session_id: UUID
    seq: int
    state: str
    task: dict[str, Any]
    version: int
    published_version: int
    staged_task: dict[str, Any] | None
    dispatch_id: UUID | None
    phase: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Admission:
    outcome: str  # admitted | joined | existing | noop
    generation: UUID | None
    session: Session
    # the store's LISTEN connection epoch when the admission was sent (None: not listening); while
    # it is unchanged, no notification that followed the admission can have been missed
    listen_epoch: int | None = None


@dataclass(frozen=True)
class Claim:
    status: str  # claimed | busy | superseded | done | gone
    previous_executor: UUID | None
    expires_at: datetime | None
    session: Session | None


@dataclass(frozen=True)
class OperationStart:
    """What `begin_operation` found: the Session, its pinned revision and, when preparation had
    nothing to inspect, the claim it already took (None: prepare, then claim)."""

    session: Session | None
    revision: Revision | None
    claim: Claim | None


@dataclass(frozen=True)
class Observation:
    status: str  # pending | done | failed | superseded | gone
    session: Session | None


@dataclass(frozen=True)
class Revision(Row):
    id: UUID
    agent_namespace: str
    agent_name: str
    number: int
    spec: dict[str, Any]
    image: str
    template_atespace: str
    template_name: str
    template_uid: str | None
    egress: list[dict[str, Any]]
    state: str
    failure_message: str | None
    created_at: datetime
    prepared_at: datetime | None


@dataclass(frozen=True)
class Agent(Row):
    namespace: str
    name: str
    spec: dict[str, Any]
    desired_revision_id: UUID
    latest_successful_revision_id: UUID | None
    conditions: list[dict[str, Any]]
    created_by: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Share(Row):
    id: UUID
    session_id: UUID
    permission: str
    created_by: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class Checkpoint(Row):
    id: UUID
    session_id: UUID
    creator: str
    request_id: str
    head_task_id: str
    history_sequence: int
    state: str
    name: str
    default_name: str
    agent_namespace: str
    agent_name: str
    revision_id: UUID | None
    actor_atespace: str
    actor_name: str
    actor_uid: str
    snapshot_generation: int
    snapshot_uri: str
    tag_name: str
    executor_id: UUID | None
    executor_expires_at: datetime | None
    failure_message: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class CheckpointClaim:
    status: str  # claimed | busy | done | gone
    previous_executor: UUID | None
    expires_at: datetime | None
    checkpoint: Checkpoint | None
