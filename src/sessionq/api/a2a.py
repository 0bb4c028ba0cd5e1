"""lf.a2a.v1.A2AService for users: one behaviour behind gRPC, JSON-RPC and HTTP+JSON.

`A2AHandler` implements every A2A operation (the a2a-sdk's `RequestHandler` interface) on the
store; the bindings only say who calls and for which Agent (the tenant "<namespace>/<agent>"):
`A2AService` here is the gRPC servicer (the handlers' input guard and validation, `@rpc` error
mapping), and api/agentcard.py mounts the SDK's own JSON-RPC and HTTP+JSON routes on the same handler.

SendMessage only admits: without a context or task ID it starts a new conversation (a new Session
of an existing Agent), otherwise it continues one; it records the turn with a dispatch reservation
(sessionq.admit_turn) and, unless `return_immediately`, waits - woken by NOTIFY, within the
deadline - until the task reaches a final or input-required state. With `return_immediately` it
answers as soon as the Actor created the task. Streams (SendStreamingMessage, SubscribeToTask) read
the task's stored event history and follow it on NOTIFY, so any replica can serve them, a late or
reconnecting subscriber misses nothing and a disconnect costs nothing. An idle stream costs no
queries: it waits on its Session's notifications (the process's one LISTEN connection, fanned out
by key), re-reads after that connection reconnects and otherwise only every
`a2a.stream.fallbackPoll`; a user holds at most `a2a.stream.maxPerUser` streams open per process.
CancelTask records a durable intent (sessionq.admit_cancel) carried out by the cancel_task job. A
missing, expired or another user's context or task gives the same TaskNotFound answer (NOT_FOUND,
ErrorInfo TASK_NOT_FOUND of the A2A domain, which the SDK's clients raise as TaskNotFoundError).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

import grpc
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import empty_pb2, json_format

from sessionq import errors, metrics
from sessionq.api.auth import Authenticator, Identity
from sessionq.api.fields import has_control
from sessionq.api.paging import decode_token, encode_token
from sessionq.api.rpc import rpc, rpc_stream, wait_budget
from sessionq.api.sessions import await_generation
from sessionq.api.taskstore import STATE_NAMES, task_from_json
from sessionq.config import MIB
from sessionq.db.notify import Channel
from sessionq.db.store import Store
from sessionq.domain import push
from sessionq.domain.agents import check_name, check_namespace
from sessionq.errors import SessionqError
from sessionq.models import BusyPolicy, Session, TaskPhase

log = logging.getLogger("sessionq.api")

TASK_NOT_FOUND = "TaskNotFound: no such task or context"
# states that end a turn (a stream closes after one)
BOUNDARY_STATES = frozenset({
    a2a_pb2.TASK_STATE_COMPLETED, a2a_pb2.TASK_STATE_FAILED, a2a_pb2.TASK_STATE_CANCELED, a2a_pb2.TASK_STATE_REJECTED,
    a2a_pb2.TASK_STATE_INPUT_REQUIRED, a2a_pb2.TASK_STATE_AUTH_REQUIRED,
})
TERMINAL_STATES = frozenset({
    a2a_pb2.TASK_STATE_COMPLETED, a2a_pb2.TASK_STATE_FAILED, a2a_pb2.TASK_STATE_CANCELED, a2a_pb2.TASK_STATE_REJECTED,
})
DEFAULT_PAGE = 50
# how often a call's waiter re-reads without a notification (a fallback: NOTIFY wakes it at once),
# and a stream's while no LISTEN connection wakes it (none, or it is reconnecting)
POLL = 1.0
DEFAULT_FALLBACK_POLL = 30.0  # a2a.stream.fallbackPoll
DEFAULT_STREAMS_PER_USER = 100  # a2a.stream.maxPerUser
DEFAULT_MAX_QUEUED_TURNS = 100  # sessions.maxQueuedTurns
BUSY_POLICY_KEY = "busyPolicy"  # the message metadata key that chooses the busy policy
IDENTITY = "sessionq.identity"  # ServerCallContext.state key: the caller's Identity
TENANT = "sessionq.tenant"  # ServerCallContext.state key: the Agent of an HTTP binding's path
BUDGET = "sessionq.budget"  # ServerCallContext.state key: how long the call may wait (seconds)


def parse_tenant(tenant: str) -> tuple[str, str]:
    ns, sep, name = tenant.partition("/")
    if not sep:
        raise errors.invalid("tenant must be <namespace>/<agent>")
    return check_namespace(ns, "tenant namespace"), check_name(name, "tenant agent")


def creation_request_id(message_id: str) -> str:
    """The request id of the Session a new conversation creates: the message id names it (a resend of
    the message joins the same creation); one too long for a request id is named by its hash."""
    if not message_id:
        return f"a2a:{uuid.uuid4()}"
    if len(message_id) > 124:
        return f"a2a:sha256:{hashlib.sha256(message_id.encode()).hexdigest()}"
    return f"a2a:{message_id}"


def busy_policy(message: a2a_pb2.Message) -> BusyPolicy | None:
    """The busy policy a message asks for (its metadata key busyPolicy), None when it names none;
    an unknown name is INVALID_ARGUMENT, before anything is written."""
    value = message.metadata.fields.get(BUSY_POLICY_KEY) if message.HasField("metadata") else None
    if value is None:
        return None
    name = value.string_value if value.WhichOneof("kind") == "string_value" else ""
    try:
        return BusyPolicy(name)
    except ValueError:
        raise errors.SessionqError(
            "SQ400",
            f"message.metadata.{BUSY_POLICY_KEY} must be one of {', '.join(p.value for p in BusyPolicy)}",
            "INVALID_PARAMS",
        ) from None


def task_not_found(message: str = TASK_NOT_FOUND) -> SessionqError:
    return SessionqError("SQ404", message, "TASK_NOT_FOUND")


def stream_response(kind: str, payload: dict[str, Any]) -> a2a_pb2.StreamResponse:
    """A stored event as an A2A StreamResponse (kind task: a Task; event: a StreamResponse)."""
    if kind == "task":
        return a2a_pb2.StreamResponse(task=task_from_json(payload))
    return json_format.ParseDict(payload, a2a_pb2.StreamResponse(), ignore_unknown_fields=True)


def ends_turn(response: a2a_pb2.StreamResponse) -> bool:
    which = response.WhichOneof("payload")
    if which == "task":
        return response.task.status.state in BOUNDARY_STATES
    if which == "status_update":
        return response.status_update.status.state in BOUNDARY_STATES
    return which == "message"


class StreamSlots:
    """How many A2A streams each user holds open in this process, at most `cap` (0: no limit).

    The count is per process (each API process and replica counts its own): a global count would
    cost a write at every open and close and a cleanup after every crash."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: dict[str, int] = {}

    @contextlib.contextmanager
    def hold(self, user: str) -> Iterator[None]:
        """One place for the user while the block runs (a stream's generator: until it ends, is
        closed or is cancelled by a vanished client); SQ429 when the user holds `cap` already."""
        held = self.open.get(user, 0)
        if self.cap and held >= self.cap:
            metrics.A2A_STREAMS_REFUSED.inc()
            raise SessionqError(
                "SQ429",
                f"too many open streams: at most {self.cap} per user at once here; close one or retry later",
                "TOO_MANY_STREAMS",
            )
        self.open[user] = held + 1
        metrics.A2A_STREAMS.inc()
        try:
            yield
        finally:
            metrics.A2A_STREAMS.dec()
            left = self.open[user] - 1
            if left:
                self.open[user] = left
            else:
                del self.open[user]


