"""Typed rows that the store returns, and the states, kinds and outcomes they carry.

Built from the JSON the procedures return (`Row.from_json` converts uuid, timestamp and enum
columns by their annotation). Every `StrEnum` here holds exactly the strings that the SQL allows:
a CHECK constraint of its column, or the statuses its procedures return (tests/db/test_enums.py
compares them with the database, so that a drift fails). A StrEnum member is a `str`: it compares
equal to its value, formats as its value and goes to PostgreSQL and JSON as its value.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from types import NoneType, UnionType
from typing import Any, ClassVar, NamedTuple, Self, Union, get_args, get_origin, get_type_hints
from uuid import UUID

# -- column values (CHECK constraints) -------------------------------------------------------------


class SessionState(enum.StrEnum):
    """sessions.state: the lifecycle state of a Session."""

    CREATING = "CREATING"
    READY = "READY"
    SUSPENDED = "SUSPENDED"
    FAILED = "FAILED"
    DELETING = "DELETING"
    DELETED = "DELETED"


class OperationKind(enum.StrEnum):
    """sessions.operation: the lifecycle operation in flight (NONE: none)."""

    NONE = "NONE"
    CREATE = "CREATE"
    SUSPEND = "SUSPEND"
    RESUME = "RESUME"
    DELETE = "DELETE"


class RequestKind(enum.StrEnum):
    """sessions.request_kind: the request that created a Session."""

    CREATE = "create"
    FORK = "fork"
    SANDBOX = "sandbox"


class QuiescenceFailureReason(enum.StrEnum):
    """sessions.quiescence_failure.reason (record_quiescence_failure allows exactly these): why the
    boundary after a turn got neither a pause nor a snapshot (kagent's QuiescenceFailure.reason)."""

    SUSPEND_FAILED = "SuspendFailed"
    PAUSE_FAILED = "PauseFailed"
    RUNTIME_UNAVAILABLE = "RuntimeUnavailable"


class RowKind(enum.StrEnum):
    """sessions.kind (generated from request_kind): a Session, or a standalone Sandbox of
    SandboxService (schema/25_sandboxes.sql), which runs on the same lifecycle machinery."""

    SESSION = "session"
    SANDBOX = "sandbox"


class DeletionReason(enum.StrEnum):
    """sessions.deletion_reason: why a Session is being (or was) deleted."""

    USER_REQUESTED = "user_requested"
    IDLE_TIMEOUT = "idle_timeout"


class SnapshotState(enum.StrEnum):
    """sessions.snapshot_status: whether the recorded snapshot generation is durable yet."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"


class SharePermission(enum.StrEnum):
    """session_shares.permission."""

    READ_ONLY = "READ_ONLY"
    READ_WRITE = "READ_WRITE"


class RevisionState(enum.StrEnum):
    """revisions.state: whether the revision's actor template is prepared."""

    PENDING = "PENDING"
    READY = "READY"
    FAILED = "FAILED"


class ApplyMode(enum.StrEnum):
    """p_mode of apply_agent: create or update (apply), create only (CreateAgent), update only (UpdateAgent)."""

    APPLY = "apply"
    CREATE = "create"
    UPDATE = "update"


class CheckpointState(enum.StrEnum):
    """checkpoints.state."""

    CREATING = "CREATING"
    READY = "READY"
    FAILED = "FAILED"
    DELETING = "DELETING"


class TaskPhase(enum.StrEnum):
    """tasks.phase: a turn is active, settled, abandoned (interrupted; never continued), or queued
    (admitted while another turn ran; waiting in queued_turns)."""

    ACTIVE = "active"
    SETTLED = "settled"
    ABANDONED = "abandoned"
    QUEUED = "queued"


class BusyPolicy(enum.StrEnum):
    """What a message to a Session whose turn is still running does (A2A message metadata
    ``busyPolicy``, else the Agent spec's ``busyPolicy``, else reject)."""

    REJECT = "reject"  # refused: ABORTED, KAGENT_SEND_NOT_ACCEPTED with retryAfterMs
    ENQUEUE = "enqueue"  # queued: its task SUBMITTED, run after the turns before it
    INTERRUPT = "interrupt"  # the running turn canceled, this one run next


class QueuedTurnPolicy(enum.StrEnum):
    """queued_turns.policy: the busy policy a queued turn came with (a rejected message is never queued)."""

    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"


class PreparationFailure(enum.StrEnum):
    """sessions.failure_reason as the executor writes it: why a generation's read-only
    preparation failed (clients see it as Failure.reason). The column is free text."""

    REVISION_UNAVAILABLE = "RevisionUnavailable"
    CHECKPOINT_UNAVAILABLE = "CheckpointUnavailable"
    CHECKPOINT_MISMATCH = "CheckpointMismatch"
    ACTOR_REPLACED = "ActorReplaced"
    RUNTIME_UNAVAILABLE = "RuntimeUnavailable"  # transient: the client may retry


class AttemptFailure(enum.StrEnum):
    """sessions.failure_reason while the operation is still pending (failed_operation_id unset): why
    its last attempt failed; the execute_operation job retries it. Clients see it as Failure.reason."""

    RUNTIME_ERROR = "RuntimeError"  # the runtime answered an error (its code and message are shown)
    RUNTIME_CONFLICT = "RuntimeConflict"  # the runtime holds something sessionq never adopts
    ATTEMPT_TIMED_OUT = "AttemptTimedOut"  # the attempt outlived its claim
    INTERNAL_ERROR = "InternalError"  # anything else: only its type is shown; the worker log has the rest


class TurnFailure(enum.StrEnum):
    """sessions.failure_reason with no operation pending: why the Session's last turn could not
    start (record_turn_failure), until a resume succeeds. Clients see it as Failure.reason."""

    RESTORE_FAILED = "RestoreFailed"  # the Actor's snapshot could not be restored (the runtime's DATA_LOSS)


class PushDeliveryState(enum.StrEnum):
    """push_deliveries.state: an A2A push notification waits, was delivered, or was given up."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class CancelOutcome(enum.StrEnum):
    """task_cancels.outcome (and finish_cancel's result): how an A2A cancel intent ended."""

    CANCELED = "canceled"
    ALREADY_FINAL = "already_final"  # the task reached a final state on its own first


class CancelAdmission(enum.StrEnum):
    """admit_cancel's outcome: the Actor is being told (pending), or the task is already ended."""

    PENDING = "pending"
    FINISHED = "finished"


class JobAttemptOutcome(enum.StrEnum):
    """job_attempts.outcome: how one attempt of a job ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # no attempt left: the job is failed
    RETRIED = "retried"  # it failed; another attempt is scheduled
    ABORTED = "aborted"  # cancelled by an operator or a drain (a drain retries it)
    STALLED = "stalled"  # its worker stopped heartbeating (recorded by the reaper or a requeue)


class JobStatus(enum.StrEnum):
    """A procrastinate job's status (sessionq.job_rows.status, the bridge's vocabulary)."""

    TODO = "todo"
    DOING = "doing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ABORTED = "aborted"


# -- procedure results ---------------------------------------------------------------------------


class AdmissionOutcome(enum.StrEnum):
    """outcome of admit_create, admit_operation and admit_fork."""

    ADMITTED = "admitted"  # a new generation
    JOINED = "joined"  # the same operation was pending: wait for its generation
    EXISTING = "existing"  # a retried creation of a Session that exists: its current state
    NOOP = "noop"  # already at the target state


class ClaimStatus(enum.StrEnum):
    """status of claim_operation (and begin_operation, which may claim at once)."""

    CLAIMED = "claimed"
    BUSY = "busy"  # another attempt holds a live claim, until expires_at
    SUPERSEDED = "superseded"
    DONE = "done"
    GONE = "gone"
    PREPARE = "prepare"  # begin_operation only: prepare, then claim_operation


class CheckpointClaimStatus(enum.StrEnum):
    """status of claim_checkpoint."""

    CLAIMED = "claimed"
    BUSY = "busy"
    DONE = "done"
    GONE = "gone"


class ObservationStatus(enum.StrEnum):
    """status of observe: what became of a generation a caller waits for."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"  # its preparation failed
    SUPERSEDED = "superseded"
    GONE = "gone"  # the row was removed (idle expiry)


class ExpiryOutcome(enum.StrEnum):
    """outcome of expire_session."""

    ADMITTED = "admitted"
    RESUMED = "resumed"
    BUSY = "busy"
    ACTIVE = "active"
    GONE = "gone"


def _ts(v: Any) -> datetime | None:
    if v is None or isinstance(v, datetime):
        return v
    return datetime.fromisoformat(v)


def _uuid(v: Any) -> UUID | None:
    if v is None or isinstance(v, UUID):
        return v
    return UUID(v)


def _enum(cls: type[enum.StrEnum]) -> Callable[[Any], Any]:
    members = cls._value2member_map_

    def convert(v: Any) -> Any:
        if v is None:
            return None
        try:
            return members[v]
        except KeyError:
            raise ValueError(f"{v!r} is not a {cls.__name__}") from None

    return convert


def _converter(annotation: Any) -> Callable[[Any], Any] | None:
    """How to convert a JSON value to a field's type (None: as it is)."""
    if get_origin(annotation) in (Union, UnionType):
        inner = [a for a in get_args(annotation) if a is not NoneType]
        annotation = inner[0] if len(inner) == 1 else annotation
    if annotation is UUID:
        return _uuid
    if annotation is datetime:
        return _ts
    if isinstance(annotation, type) and issubclass(annotation, enum.StrEnum):
        return _enum(annotation)
    return None


class Row:
    """Build a dataclass from a dict, converting uuid, timestamp and enum columns by their annotation."""

    _builders: ClassVar[dict[type, Callable[[dict[str, Any]], Any]]] = {}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        build = Row._builders.get(cls)
        if build is None:
            build = Row._builders[cls] = _builder(cls)
        return build(data)


def _builder(cls: type) -> Callable[[dict[str, Any]], Any]:
    """How to build a record of `cls` from a dict, planned once per class: the fields kept as they
    are, and those converted (uuid, timestamp, enum). A missing key is None. The record is filled
    in directly: a frozen dataclass's __init__ sets each field through object.__setattr__, which
    costs more than the conversions on a read path that builds a page of records per call."""
    hints = get_type_hints(cls)
    plain: list[str] = []
    converted: list[tuple[str, Callable[[Any], Any]]] = []
    for f in fields(cls):
        convert = _converter(hints[f.name])
        if convert is None:
            plain.append(f.name)
        else:
            converted.append((f.name, convert))
    new = object.__new__

    def build(data: dict[str, Any]) -> Any:
        get = data.get
        values = {name: get(name) for name in plain}
        for name, convert in converted:
            v = get(name)
            values[name] = None if v is None else convert(v)
        record: Any = new(cls)
        record.__dict__.update(values)
        return record

    return build


class SessionView(NamedTuple):
    """What the API shows of a Session (api/sessions.py session_to_proto): the fields of a Session
    that the answer carries, as the wire takes them: text, times in microseconds since the epoch,
    the enums' names. `Session.view()` derives it from a Session; GetSession and ListSessions read
    it directly (sessionq.get_session_views, sessionq.list_session_views: one column per field, of
    the field's name), so the reads that serve most requests decode these dozen columns only.
    A field the answer shows is added here, to `Session.view()`, to those two functions, to the
    fleet's search_session_views and to session_to_proto (tests/sessions/test_session_proto.py and
    tests/fleet/test_search_api.py check the functions' columns)."""

    id: str
    creator: str
    revision_id: str | None
    agent_namespace: str
    agent_name: str
    state: str
    operation: str
    name: str
    created_us: int
    updated_us: int
    failure_reason: str | None
    failure_message: str | None
    quiescence_failure: dict[str, Any] | None


class FleetSessionView(NamedTuple):
    """What SearchSessions shows of a Session (sessionq.search_session_views' columns): the
    SessionView and what the fleet adds beside it."""

    view: SessionView
    labels: dict[str, str]
    idle_ttl: float | None  # seconds (None: sessions.idleTtl)
    actor_state: str | None  # ActorState's value, None while created or deleted
    active_us: int  # the idle clock (the later of creation and the newest stored event), µs since the epoch


@dataclass(frozen=True)
class Session(Row):
    id: UUID
    creator: str
    request_kind: RequestKind
    request_id: str
    agent_namespace: str
    agent_name: str
    revision_id: UUID | None
    name: str
    state: SessionState
    operation: OperationKind
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
    deletion_reason: DeletionReason | None
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
    snapshot_status: SnapshotState | None
    snapshot_event_seq: int | None
    created_at: datetime
    updated_at: datetime
    kind: RowKind = RowKind.SESSION
    expires_at: datetime | None = None  # sandboxes only
    # the quiescence failure record {task_id, reason (QuiescenceFailureReason), message, failed_at}
    quiescence_failure: dict[str, Any] | None = None
    # an uncertain idle claim (its attempt ended without an outcome): since when, when it may be taken
    # over next, failed attempts, whether the last one certainly never reached the runtime
    idle_uncertain_at: datetime | None = None
    idle_retry_at: datetime | None = None
    idle_attempts: int | None = None
    idle_unsent: bool | None = None
    # the fleet (schema/22_fleet.sql): labels, and the Session's own idle TTL in seconds (None:
    # sessions.idleTtl; 0: never)
    labels: dict[str, str] | None = None
    idle_ttl: float | None = None
    # since when the Actor is paused waiting for input (sessions.pausedRuntimeTtl), not suspended
    actor_paused_at: datetime | None = None
    # the recorded snapshot's size in bytes, as the runtime reported it (None: unknown)
    snapshot_bytes: int | None = None

    def view(self) -> SessionView:
        """What the API shows of this Session."""
        return SessionView(
            str(self.id), self.creator, str(self.revision_id) if self.revision_id else None, self.agent_namespace,
            self.agent_name, self.state, self.operation, self.name, _micros(self.created_at),
            _micros(self.updated_at), self.failure_reason, self.failure_message, self.quiescence_failure,
        )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(value: datetime) -> int:
    """Microseconds since the epoch (a naive time taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(microseconds=1)


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
    phase: TaskPhase
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Admission:
    outcome: AdmissionOutcome
    generation: UUID | None
    session: Session
    # the store's LISTEN connection epoch when the admission was sent (None: not listening); while
    # it is unchanged, no notification that followed the admission can have been missed
    listen_epoch: int | None = None


@dataclass(frozen=True)
class Claim:
    status: ClaimStatus
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

    @classmethod
    def from_row(cls, row: Any, prefix: str = "") -> OperationStart:
        """From begin_operation's row (status, previous_executor, expires_at, session, revision),
        its columns named with `prefix` (sessionq.fetch_job_begun: "begun_")."""
        s, r = row[prefix + "session"], row[prefix + "revision"]
        session = Session.from_json(s) if s is not None else None
        revision = Revision.from_json(r) if r is not None else None
        status = ClaimStatus(row[prefix + "status"])
        claim = None
        if status not in (ClaimStatus.PREPARE, ClaimStatus.GONE):
            claim = Claim(status, row[prefix + "previous_executor"], row[prefix + "expires_at"], session)
        return cls(session, revision, claim)


@dataclass(frozen=True)
class Observation:
    status: ObservationStatus
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
    state: RevisionState
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
    permission: SharePermission
    created_by: str
    created_at: datetime
    expires_at: datetime | None  # None: until revoked


@dataclass(frozen=True)
class Checkpoint(Row):
    id: UUID
    session_id: UUID
    creator: str
    request_id: str
    head_task_id: str
    history_sequence: int
    state: CheckpointState
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
    # the URI of the tag's own snapshot copy (a real Substrate's differs from snapshot_uri); None
    # until READY
    tag_snapshot_uri: str | None = None


@dataclass(frozen=True)
class CheckpointClaim:
    status: CheckpointClaimStatus
    previous_executor: UUID | None
    expires_at: datetime | None
    checkpoint: Checkpoint | None


class EventKind(enum.StrEnum):
    """lifecycle_events.kind: the transition a lifecycle event records (schema/45_events.sql)."""

    CREATED = "created"
    READY = "ready"
    SUSPENDED = "suspended"
    RESUMED = "resumed"
    PAUSED = "paused"
    CHECKPOINTED = "checkpointed"
    FORKED = "forked"
    QUIESCENCE_FAILED = "quiescence_failed"
    EXPIRING_SOON = "expiring_soon"
    EXPIRED = "expired"
    DELETING = "deleting"
    DELETED = "deleted"
    RUNTIME_LOST = "runtime_lost"


@dataclass(frozen=True)
class LifecycleEvent(Row):
    """One lifecycle event of a Session (sessionq.lifecycle_events). Its position (xid, seq) orders
    it for every reader; `id` is the position as text, the SSE id and the page token."""

    seq: int
    xid: int
    session_id: UUID
    kind: EventKind
    owner: str
    agent_namespace: str
    agent_name: str
    operation_id: UUID | None
    task_id: str | None
    payload: dict[str, Any]
    created_at: datetime

    @property
    def id(self) -> str:
        return f"{self.xid}-{self.seq}"


class WebhookDeliveryState(enum.StrEnum):
    """webhook_deliveries.state."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True)
class WebhookSubscription(Row):
    """A webhook subscription as its owner reads it: never its secret."""

    id: UUID
    owner: str
    is_global: bool
    url: str
    event_types: list[str]
    agent_namespace: str | None
    agent_name: str | None
    enabled: bool
    consecutive_failures: int
    last_failure: str | None
    disabled_at: datetime | None
    created_at: datetime
    updated_at: datetime


class ActorState(enum.StrEnum):
    """sessionq.actor_state: a Session's Actor as its row knows it (22_fleet.sql). PAUSED is
    accepted in a filter but never answered (sessionq quiesces by suspending)."""

    RUNNING = "running"
    PAUSED = "paused"
    SUSPENDED = "suspended"


class BulkActionKind(enum.StrEnum):
    """bulk_actions.kind."""

    SUSPEND = "SUSPEND"
    RESUME = "RESUME"
    DELETE = "DELETE"
    SET_IDLE_TTL = "SET_IDLE_TTL"


class BulkActionState(enum.StrEnum):
    """bulk_actions.state."""

    RUNNING = "RUNNING"
    DONE = "DONE"


@dataclass(frozen=True)
class BulkAction(Row):
    """A bulk action by filter (sessionq.bulk_actions)."""

    id: UUID
    caller: str
    request_id: str
    kind: BulkActionKind
    filter: dict[str, Any]
    all_creators: bool
    idle_ttl: float | None
    state: BulkActionState
    matched: int
    processed: int
    admitted: int
    unchanged: int
    refused: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class BulkActionItem(Row):
    """A Session a bulk action reported rather than forced (sessionq.bulk_action_items)."""

    session_id: UUID
    code: str
    message: str


class TurnPinState(enum.StrEnum):
    """turn_snapshots.state (schema/40_checkpoints.sql)."""

    PINNING = "PINNING"
    PINNED = "PINNED"
    RELEASING = "RELEASING"


class TurnCheckpointability(enum.StrEnum):
    """Whether a turn can be checkpointed now, or why not (sessionq.turn_checkpointability)."""

    RETAINED = "RETAINED"  # its pin is held: checkpoint or fork it
    NOT_SETTLED = "NOT_SETTLED"  # running, waiting or unsettled
    PENDING = "PENDING"  # its pin is being made
    CHECKPOINTED = "CHECKPOINTED"  # a checkpoint of the caller holds its snapshot (checkpoint_id)
    RELEASED = "RELEASED"  # outside the retained window
    NOT_RETAINED = "NOT_RETAINED"  # never pinned (retention off, or the pin could not be made)


@dataclass(frozen=True)
class TurnPin(Row):
    """A turn pin: the tag holding the snapshot recorded after a settled turn."""

    id: UUID
    session_id: UUID
    task_id: str
    task_seq: int
    history_sequence: int
    state: TurnPinState
    revision_id: UUID | None
    actor_atespace: str
    actor_name: str
    actor_uid: str
    snapshot_generation: int
    snapshot_uri: str
    tag_name: str
    tag_snapshot_uri: str | None
    executor_id: UUID | None
    failure_message: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Turn(Row):
    """One turn of a Session as ListTurns shows it (sessionq.list_turns)."""

    task_id: str
    seq: int
    state: str  # the A2A task state (TASK_STATE_*)
    phase: str
    created_at: datetime
    updated_at: datetime
    status: TurnCheckpointability
    message: str
    checkpoint_id: UUID | None


class TagKind(enum.StrEnum):
    """What a runtime tag is to sessionq (sessionq.describe_tags)."""

    CHECKPOINT = "CHECKPOINT"
    TURN_PIN = "TURN_PIN"
    OTHER = "OTHER"


@dataclass(frozen=True)
class TagOwner(Row):
    """What sessionq knows of one runtime tag (sessionq.describe_tags)."""

    tag_name: str
    kind: TagKind
    session_id: UUID | None
    checkpoint_id: UUID | None
    task_id: str | None
    state: str | None
