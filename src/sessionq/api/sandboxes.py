"""kagent.api.v1alpha1.SandboxService: standalone sandboxes on the Sessions' machinery.

A Sandbox is a row of kind sandbox (schema/25_sandboxes.sql): CreateSandbox admits it with
sessionq.admit_sandbox; Suspend, Resume and Delete admit their operation with the Sessions'
admit_operation; the execute_operation job runs it with the same executor and claims; the expiry
sweep deletes it at expires_at by the same bounded workflow as an idle Session. The mutations wait
(within the request deadline) for their generation, as SessionService's do; past the deadline they
answer UNAVAILABLE and the client repeats the same call (the intent stays).

Its template is an Agent: the Sandbox runs the actor template of the Agent's latest successful
revision (`prepared_revision`). Sandboxes take no turns and have no shares: a share token grants
nothing here, and another user's Sandbox answers NOT_FOUND like a missing one.

The buf.validate rules (template and request id required, name length, ttl 1s-24h, uuid ids, page
limit) are enforced by api/validation.py before any of this runs. What the protos cannot express
is checked here or in the procedures: control characters in a request id, the Agent's existence
and prepared revision, ownership.
"""

from __future__ import annotations

import grpc

from sessionq._pb.kagent.api.v1alpha1 import (
    common_pb2,
    runtime_pb2,
    sandboxes_pb2,
    sandboxes_pb2_grpc,
    sessions_pb2,
)
from sessionq.api.auth import Authenticator
from sessionq.api.fields import check_request_id, parse_uuid, ts
from sessionq.api.paging import after_id, next_id_token, page_limit
from sessionq.api.rpc import rpc
from sessionq.api.sessions import await_generation
from sessionq.db.store import Store
from sessionq.models import OperationKind, RowKind, Session

DEFAULT_TTL = 3600.0  # sandboxes.defaultTtl


def sandbox_to_proto(s: Session) -> sandboxes_pb2.Sandbox:
    msg = sandboxes_pb2.Sandbox(
        id=str(s.id),
        creator=s.creator,
        sandbox_template=common_pb2.ResourceReference(namespace=s.agent_namespace, name=s.agent_name),
        prepared_revision=str(s.revision_id) if s.revision_id else "",
        state=runtime_pb2.RuntimeState.Value(f"RUNTIME_STATE_{s.state}"),
        operation=runtime_pb2.RuntimeOperation.Value(f"RUNTIME_OPERATION_{s.operation}"),
        name=s.name,
        created_at=ts(s.created_at),
        updated_at=ts(s.updated_at),
        expires_at=ts(s.expires_at),
    )
    if s.failure_message:
        msg.failure.CopyFrom(sessions_pb2.Failure(reason=s.failure_reason or "", message=s.failure_message))
    return msg


class SandboxService(sandboxes_pb2_grpc.SandboxServiceServicer):
    def __init__(self, store: Store, auth: Authenticator, default_ttl: float = DEFAULT_TTL) -> None:
        self.store = store
        self.auth = auth
        self.default_ttl = default_ttl

    @rpc
    async def CreateSandbox(
        self, request: sandboxes_pb2.CreateSandboxRequest, context: grpc.aio.ServicerContext
    ) -> sandboxes_pb2.CreateSandboxResponse:
        who = self.auth.identify(context)
        check_request_id(request.request_id)  # control characters: sessionq's rule (the length is the proto's)
        ttl = request.ttl.seconds + request.ttl.nanos / 1e9 if request.HasField("ttl") else self.default_ttl
        template = request.sandbox_template
        admission = await self.store.admit_sandbox(
            who.user, request.request_id, template.namespace, template.name, request.name, ttl
        )
        sandbox = await await_generation(self.store, admission, context)
        return sandboxes_pb2.CreateSandboxResponse(sandbox=sandbox_to_proto(sandbox))

    @rpc
    async def GetSandbox(
        self, request: sandboxes_pb2.GetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> sandboxes_pb2.GetSandboxResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.sandbox_id, "sandbox_id")
        sandbox = await self.store.get_session(sid, who.user, None, RowKind.SANDBOX)
        return sandboxes_pb2.GetSandboxResponse(sandbox=sandbox_to_proto(sandbox))

    @rpc
    async def ListSandboxes(
        self, request: sandboxes_pb2.ListSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> sandboxes_pb2.ListSandboxesResponse:
        who = self.auth.identify(context)
        limit = page_limit(request.page.limit)
        after = after_id(request.page)
        namespace = template = None
        if request.HasField("sandbox_template"):  # a set template is a whole ResourceReference (its rules)
            namespace, template = request.sandbox_template.namespace, request.sandbox_template.name
        rows = await self.store.list_sessions(who.user, False, namespace, template, after, limit + 1, RowKind.SANDBOX)
        return sandboxes_pb2.ListSandboxesResponse(
            sandboxes=[sandbox_to_proto(s) for s in rows[:limit]],
            page=common_pb2.PageResponse(next_page_token=next_id_token(rows, limit)),
        )

    async def _lifecycle(
        self, sandbox_id: str, kind: OperationKind, context: grpc.aio.ServicerContext
    ) -> sandboxes_pb2.Sandbox:
        who = self.auth.identify(context)
        sid = parse_uuid(sandbox_id, "sandbox_id")
        admission = await self.store.admit_operation(sid, who.user, None, kind, of=RowKind.SANDBOX)
        return sandbox_to_proto(await await_generation(self.store, admission, context))

    @rpc
    async def SuspendSandbox(
        self, request: sandboxes_pb2.SuspendSandboxRequest, context: grpc.aio.ServicerContext
    ) -> sandboxes_pb2.SuspendSandboxResponse:
        sandbox = await self._lifecycle(request.sandbox_id, OperationKind.SUSPEND, context)
        return sandboxes_pb2.SuspendSandboxResponse(sandbox=sandbox)

    @rpc
    async def ResumeSandbox(
        self, request: sandboxes_pb2.ResumeSandboxRequest, context: grpc.aio.ServicerContext
    ) -> sandboxes_pb2.ResumeSandboxResponse:
        sandbox = await self._lifecycle(request.sandbox_id, OperationKind.RESUME, context)
        return sandboxes_pb2.ResumeSandboxResponse(sandbox=sandbox)

    @rpc
    async def DeleteSandbox(
        self, request: sandboxes_pb2.DeleteSandboxRequest, context: grpc.aio.ServicerContext
    ) -> sandboxes_pb2.DeleteSandboxResponse:
        sandbox = await self._lifecycle(request.sandbox_id, OperationKind.DELETE, context)
        return sandboxes_pb2.DeleteSandboxResponse(sandbox=sandbox)
