"""The runtime boundary: everything sessionq asks of Substrate goes through `Substrate`.

The shapes follow the Substrate control API (`ateapi.Control`) as described in
`shared/spec/wire.md`: Actors with a server-assigned UID and a version that rises on every
mutation, VOLUMES snapshots with increasing generations, tags that pin snapshots, one egress
policy named ``default`` per Actor, actor templates (one per prepared revision) and a pool of
workers that a RUNNING Actor holds.

Every method is a network call in production: callers must hold no database transaction or
lock while awaiting one (clause OP-3).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class Code(enum.StrEnum):
    """gRPC status code names the runtime answers with."""

    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    UNAVAILABLE = "UNAVAILABLE"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    ABORTED = "ABORTED"
    INTERNAL = "INTERNAL"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    # the remaining gRPC codes, so that a runtime served over gRPC maps one to one (runtime/ateapi)
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    DATA_LOSS = "DATA_LOSS"


# how a runtime's DATA_LOSS answer to a resume begins: the snapshot could not be restored, and why
RESTORE_FAILED = "the snapshot could not be restored"


class SubstrateError(Exception):
    """A runtime call failed with a status code. Whether its effect was applied is in general not
    known to the caller: a lost response looks exactly like a failure before the effect
    (UNAVAILABLE). `not_sent` is the one certain exception: the call never reached the runtime (no
    connection could be made to it: refused, no route, the name did not resolve, the handshake
    failed; or a read that had to precede it failed), so nothing was issued."""

    def __init__(self, code: Code, message: str, *, not_sent: bool = False) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
        self.not_sent = not_sent


class ActorState(enum.StrEnum):
    UNSPECIFIED = "ACTOR_STATE_UNSPECIFIED"
    RESUMING = "ACTOR_STATE_RESUMING"
    RUNNING = "ACTOR_STATE_RUNNING"
    SUSPENDING = "ACTOR_STATE_SUSPENDING"
    SUSPENDED = "ACTOR_STATE_SUSPENDED"
    PAUSING = "ACTOR_STATE_PAUSING"
    PAUSED = "ACTOR_STATE_PAUSED"
    CRASHED = "ACTOR_STATE_CRASHED"
    DELETING = "ACTOR_STATE_DELETING"
    REVERTING = "ACTOR_STATE_REVERTING"


class SnapshotFidelity(enum.StrEnum):
    UNSPECIFIED = "SNAPSHOT_FIDELITY_UNSPECIFIED"
    VOLUMES = "SNAPSHOT_FIDELITY_VOLUMES"
    ROOTFS = "SNAPSHOT_FIDELITY_ROOTFS"
    MEMORY = "SNAPSHOT_FIDELITY_MEMORY"


class SnapshotStatus(enum.StrEnum):
    UNSPECIFIED = "SNAPSHOT_STORAGE_STATUS_UNSPECIFIED"
    IN_PROGRESS = "SNAPSHOT_STORAGE_STATUS_IN_PROGRESS"
    COMPLETED = "SNAPSHOT_STORAGE_STATUS_COMPLETED"


@dataclass(frozen=True)
class Snapshot:
    generation: int
    fidelity: SnapshotFidelity
    status: SnapshotStatus
    uri: str  # object-storage URI; meaningful only when status is COMPLETED
    created_at: datetime
    # what the snapshot takes in storage, in bytes, when the runtime can say (None: unknown, e.g.
    # ateapi, whose Snapshot has no size); counted into the Session's usage (domain/snapshots.py)
    size_bytes: int | None = None


@dataclass(frozen=True)
class Actor:
    atespace: str
    name: str
    uid: str
    template: str  # "<atespace>/<template name>"
    state: ActorState
    worker: str | None  # the worker it holds while RUNNING, else None
    worker_ip: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    snapshots: tuple[Snapshot, ...] = ()  # the generations the runtime keeps (the newest among them), ascending
    crash_message: str | None = None  # CRASHED: why (a process runtime: exit status and stderr tail)
    crash_exit_status: int | None = None  # CRASHED: the process's exit status (negative: killed by that signal)


@dataclass(frozen=True)
class ActorTemplate:
    atespace: str
    name: str
    uid: str
    image: str
    version: int
    created_at: datetime
    # what the Actor's container runs (ateapi Container.command/args/env): argv is command then args
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class EgressRule:
    """One allow rule: protocol is "http", "https" or "tls_passthrough"."""

    protocol: str
    hostname: str
    port: int
    # excluded from the hash (a dict is unhashable) but not from equality
    credential_headers: dict[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class EgressPolicy:
    """The single policy named ``default`` of an Actor; rules are an unordered allow-set."""

    actor_uid: str
    rules: frozenset[EgressRule] | tuple[EgressRule, ...]
    version: int


@dataclass(frozen=True)
class Tag:
    """actor_uid: the source Actor's UID ("" when the runtime does not say: a real Substrate);
    template_uid: the template the snapshot was taken under ("" when unknown); status: the tag's
    snapshot copy (usable only when COMPLETED)."""

    atespace: str
    name: str
    actor_name: str
    actor_uid: str
    snapshot_generation: int
    snapshot_uri: str
    created_at: datetime
    template_uid: str = ""
    status: SnapshotStatus = SnapshotStatus.COMPLETED


@dataclass(frozen=True)
class Worker:
    name: str
    atespace: str
    ip: str
    actor: str | None  # "<atespace>/<actor name>" while held
    state: str


# What an invoke carries to the Actor besides the message, as keys of the A2A SendMessageRequest's
# metadata: the Session (the task store's session_id) and the dispatch reservation (its dispatch_id).
INVOKE_SESSION_KEY = "sessionq.dev/session-id"
INVOKE_DISPATCH_KEY = "sessionq.dev/dispatch-id"
# ... and, as an HTTP header of the A2A call (never in the message or its metadata, never logged), the
# Actor's workload credential for the task store (sessionq.domain.workload): a real Substrate has no
# per-Actor environment to hand it over at creation, so the gateway brings it with every call
WORKLOAD_TOKEN_HEADER = "x-sessionq-workload-token"
# the environment variable runtimes with a per-Actor environment (the simulator, the process
# runtime) also set at creation
WORKLOAD_TOKEN_ENV = "SESSIONQ_WORKLOAD_TOKEN"
# gRPC metadata of a task store UpdateTask to a final or waiting state ("1"): the write also settles
# the task at the version it makes, in the same transaction (UpdateTask and SettleTask in one); the
# agent kit sends it with the update that ends a turn. The answer's trailer SETTLED_TRAILER ("1")
# says it did: without it (a task store that does not know the header) the kit sends SettleTask
SETTLE_HEADER = "x-sessionq-settle"
SETTLED_TRAILER = "x-sessionq-settled"


@dataclass(frozen=True)
class InvokeRequest:
    """One message delivered to an Actor's private A2A endpoint (port 80).

    message: the A2A Message in protobuf JSON form (camelCase, as json_format.MessageToDict
    gives); task_id: the task a continuation continues (None for a new turn); dispatch_id: the
    dispatch reservation the Actor passes back to the task store with its writes; credential: the
    Session's workload credential, sent to the Actor with the call (WORKLOAD_TOKEN_HEADER) and never
    shown (not in the repr)."""

    session_id: str
    dispatch_id: str
    message: dict[str, Any]
    task_id: str | None = None
    credential: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_page_token: str  # empty: last page


class RuntimeReader(Protocol):
    """The read-only port of the runtime: the listings the inventory pages over. The API depends
    on this, never on a runtime implementation."""

    async def list_actors(self, atespace: str | None, page_size: int, page_token: str) -> Page[Actor]: ...
    async def list_workers(self, page_size: int, page_token: str) -> Page[Worker]: ...
    async def list_tags(self, atespace: str | None, page_size: int, page_token: str) -> Page[Tag]:
        """Tags in one atespace (None: every atespace), by name; the page token as list_actors'."""
        ...