def _ts(value: Any) -> datetime | None:
    return value.ToDatetime(tzinfo=datetime.now().astimezone().tzinfo) if value.seconds or value.nanos else None


class _Deadline:
    """What `await_generation` reads of a gRPC context (its remaining time), for the HTTP bindings."""

    def __init__(self, budget: float) -> None:
        self.until = time.monotonic() + budget

    def time_remaining(self) -> float:
        return max(0.0, self.until - time.monotonic())


class A2AHandler(RequestHandler):
    """Every A2A operation, for any binding. The binding puts the caller's Identity in
    `context.state[IDENTITY]`, how long the call may wait in `context.state[BUDGET]` and the
    tenant in `context.tenant` (or the request's tenant field)."""

    def __init__(
        self,
        store: Store,
        auth: Authenticator,
        dispatch_ttl: float = 600.0,
        max_message_bytes: int = MIB,
        allow_private_push: bool = False,
        card: Callable[[str, str, bool], Any] | None = None,
        fallback_poll: float = DEFAULT_FALLBACK_POLL,
        streams_per_user: int = DEFAULT_STREAMS_PER_USER,
        max_queued_turns: int = DEFAULT_MAX_QUEUED_TURNS,
    ) -> None:
        self.store = store
        self.auth = auth
        self.dispatch_ttl = dispatch_ttl
        self.max_message_bytes = max_message_bytes
        self.allow_private_push = allow_private_push
        self.card = card  # (namespace, agent, extended) -> awaitable AgentCard
        self.fallback_poll = fallback_poll
        self.streams = StreamSlots(streams_per_user)
        self.max_queued_turns = max_queued_turns

    # -- the call's who, what and how long ---------------------------------------------------------

    def _who(self, context: ServerCallContext) -> Identity:
        who = context.state.get(IDENTITY)
        if not isinstance(who, Identity):
            raise errors.unauthenticated("an authorization bearer token is required")
        return who

    def _tenant(self, context: ServerCallContext, request: Any) -> tuple[str, str]:
        """The Agent the call is for: the HTTP path's (TENANT in the state), else the request's tenant."""
        tenant = str(context.state.get(TENANT) or context.tenant or getattr(request, "tenant", ""))
        return parse_tenant(tenant)

    def _caller(self, context: ServerCallContext, request: Any) -> tuple[Identity, tuple[str, str]]:
        who = self._who(context)
        tenant = self._tenant(context, request)
        self.auth.check_namespace(who, tenant[0])  # an authorization failure is PERMISSION_DENIED
        return who, tenant

    @staticmethod
    def _budget(context: ServerCallContext) -> float:
        return float(context.state.get(BUDGET, 30.0))

    @contextlib.asynccontextmanager
    async def _wakeups(self, session_id: UUID) -> AsyncIterator[asyncio.Event]:
        """An event set whenever a task of the Session changes (NOTIFY sessionq_task, keyed by the
        Session: the listener calls only this Session's waiters), and after the LISTEN connection
        was lost or re-established (a notification may have been missed: re-read)."""
        woke = asyncio.Event()

        def on_notify(_payload: str | None) -> None:
            woke.set()

        listener = self.store.listener
        unsubscribe = listener.subscribe_key(Channel.TASK, str(session_id), on_notify) if listener else None
        try:
            yield woke
        finally:
            if unsubscribe:
                unsubscribe()

    async def _stream_sleep(self, woke: asyncio.Event) -> None:
        """A stream's wait for a wake-up: at most the long `fallback_poll` while the LISTEN connection
        is up (jittered, so that streams woken together by a reconnect do not re-read together
        again), POLL while there is none. (The waits of a call, bounded by its deadline, poll at
        POLL.)"""
        listener = self.store.listener
        if listener is not None and listener.connected:
            timeout = self.fallback_poll * random.uniform(0.8, 1.0)
        else:
            timeout = POLL
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woke.wait(), timeout=timeout)

    async def _visible_session(self, who: Identity, session_id: UUID, tenant: tuple[str, str]) -> Session:
        try:
            session = await self.store.get_session(session_id, who.user, who.share_hash)
        except SessionqError as e:
            if e.sqlstate == "SQ404":
                raise task_not_found() from None
            raise
        if (session.agent_namespace, session.agent_name) != tenant:
            raise task_not_found()
        return session

    # -- sending ------------------------------------------------------------------------------------

    async def _admit(
        self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext
    ) -> tuple[Session, UUID | None, str | None]:
        """Check and admit the message as a turn: (the Session, the dispatch id, the continued task),
        or, when it was queued behind the running turn, (the Session, None, its queued task)."""
        who, tenant = self._caller(context, params)
        msg = params.message
        policy = busy_policy(msg)
        if not msg.parts:
            raise errors.SessionqError("SQ400", "message.parts must not be empty", "INVALID_PARAMS")
        size = msg.ByteSize()
        if size > self.max_message_bytes:  # before anything is written, a new conversation's Session included
            raise errors.SessionqError(
                "SQ400",
                f"message is {size} bytes; the largest message this server accepts is {self.max_message_bytes} bytes",
                "INVALID_PARAMS",
            )
        if msg.message_id and has_control(msg.message_id):
            raise errors.SessionqError("SQ400", "message.message_id must not contain control characters", "INVALID_PARAMS")
        config = params.configuration
        if config.HasField("task_push_notification_config"):
            await push.check_target(config.task_push_notification_config.url, self.allow_private_push)
        if config.HasField("history_length") and config.history_length < 0:
            raise errors.SessionqError("SQ400", "configuration.history_length must not be negative", "INVALID_PARAMS")
        task_id: str | None = None
        if msg.task_id:
            try:
                task = await self.store.a2a_task(msg.task_id, who.user, who.share_hash, tenant, "read")
            except SessionqError as e:
                if e.sqlstate == "SQ404":
                    raise task_not_found() from None
                raise
            if msg.context_id and msg.context_id != str(task.session_id):
                raise task_not_found()
            session = await self._visible_session(who, task.session_id, tenant)
            task_id = task.id
        elif msg.context_id:
            try:
                sid = UUID(msg.context_id)
            except ValueError:
                raise task_not_found() from None
            session = await self._visible_session(who, sid, tenant)
        else:
            # a new conversation: a new Session of an existing, authorized Agent
            request_id = creation_request_id(msg.message_id)
            admission = await self.store.admit_create(who.user, request_id, tenant[0], tenant[1], "")
            session = await await_generation(
                self.store, admission, context.state.get("grpc_context") or _Deadline(self._budget(context))
            )
        body = json_format.MessageToDict(msg)
        body["contextId"] = str(session.id)
        body.setdefault("messageId", str(uuid.uuid4()))
        body.setdefault("role", "ROLE_USER")
        turn = await self.store.send_turn(
            session.id, who.user, who.share_hash, body, task_id, self.dispatch_ttl, policy, self.max_queued_turns
        )
        admitted = turn.session
        if turn.queued_task_id is not None:
            metrics.TURNS_QUEUED.inc()
            return admitted, None, turn.queued_task_id
        assert admitted.dispatch_id is not None
        return admitted, admitted.dispatch_id, task_id

    async def _task_of_dispatch(self, session_id: UUID, dispatch_id: UUID, budget: float) -> a2a_pb2.Task | None:
        """The task of a dispatch once the Actor created it (None: not within the budget); raises
        UNAVAILABLE when the dispatch failed before."""
        deadline = time.monotonic() + budget
        async with self._wakeups(session_id) as woke:
            while True:
                woke.clear()
                task = await self.store.task_of_dispatch(session_id, dispatch_id)
                if task is not None:
                    return task_from_json(task.task)
                session = await self.store.session_by_id(session_id)
                failure = (session.dispatch_failure if session else None) or {}
                if session is None or failure.get("dispatch_id") == str(dispatch_id):
                    reason = failure.get("message") or "the session no longer exists"
                    raise errors.unavailable(f"the agent could not run the turn ({errors.clip(reason, 200)}); send the message again")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), timeout=min(remaining, POLL))

    async def _attach_push(self, who: Identity, task_id: str, params: a2a_pb2.SendMessageRequest) -> None:
        config = params.configuration
        if config.HasField("task_push_notification_config"):
            c = a2a_pb2.TaskPushNotificationConfig()
            c.CopyFrom(config.task_push_notification_config)
            c.task_id = task_id
            await self._create_push(who, c)

    async def _wait_queued(self, session_id: UUID, task_id: str, budget: float) -> a2a_pb2.Task:
        """A queued turn's task once its turn ended (settled, or abandoned: it never ran), else as it
        stands when the budget is spent (SUBMITTED while it waits, WORKING while it runs)."""
        deadline = time.monotonic() + budget
        async with self._wakeups(session_id) as woke:
            while True:
                woke.clear()
                task = await self.store.get_task(task_id)
                if task is None:
                    raise task_not_found()
                remaining = deadline - time.monotonic()
                if task.phase in (TaskPhase.SETTLED, TaskPhase.ABANDONED) or remaining <= 0:
                    return task_from_json(task.task)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), timeout=min(remaining, POLL))

    async def on_message_send(self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext) -> a2a_pb2.Task:
        session, dispatch_id, continued = await self._admit(params, context)
        who = self._who(context)
        deadline = time.monotonic() + self._budget(context)
        config = params.configuration
        history = config.history_length if config.HasField("history_length") else None
        if dispatch_id is None:  # queued behind the running turn: its task is SUBMITTED
            assert continued is not None
            await self._attach_push(who, continued, params)
            budget = 0.0 if config.return_immediately else max(0.0, deadline - time.monotonic())
            queued = await self._wait_queued(session.id, continued, budget)
            return task_from_json(json_format.MessageToDict(queued), history)
        if config.return_immediately or config.HasField("task_push_notification_config"):
            created = await self._task_of_dispatch(session.id, dispatch_id, deadline - time.monotonic())
            if created is None:
                raise errors.unavailable("the turn has not started yet; retry later")
            await self._attach_push(who, created.id, params)
            if config.return_immediately:
                return task_from_json(json_format.MessageToDict(created), history)
        remaining = max(0.0, deadline - time.monotonic())
        outcome, value = await self.store.wait_for_turn(session.id, dispatch_id, remaining)
        if outcome == "task":
            return task_from_json(value.task, history)
        if outcome == "failed":  # the reason is a user-facing one (turns.py); details are in the worker's log
            raise errors.unavailable(f"the agent could not run the turn ({errors.clip(value, 200)}); send the message again")
        running = await self.store.task_of_dispatch(session.id, dispatch_id)
        if running is not None:  # still working: answer with the task as it stands
            return task_from_json(running.task, history)
        raise errors.unavailable("the turn has not started yet; retry later")

    async def on_message_send_stream(
        self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[a2a_pb2.StreamResponse]:
        # the stream's place first: a refused stream admits no turn
        with self.streams.hold(self._who(context).user):
            async with contextlib.aclosing(self._send_stream(params, context)) as stream:
                async for item in stream:
                    yield item

    async def _send_stream(
        self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[a2a_pb2.StreamResponse]:
        session, dispatch_id, continued = await self._admit(params, context)
        who = self._who(context)
        if dispatch_id is None:  # queued: the task's whole history, from its SUBMITTED start
            assert continued is not None
            await self._attach_push(who, continued, params)
            async with contextlib.aclosing(self._follow(session.id, continued, 0)) as events:
                async for item in events:
                    yield item
            return
        created = await self._task_of_dispatch(session.id, dispatch_id, self._budget(context))
        if created is None:
            raise errors.unavailable("the turn has not started yet; subscribe to the task later")
        await self._attach_push(who, created.id, params)
        # a new task's stream is its whole history (it starts with the task's creation); a
        # continuation's starts with the task as it stands now, then what follows
        after = 0
        if continued:
            snapshot = await self.store.a2a_task_snapshot(created.id)
            if snapshot is None:
                raise task_not_found()
            first = a2a_pb2.StreamResponse(task=task_from_json(snapshot["task"]))
            yield first
            if ends_turn(first):
                return
            after = int(snapshot["last_seq"])
        async with contextlib.aclosing(self._follow(session.id, created.id, after)) as events:
            async for item in events:
                yield item

    async def _follow(self, session_id: UUID, task_id: str, after: int) -> AsyncGenerator[a2a_pb2.StreamResponse]:
        """The task's events after sequence `after`, from the stored history and then as they are
        stored (NOTIFY), until one ends the turn."""
        async with self._wakeups(session_id) as woke:
            while True:
                woke.clear()
                for row in await self.store.a2a_task_events(session_id, task_id, after):
                    after = row["seq"]
                    response = stream_response(row["kind"], row["payload"])
                    yield response
                    if ends_turn(response):
                        return
                await self._stream_sleep(woke)

    async def on_subscribe_to_task(
        self, params: a2a_pb2.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[a2a_pb2.StreamResponse]:
        who, tenant = self._caller(context, params)
        if not params.id:
            raise errors.SessionqError("SQ400", "id is required", "INVALID_PARAMS")
        with self.streams.hold(who.user):
            async with contextlib.aclosing(self._subscribe(who, tenant, params)) as stream:
                async for item in stream:
                    yield item

    async def _subscribe(
        self, who: Identity, tenant: tuple[str, str], params: a2a_pb2.SubscribeToTaskRequest
    ) -> AsyncGenerator[a2a_pb2.StreamResponse]:
        task = await self.store.a2a_task(params.id, who.user, who.share_hash, tenant, "read")
        snapshot = await self.store.a2a_task_snapshot(task.id)
        if snapshot is None:
            raise task_not_found()
        current = task_from_json(snapshot["task"])
        if current.status.state in TERMINAL_STATES:
            raise errors.SessionqError(
                "SQ412", f"task {errors.clip(task.id)} is {a2a_pb2.TaskState.Name(current.status.state)}; "
                "there is nothing to subscribe to (GetTask reads it)", "UNSUPPORTED_OPERATION"
            )
        yield a2a_pb2.StreamResponse(task=current)
        if snapshot["phase"] == TaskPhase.SETTLED and current.status.state in BOUNDARY_STATES:
            return  # waiting for input: the turn ended
        async with contextlib.aclosing(self._follow(task.session_id, task.id, int(snapshot["last_seq"]))) as events:
            async for item in events:
                yield item

    # -- reading ------------------------------------------------------------------------------------

    async def on_get_task(self, params: a2a_pb2.GetTaskRequest, context: ServerCallContext) -> a2a_pb2.Task:
        who, tenant = self._caller(context, params)
        if not params.id:
            raise errors.SessionqError("SQ400", "id is required", "INVALID_PARAMS")
        history = params.history_length if params.HasField("history_length") else None
        if history is not None and history < 0:
            raise errors.SessionqError("SQ400", "history_length must not be negative", "INVALID_PARAMS")
        task = await self.store.a2a_task(params.id, who.user, who.share_hash, tenant, "read")
        return task_from_json(task.task, history)

    async def on_list_tasks(
        self, params: a2a_pb2.ListTasksRequest, context: ServerCallContext
    ) -> a2a_pb2.ListTasksResponse:
        who, tenant = self._caller(context, params)
        size = params.page_size if params.HasField("page_size") else DEFAULT_PAGE
        if not 1 <= size <= 100:
            raise errors.SessionqError("SQ400", "page_size must be between 1 and 100", "INVALID_PARAMS")
        history = params.history_length if params.HasField("history_length") else None
        if history is not None and history < 0:
            raise errors.SessionqError("SQ400", "history_length must not be negative", "INVALID_PARAMS")
        context_id: UUID | None = None
        if params.context_id:
            try:
                context_id = UUID(params.context_id)
            except ValueError:
                return a2a_pb2.ListTasksResponse(page_size=size)  # no such context: nothing visible
        state = STATE_NAMES.get(params.status) if params.status else None
        before: tuple[datetime, str] | None = None
        if params.page_token:
            at, tid = decode_token(params.page_token, 2)
            try:
                before = (datetime.fromisoformat(at), tid)
            except ValueError:
                raise errors.SessionqError("SQ400", "page_token is not valid", "INVALID_PARAMS") from None
        after_ts = _ts(params.status_timestamp_after) if params.HasField("status_timestamp_after") else None
        rows, keys, total = await self.store.a2a_list_tasks(
            who.user, who.share_hash, tenant[0], tenant[1], context_id, state, after_ts, before, size + 1
        )
        tasks = []
        for data in rows[:size]:
            task = task_from_json(data, history)
            if params.HasField("include_artifacts") and not params.include_artifacts:
                del task.artifacts[:]
            tasks.append(task)
        token = encode_token(keys[size - 1][0].isoformat(), keys[size - 1][1]) if len(rows) > size else ""
        return a2a_pb2.ListTasksResponse(tasks=tasks, next_page_token=token, page_size=size, total_size=total)

    # -- cancel -------------------------------------------------------------------------------------

    async def on_cancel_task(self, params: a2a_pb2.CancelTaskRequest, context: ServerCallContext) -> a2a_pb2.Task:
        who, tenant = self._caller(context, params)
        if not params.id:
            raise errors.SessionqError("SQ400", "id is required", "INVALID_PARAMS")
        task = await self.store.a2a_task(params.id, who.user, who.share_hash, tenant, "read")
        await self.store.admit_cancel(task.id, who.user, who.share_hash)
        deadline = time.monotonic() + self._budget(context)
        async with self._wakeups(task.session_id) as woke:
            while True:
                woke.clear()
                current = await self.store.get_task(task.id)
                assert current is not None
                published = task_from_json(current.task)
                remaining = deadline - time.monotonic()
                if published.status.state in TERMINAL_STATES or remaining <= 0:
                    return published
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), timeout=min(remaining, POLL))

    # -- push notification configs ------------------------------------------------------------------

    @staticmethod
    def _config(row: dict[str, Any]) -> a2a_pb2.TaskPushNotificationConfig:
        """A stored config as A2A answers it, to its creator only (the store reads no one else's):
        the token and the credentials are write-only, so only the URL and the scheme come back."""
        config = a2a_pb2.TaskPushNotificationConfig(id=row["id"], task_id=row["task_id"], url=row["url"])
        if row.get("auth_scheme"):
            config.authentication.scheme = row["auth_scheme"]
        return config

    async def _create_push(self, who: Identity, params: a2a_pb2.TaskPushNotificationConfig) -> a2a_pb2.TaskPushNotificationConfig:
        if not params.task_id:
            raise errors.SessionqError("SQ400", "task_id is required", "INVALID_PARAMS")
        config_id = params.id or str(uuid.uuid4())
        if len(config_id) > 128 or has_control(config_id):
            raise errors.SessionqError("SQ400", "id must be 1-128 characters without control characters", "INVALID_PARAMS")
        await push.check_target(params.url, self.allow_private_push)
        auth = params.authentication if params.HasField("authentication") else None
        if auth is not None and (has_control(auth.scheme) or has_control(auth.credentials) or " " in auth.scheme):
            raise errors.SessionqError("SQ400", "authentication.scheme and credentials must be header-safe", "INVALID_PARAMS")
        row = await self.store.create_push_config(
            params.task_id, who.user, who.share_hash, config_id, params.url, params.token or None,
            auth.scheme if auth and auth.scheme else None, auth.credentials if auth and auth.credentials else None,
        )
        return self._config(row)

    async def on_create_task_push_notification_config(
        self, params: a2a_pb2.TaskPushNotificationConfig, context: ServerCallContext
    ) -> a2a_pb2.TaskPushNotificationConfig:
        who, tenant = self._caller(context, params)
        if params.task_id:
            await self.store.a2a_task(params.task_id, who.user, who.share_hash, tenant, "read")
        return await self._create_push(who, params)

    async def on_get_task_push_notification_config(
        self, params: a2a_pb2.GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> a2a_pb2.TaskPushNotificationConfig:
        who, tenant = self._caller(context, params)
        if not params.task_id or not params.id:
            raise errors.SessionqError("SQ400", "task_id and id are required", "INVALID_PARAMS")
        await self.store.a2a_task(params.task_id, who.user, who.share_hash, tenant, "read")
        rows = await self.store.list_push_configs(params.task_id, who.user, who.share_hash, params.id)
        if not rows:
            raise task_not_found(f"task {errors.clip(params.task_id)} has no push notification config {errors.clip(params.id)}")
        return self._config(rows[0])

    async def on_list_task_push_notification_configs(
        self, params: a2a_pb2.ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> a2a_pb2.ListTaskPushNotificationConfigsResponse:
        who, tenant = self._caller(context, params)
        if not params.task_id:
            raise errors.SessionqError("SQ400", "task_id is required", "INVALID_PARAMS")
        await self.store.a2a_task(params.task_id, who.user, who.share_hash, tenant, "read")
        size = params.page_size or 100
        if not 1 <= size <= 100:
            raise errors.SessionqError("SQ400", "page_size must be between 1 and 100", "INVALID_PARAMS")
        start = 0
        if params.page_token:
            raw = decode_token(params.page_token, 1)[0]
            if not raw.isdigit() or len(raw) > 9:
                raise errors.SessionqError("SQ400", "page_token is not valid", "INVALID_PARAMS")
            start = int(raw)
        rows = await self.store.list_push_configs(params.task_id, who.user, who.share_hash)
        page = rows[start : start + size]
        token = encode_token(str(start + size)) if len(rows) > start + size else ""
        return a2a_pb2.ListTaskPushNotificationConfigsResponse(
            configs=[self._config(r) for r in page], next_page_token=token
        )

    async def on_delete_task_push_notification_config(
        self, params: a2a_pb2.DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        who, tenant = self._caller(context, params)
        if not params.task_id or not params.id:
            raise errors.SessionqError("SQ400", "task_id and id are required", "INVALID_PARAMS")
        await self.store.a2a_task(params.task_id, who.user, who.share_hash, tenant, "read")
        if not await self.store.delete_push_config(params.task_id, who.user, who.share_hash, params.id):
            raise task_not_found(f"task {errors.clip(params.task_id)} has no push notification config {errors.clip(params.id)}")

    # -- the extended card --------------------------------------------------------------------------

    async def on_get_extended_agent_card(
        self, params: a2a_pb2.GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> a2a_pb2.AgentCard:
        who, tenant = self._caller(context, params)
        if self.auth.anonymous_user and who.user == self.auth.anonymous_user:
            raise errors.unauthenticated("the extended agent card is for authenticated callers (send a bearer token)")
        if self.card is None:
            raise errors.SessionqError("SQ412", "no extended agent card here", "EXTENDED_AGENT_CARD_NOT_CONFIGURED")
        card: a2a_pb2.AgentCard = await self.card(tenant[0], tenant[1], True)
        return card


# -- the gRPC binding ---------------------------------------------------------------------------------

class A2AService(a2a_pb2_grpc.A2AServiceServicer):
    """The gRPC binding of `A2AHandler`: the caller from the metadata, the tenant from the request,
    the wait from the deadline."""

    def __init__(self, handler: A2AHandler) -> None:
        self.handler = handler

    def _context(self, request: Any, context: grpc.aio.ServicerContext) -> ServerCallContext:
        who = self.handler.auth.identify(context)
        return ServerCallContext(
            tenant=getattr(request, "tenant", ""),
            state={IDENTITY: who, BUDGET: wait_budget(context), "grpc_context": context},
        )

    @rpc
    async def SendMessage(
        self, request: a2a_pb2.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> a2a_pb2.SendMessageResponse:
        task = await self.handler.on_message_send(request, self._context(request, context))
        return a2a_pb2.SendMessageResponse(task=task)

    @rpc_stream
    async def SendStreamingMessage(
        self, request: a2a_pb2.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[a2a_pb2.StreamResponse]:
        async for item in self.handler.on_message_send_stream(request, self._context(request, context)):
            yield item

    @rpc_stream
    async def SubscribeToTask(
        self, request: a2a_pb2.SubscribeToTaskRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[a2a_pb2.StreamResponse]:
        async for item in self.handler.on_subscribe_to_task(request, self._context(request, context)):
            yield item

    @rpc
    async def GetTask(self, request: a2a_pb2.GetTaskRequest, context: grpc.aio.ServicerContext) -> a2a_pb2.Task:
        return await self.handler.on_get_task(request, self._context(request, context))

    @rpc
    async def ListTasks(
        self, request: a2a_pb2.ListTasksRequest, context: grpc.aio.ServicerContext
    ) -> a2a_pb2.ListTasksResponse:
        return await self.handler.on_list_tasks(request, self._context(request, context))

    @rpc
    async def CancelTask(self, request: a2a_pb2.CancelTaskRequest, context: grpc.aio.ServicerContext) -> a2a_pb2.Task:
        return await self.handler.on_cancel_task(request, self._context(request, context))

    @rpc
    async def CreateTaskPushNotificationConfig(
        self, request: a2a_pb2.TaskPushNotificationConfig, context: grpc.aio.ServicerContext
    ) -> a2a_pb2.TaskPushNotificationConfig:
        return await self.handler.on_create_task_push_notification_config(request, self._context(request, context))

    @rpc
    async def GetTaskPushNotificationConfig(
        self, request: a2a_pb2.GetTaskPushNotificationConfigRequest, context: grpc.aio.ServicerContext
    ) -> a2a_pb2.TaskPushNotificationConfig:
        return await self.handler.on_get_task_push_notification_config(request, self._context(request, context))

    @rpc
    async def ListTaskPushNotificationConfigs(
        self, request: a2a_pb2.ListTaskPushNotificationConfigsRequest, context: grpc.aio.ServicerContext
    ) -> a2a_pb2.ListTaskPushNotificationConfigsResponse:
        return await self.handler.on_list_task_push_notification_configs(request, self._context(request, context))

    @rpc
    async def DeleteTaskPushNotificationConfig(
        self, request: a2a_pb2.DeleteTaskPushNotificationConfigRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        await self.handler.on_delete_task_push_notification_config(request, self._context(request, context))
        return empty_pb2.Empty()

    @rpc
    async def GetExtendedAgentCard(
        self, request: a2a_pb2.GetExtendedAgentCardRequest, context: grpc.aio.ServicerContext
    ) -> a2a_pb2.AgentCard:
        return await self.handler.on_get_extended_agent_card(request, self._context(request, context))
