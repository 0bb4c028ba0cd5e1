"""kagent.api.v1alpha1.TaskStoreService: the runtime's private API.

Callers authenticate as the Session's Actor with the workload credential the runtime was given
when the Actor was created (sessionq.domain.workload); a user's token is refused. Every rule (versions,
staging, settlement, admission under the Session row lock) lives in the stored procedures of
schema/30_tasks.sql. An UpdateTask to a final or waiting state sent with the metadata
`x-sessionq-settle: 1` (SETTLE_HEADER) also settles the task at the version it makes, in the same
transaction (sessionq.task_finish), and says so in the trailer `x-sessionq-settled: 1`: the agent
kit ends a turn with one write instead of two.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import grpc
from a2a.types import a2a_pb2
from google.protobuf import json_format

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import task_store_pb2, task_store_pb2_grpc
from sessionq.api.auth import credential_headers
from sessionq.api.fields import parse_uuid
from sessionq.api.paging import decode_token, encode_token
from sessionq.api.rpc import rpc
from sessionq.db.store import Store
from sessionq.domain import workload
from sessionq.models import Task
from sessionq.runtime.base import SETTLE_HEADER, SETTLED_TRAILER

STATE_NAMES = {v: k for k, v in a2a_pb2.TaskState.items()}


def to_json(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=False)


def task_from_json(data: dict[str, Any], history_length: int | None = None) -> a2a_pb2.Task:
    task = json_format.ParseDict(data, a2a_pb2.Task(), ignore_unknown_fields=True)
    if history_length is not None and history_length >= 0 and len(task.history) > history_length:
        keep = list(task.history)[len(task.history) - history_length :] if history_length else []
        del task.history[:]
        task.history.extend(keep)
    return task


class TaskStoreService(task_store_pb2_grpc.TaskStoreServiceServicer):
    def __init__(self, store: Store) -> None:
        self.store = store
        self._secret: str | None = None

    async def _session(self, context: grpc.aio.ServicerContext, session_id: str) -> UUID:
        return (await self._caller(context, session_id))[0]

    async def _caller(self, context: grpc.aio.ServicerContext, session_id: str) -> tuple[UUID, dict[str, str]]:
        """The Session whose workload credential the call carries, and the call's metadata."""
        sid = parse_uuid(session_id, "session_id")
        md = credential_headers(context.invocation_metadata() or ())
        scheme, _, token = md.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise errors.unauthenticated("the task store needs the Actor's workload credential")
        if self._secret is None:
            self._secret = await self.store.secret("workload")
        holder = workload.verify(self._secret, token.strip())
        if holder is None:
            raise errors.unauthenticated("the task store accepts only an Actor's workload credential")
        if holder != sid:
            raise errors.permission_denied(f"this workload credential is not for session {sid}")
        return sid, md

    async def _task(self, sid: UUID, task_id: str) -> Task:
        task = await self.store.get_task(task_id) if task_id else None
        if task is None or task.session_id != sid:
            raise errors.not_found(f"task {errors.clip(task_id)} not found")
        return task

    @staticmethod
    def _dispatch(value: str | None, present: bool) -> UUID | None:
        return parse_uuid(value or "", "dispatch_id") if present else None

    @rpc
    async def CreateTask(
        self, request: task_store_pb2.TaskStoreServiceCreateTaskRequest, context: grpc.aio.ServicerContext
    ) -> task_store_pb2.TaskStoreServiceCreateTaskResponse:
        sid = await self._session(context, request.session_id)
        # task and its ids are required by the request's rules; the length bound is sessionq's own
        # (task ids are stored keys), which the protos do not express
        if len(request.task.id) > 128:
            raise errors.invalid("task.id must be at most 128 characters")
        dispatch = self._dispatch(request.dispatch_id, request.HasField("dispatch_id"))
        version = await self.store.task_create(sid, request.task.id, to_json(request.task), dispatch)
        return task_store_pb2.TaskStoreServiceCreateTaskResponse(version=version)

    @rpc
    async def GetTask(
        self, request: task_store_pb2.TaskStoreServiceGetTaskRequest, context: grpc.aio.ServicerContext
    ) -> task_store_pb2.TaskStoreServiceGetTaskResponse:
        sid = await self._session(context, request.session_id)
        task = await self._task(sid, request.task_id)
        current = task.staged_task or task.task  # the Actor sees its own latest write
        return task_store_pb2.TaskStoreServiceGetTaskResponse(
            stored=task_store_pb2.StoredTask(task=task_from_json(current), version=task.version)
        )

    @rpc
    async def UpdateTask(
        self, request: task_store_pb2.TaskStoreServiceUpdateTaskRequest, context: grpc.aio.ServicerContext
    ) -> task_store_pb2.TaskStoreServiceUpdateTaskResponse:
        sid, md = await self._caller(context, request.session_id)  # expected_version > 0, task ids: the rules
        dispatch = self._dispatch(request.dispatch_id, request.HasField("dispatch_id"))
        event = to_json(request.event) if request.HasField("event") else None
        settle = md.get(SETTLE_HEADER)
        if settle is not None and settle != "1":
            raise errors.invalid(f"{SETTLE_HEADER} must be 1 when sent")
        # with the settle header: the turn's final update, settled at the version it makes (one
        # transaction), which the answer's trailer confirms
        write = self.store.task_finish if settle else self.store.task_update
        version = await write(sid, request.task.id, to_json(request.task), request.expected_version, event, dispatch)
        if settle:
            context.set_trailing_metadata(((SETTLED_TRAILER, "1"),))
        return task_store_pb2.TaskStoreServiceUpdateTaskResponse(version=version)

    @rpc
    async def ListTasks(
        self, request: task_store_pb2.TaskStoreServiceListTasksRequest, context: grpc.aio.ServicerContext
    ) -> task_store_pb2.TaskStoreServiceListTasksResponse:
        sid = await self._session(context, request.session_id)
        result = await list_tasks(self.store, sid, request.request)
        return task_store_pb2.TaskStoreServiceListTasksResponse(result=result)

    @rpc
    async def SettleTask(
        self, request: task_store_pb2.TaskStoreServiceSettleTaskRequest, context: grpc.aio.ServicerContext
    ) -> task_store_pb2.TaskStoreServiceSettleTaskResponse:
        sid = await self._session(context, request.session_id)  # version > 0, task_id set: the rules
        await self._task(sid, request.task_id)
        await self.store.task_settle(sid, request.task_id, request.version)
        return task_store_pb2.TaskStoreServiceSettleTaskResponse()