class Substrate(RuntimeReader, Protocol):
    """The runtime (its listings are those of `RuntimeReader`). Methods that mutate an existing
    Actor take the UID the caller recorded and fail with FAILED_PRECONDITION when the Actor of
    that name has another UID (a same-name replacement is never adopted, clause Q-11)."""

    # actor templates (one per prepared revision)
    async def create_actor_template(
        self,
        atespace: str,
        name: str,
        image: str,
        *,
        command: list[str] | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> ActorTemplate:
        """Create a template whose container runs `image` (with `command`, `args` and `env`
        when given: argv is command then args). ALREADY_EXISTS if one of that name exists."""
        ...
    async def get_actor_template(self, atespace: str, name: str) -> ActorTemplate: ...
    async def delete_actor_template(self, atespace: str, name: str, uid: str) -> None: ...

    # actors
    async def create_actor(
        self,
        atespace: str,
        name: str,
        template: str,
        *,
        from_tag: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Actor:
        """Create an Actor, SUSPENDED, from a template ("<atespace>/<name>") or seeded from the
        snapshot a tag names. ALREADY_EXISTS if an Actor of that name exists."""
        ...

    async def get_actor(self, atespace: str, name: str) -> Actor: ...
    async def suspend_actor(
        self, atespace: str, name: str, uid: str, fidelity: SnapshotFidelity = SnapshotFidelity.VOLUMES
    ) -> Actor:
        """Stop the Actor, release its worker and write a snapshot of the given fidelity."""
        ...

    async def resume_actor(self, atespace: str, name: str, uid: str) -> tuple[Actor, bool]:
        """Resume onto a worker; returns (actor, resumed) with resumed=False if already running.
        DATA_LOSS: the Actor's snapshot could not be restored; the message (`RESTORE_FAILED`: why)
        names no path or secret of the runtime's, and is shown to the Session's users."""
        ...

    async def pause_actor(self, atespace: str, name: str, uid: str) -> Actor: ...
    async def delete_actor(self, atespace: str, name: str, uid: str, *, any_state: bool = False) -> None:
        """Delete a SUSPENDED or CRASHED Actor (any state with any_state)."""
        ...

    # egress policy (one named "default" per Actor)
    async def create_egress_policy(
        self, atespace: str, actor: str, uid: str, rules: list[EgressRule]
    ) -> EgressPolicy: ...
    async def get_egress_policy(self, atespace: str, actor: str) -> EgressPolicy: ...
    async def update_egress_policy(
        self, atespace: str, actor: str, uid: str, rules: list[EgressRule]
    ) -> EgressPolicy: ...

    # tags
    async def create_tag(self, atespace: str, name: str, actor: str, uid: str) -> Tag:
        """Copy the suspended Actor's current snapshot under a tag; the tagged snapshot is never collected."""
        ...

    async def get_tag(self, atespace: str, name: str) -> Tag: ...
    async def delete_tag(self, atespace: str, name: str) -> None: ...

    # the Actor's private A2A endpoint: run one turn and return when it ended
    async def invoke(self, atespace: str, name: str, uid: str, request: InvokeRequest) -> None:
        """Deliver a message to a RUNNING Actor (FAILED_PRECONDITION otherwise) and wait for the
        turn: the Actor reports the task through the TaskStore API with its workload credential
        (`request.credential`, sent with the call; runtimes with a per-Actor environment also set
        SESSIONQ_WORKLOAD_TOKEN at creation) and settles it before this returns."""
        ...

    async def cancel_turn(
        self, atespace: str, name: str, uid: str, session_id: str, task_id: str, *, credential: str | None = None
    ) -> None:
        """Ask the Actor to stop working on a task (A2A CancelTask): the Actor ends the turn without
        further task writes. Idempotent; a turn that already ended (or an Actor that is not running)
        is not an error. NOT_FOUND when the Actor does not exist, FAILED_PRECONDITION for another UID.
        `credential`: the Session's workload credential, sent with the call as with `invoke` (an
        Actor that never had a turn in its process reads the task with it)."""
        ...
