"""lf.a2a.v1.A2AService: SendMessage and GetTask for users (tenant = "<namespace>/<agent>").

SendMessage only admits: without a context or task ID it starts a new conversation (a new
Session of an existing Agent), otherwise it continues one; it records the turn with a dispatch
reservation (sessionq.admit_turn) and waits - woken by NOTIFY, within the deadline - until the
task reaches a final or input-required state. A missing, expired or another user's context or
task gives the same TaskNotFound answer (NOT_FOUND).
"""

from __future__ import annotations

import hashlib
import uuid
from uuid import UUID

import grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format

from sessionq import errors
from sessionq.api.common import Authenticator, Identity, has_control, rpc, wait_budget
from sessionq.api.sessions import await_generation
from sessionq.api.taskstore import task_from_json
from sessionq.config import MIB
from sessionq.db.store import Store
from sessionq.domain.agents import check_name, check_namespace
from sessionq.errors import SessionqError
from sessionq.models import Session

TASK_NOT_FOUND = "TaskNotFound: no such task or context"


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


def task_not_found() -> SessionqError:
    return SessionqError("SQ404", TASK_NOT_FOUND, "TASK_NOT_FOUND")


class A2AService(a2a_pb2_grpc.A2AServiceServicer):
    def __init__(
        self, store: Store, auth: Authenticator, dispatch_ttl: float = 600.0, max_message_bytes: int = MIB
    ) -> None:
        self.store = store
        self.auth = auth
        self.dispatch_ttl = dispatch_ttl
        self.max_message_bytes = max_message_bytes

    async def _visible(self, who: Identity, session_id: UUID, tenant: tuple[str, str]) -> Session:
        try:
            session = await self.store.get_session(session_id, who.user, who.share_hash)
        except SessionqError as e:
            if e.sqlstate == "SQ404":
                raise task_not_found() from None
            raise
        if (session.agent_namespace, session.agent_name) != tenant:
            raise task_not_found()
        return session

    @rpc
    async def SendMessage(
        self, request: a2a_pb2.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> a2a_pb2.SendMessageResponse:
        who = self.auth.identify(context)
        tenant = parse_tenant(request.tenant)
        self.auth.check_namespace(who, tenant[0])  # an authorization failure is PERMISSION_DENIED
        msg = request.message
        if not msg.parts:
            raise errors.invalid("message.parts must not be empty")
        size = msg.ByteSize()
        if size > self.max_message_bytes:  # before anything is written, a new conversation's Session included
            raise errors.invalid(
                f"message is {size} bytes; the largest message this server accepts is {self.max_message_bytes} bytes"
            )
        if msg.message_id and has_control(msg.message_id):
            raise errors.invalid("message.message_id must not contain control characters")
        task_id: str | None = None
        if msg.task_id:
            task = await self.store.get_task(msg.task_id)
            if task is None:
                raise task_not_found()
            if msg.context_id and msg.context_id != str(task.session_id):
                raise task_not_found()
            session = await self._visible(who, task.session_id, tenant)
            task_id = task.id
        elif msg.context_id:
            try:
                sid = UUID(msg.context_id)
            except ValueError:
                raise task_not_found() from None
            session = await self._visible(who, sid, tenant)
        else:
            # a new conversation: a new Session of an existing, authorized Agent
            request_id = creation_request_id(msg.message_id)
            admission = await self.store.admit_create(who.user, request_id, tenant[0], tenant[1], "")
            session = await await_generation(self.store, admission, context)
        body = json_format.MessageToDict(msg)
        body["contextId"] = str(session.id)
        body.setdefault("messageId", str(uuid.uuid4()))
        body.setdefault("role", "ROLE_USER")
        admitted = await self.store.admit_turn(session.id, who.user, who.share_hash, body, task_id, self.dispatch_ttl)
        assert admitted.dispatch_id is not None
        outcome, value = await self.store.wait_for_turn(session.id, admitted.dispatch_id, wait_budget(context))
        if outcome == "task":
            return a2a_pb2.SendMessageResponse(task=task_from_json(value.task))
        if outcome == "failed":  # the reason is a user-facing one (turns.py); details are in the worker's log
            raise errors.unavailable(f"the agent could not run the turn ({errors.clip(value, 200)}); send the message again")
        running = await self.store.task_of_dispatch(session.id, admitted.dispatch_id)
        if running is not None:  # still working: answer with the task as it stands
            return a2a_pb2.SendMessageResponse(task=task_from_json(running.task))
        raise errors.unavailable("the turn has not started yet; retry later")

    @rpc
    async def GetTask(self, request: a2a_pb2.GetTaskRequest, context: grpc.aio.ServicerContext) -> a2a_pb2.Task:
        who = self.auth.identify(context)
        tenant = parse_tenant(request.tenant)
        if not request.id:
            raise errors.invalid("id is required")
        task = await self.store.get_task(request.id)
        if task is None:
            raise task_not_found()
        await self._visible(who, task.session_id, tenant)
        history = request.history_length if request.HasField("history_length") else None
        if history is not None and history < 0:
            raise errors.invalid("history_length must not be negative")
        return task_from_json(task.task, history)