async def list_tasks(store: Store, sid: UUID, req: a2a_pb2.ListTasksRequest) -> a2a_pb2.ListTasksResponse:
    """A2A ListTasks over one Session: newest first, page_size 1..100 (default 50)."""
    size = req.page_size if req.HasField("page_size") else 50
    if not 1 <= size <= 100:
        raise errors.invalid("page_size must be between 1 and 100")
    if req.context_id and req.context_id != str(sid):
        raise errors.invalid("context_id must be the session's own")
    state = STATE_NAMES.get(req.status) if req.status else None
    after = None
    if req.page_token:
        raw = decode_token(req.page_token, 1)[0]
        if not raw.isdigit() or len(raw) > 9:
            raise errors.invalid("page_token is not valid")
        after = int(raw)
    rows = await store.list_tasks(sid, state, after, size + 1)
    history = req.history_length if req.HasField("history_length") else None
    tasks = []
    for t in rows[:size]:
        task = task_from_json(t.task, history)
        if req.HasField("include_artifacts") and not req.include_artifacts:
            del task.artifacts[:]
        tasks.append(task)
    token = encode_token(str(rows[size - 1].seq)) if len(rows) > size else ""
    return a2a_pb2.ListTasksResponse(
        tasks=tasks, next_page_token=token, page_size=size, total_size=await store.count_tasks(sid, state)
    )
