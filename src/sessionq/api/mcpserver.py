"""MCP on the public port, at ``/mcp``: the streamable HTTP transport of the official `mcp` SDK
(its server side; a stateless mode with server.mcpStateless, as kagent's KAGENT_MCP_STATELESS).

Every request is authenticated before the SDK sees it, as the rest of the port: a bearer token
means the same user as over gRPC; none (without auth.anonymousUser) or an unknown one is 401 with
a short message. Each tool is one call of the API's own method handler in this process
(api/inprocess.py, as gRPC-Web's calls are) with the request's credentials as its metadata: the
same authorization, the same errors; an error is a tool result with ``isError`` and the status and
its short message, never a protocol error. While tracing is on the call's metadata also
carries the request's W3C trace context (``traceparent``, ``tracestate``), so its server span, and
the work it starts, join the MCP client's trace.

Tools, kagent's (server name ``kagent-agents``): ``list_agents`` (the Agents with a prepared
revision in the namespaces the caller may use: ``{"agents": [{"ref", "description"}]}``) and
``invoke_agent(agent, task, context_id)`` (an A2A SendMessage to that Agent, on the conversation
``context_id`` or a new one: ``{"agent", "text", "context_id"}``; each event of the turn is a
progress notification, and a cancelled request cancels the turn as A2A CancelTask does). Beyond kagent, the Session
lifecycle: ``list_sessions``, ``get_session``, ``suspend_session``, ``resume_session``,
``delete_session``, ``checkpoint_session``, ``fork_checkpoint``.

The resource ``kagent://agents`` (application/json) is the same list as ``list_agents``; its
subscribers get ``notifications/resources/updated`` when an Agent is applied, changed or deleted
through any replica, on a ``subscriptions/listen`` stream (protocol 2026-07-28, the SDK's
``Client.listen``) or, for clients of earlier versions, after ``resources/subscribe`` (kagent's way): the change travels as a NOTIFY on sessionq_agent (10_agents.sql), which each
API process's LISTEN connection hears (in stateless mode there is no stream to send it on). Their input schemas (typed
arguments, no others) refuse bad arguments before anything is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import Any

import grpc
from a2a.types import a2a_pb2
from google.protobuf import json_format
from google.protobuf.message import Message
from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from starlette.types import Receive, Scope, Send

from sessionq import errors, telemetry
from sessionq._pb.kagent.api.v1alpha1 import checkpoints_pb2, common_pb2, sessions_pb2
from sessionq.api.auth import SHARE_TOKEN_HEADER, Authenticator, credential_headers
from sessionq.api.inprocess import CallFailed, DirectContext, Handlers, call_unary, loop_time
from sessionq.db.notify import Channel
from sessionq.db.store import Store
from sessionq.errors import SessionqError

PATH = "/mcp"
AGENTS_URI = "kagent://agents"
SERVER_NAME = "kagent-agents"
AGENTS_PAGE = 100
log = logging.getLogger("sessionq.api")
INVOKE_TIMEOUT = 600.0  # seconds an invoke_agent waits for its turn
CALL_TIMEOUT = 60.0  # seconds any other tool's call may take
SESSIONS = "/kagent.api.v1alpha1.SessionService/"
CHECKPOINTS = "/kagent.api.v1alpha1.CheckpointService/"
SEND_STREAMING = "/lf.a2a.v1.A2AService/SendStreamingMessage"
CANCEL_TASK = "/lf.a2a.v1.A2AService/CancelTask"
METHODS = (SEND_STREAMING, CANCEL_TASK, *(SESSIONS + m for m in (
    "ListSessions", "GetSession", "SuspendSession", "ResumeSession", "DeleteSession")),
    CHECKPOINTS + "CreateCheckpoint", CHECKPOINTS + "ForkSession")


def _ref(agent: str) -> tuple[str, str]:
    namespace, _, name = agent.partition("/")
    if not namespace or not name or "/" in name:
        raise ToolError("agent must be in format 'namespace/name'")
    return namespace, name


def _tool_error(e: CallFailed) -> ToolError:
    return ToolError(f"{e.code.name}: {errors.clip(e.details or '', errors.MAX_STATUS_MESSAGE)}")


def _answer_text(task: a2a_pb2.Task) -> str:
    """The answer of a turn: its artifacts' text, else its status message's."""
    parts = [p for artifact in task.artifacts for p in artifact.parts] or list(task.status.message.parts)
    return "\n".join(p.text for p in parts if p.text)


class McpApp:
    """The MCP endpoint of the public port: `handlers` is the API server's table of method handlers
    (each tool calls one in this process)."""

    def __init__(self, store: Store, auth: Authenticator, handlers: Handlers, *, stateless: bool,
                 max_body: int) -> None:
        self.store = store
        self.auth = auth
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}
        for method in METHODS:
            handler = handlers.handler(method)
            if handler is None:
                raise RuntimeError(f"the API serves no {method}")
            self.handlers[method] = handler
        # the current way to hear of changes (protocol 2026-07-28: `subscriptions/listen`, whose
        # stream the SDK's ListenHandler serves from this bus); `resources/subscribe`, which that
        # version removed, is still answered for clients of earlier versions (kagent's own)
        self.bus = InMemorySubscriptionBus()
        self.server = MCPServer(SERVER_NAME, instructions="The Agents of this sessionq, their Sessions and turns.",
                                subscriptions=self.bus)
        self.subscribers: set[Any] = set()  # the (earlier protocol) MCP sessions subscribed to kagent://agents
        self._pending: set[asyncio.Task[None]] = set()
        self._unlisten: Any = None
        self._tools()
        self._resources()
        self.manager = StreamableHTTPSessionManager(self.server._lowlevel_server, stateless=stateless,
                                                    max_request_body_size=max_body)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        started = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await self._stop.wait()

        if self.store.listener is not None:
            self._unlisten = self.store.listener.subscribe(Channel.AGENT, self._agents_changed)
        self._task = asyncio.create_task(run(), name="mcp")
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self._task.done():
            self._task.result()

    async def stop(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 5)

    # -- HTTP ------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        try:
            self.auth.identify_headers(credential_headers(headers))
        except SessionqError as e:
            status = {"SQ401": 401, "SQ403": 403}.get(e.sqlstate, 400)
            body = json.dumps({"error": errors.clip(e.message, errors.MAX_STATUS_MESSAGE)}).encode()
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                    *([(b"www-authenticate", b"Bearer")] if status == 401 else [])]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.manager.handle_request(scope, receive, send)

    # -- calls -----------------------------------------------------------------------------------

    @staticmethod
    def _credentials(ctx: Any) -> list[tuple[str, str]]:
        """The credentials of the HTTP request that carried this MCP request (a tool's Context or
        a low-level request context)."""
        request = getattr(ctx, "request_context", ctx).request
        headers = getattr(request, "headers", None) or {}
        return [(k, headers[k]) for k in ("authorization", SHARE_TOKEN_HEADER) if k in headers]

    @staticmethod
    def _context(ctx: Any, credentials: list[tuple[str, str]], timeout: float) -> DirectContext:
        """The servicer context of one handler call for the MCP request `ctx`: its credentials (and,
        while tracing is on, its trace context) as the call's metadata, `timeout` its deadline, the
        HTTP client its peer."""
        request = getattr(ctx, "request_context", ctx).request
        client = getattr(request, "client", None)  # a Starlette Request's
        peer = f"ipv4:{client.host}:{client.port}" if client is not None else ""
        metadata = list(credentials)
        if telemetry.tracing():
            headers = getattr(request, "headers", None) or {}
            metadata.extend((k, headers[k]) for k in ("traceparent", "tracestate") if k in headers)
        return DirectContext(tuple(metadata), timeout, peer)

    async def agents(self, credentials: list[tuple[str, str]]) -> list[dict[str, str]]:
        """The Agents with a prepared revision in the namespaces the caller may use."""
        try:
            who = self.auth.identify_headers(credential_headers(credentials))
        except SessionqError as e:
            raise ToolError(errors.clip(e.message, errors.MAX_STATUS_MESSAGE)) from None
        agents: list[dict[str, str]] = []
        after: tuple[str, str] | None = None
        while True:
            page = await self.store.list_agents(None, after, AGENTS_PAGE)
            for a in page:
                if a.latest_successful_revision_id is None or not self.auth.may_use_namespace(who, a.namespace):
                    continue
                entry = {"ref": f"{a.namespace}/{a.name}"}
                description = str(a.spec.get("description") or "")
                if description:
                    entry["description"] = description
                agents.append(entry)
            if len(page) < AGENTS_PAGE:
                return agents
            after = (page[-1].namespace, page[-1].name)

    # -- the resource kagent://agents and its subscribers -----------------------------------------

    def _resources(self) -> None:
        low = self.server._lowlevel_server

        async def list_resources(ctx: Any, params: types.PaginatedRequestParams) -> types.ListResourcesResult:
            return types.ListResourcesResult(resources=[types.Resource(
                uri=AGENTS_URI, name="agents", description="The Agents you may invoke (as list_agents).",
                mime_type="application/json")])

        async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
            if str(params.uri) != AGENTS_URI:
                raise MCPError(code=types.INVALID_PARAMS, message=f"no resource {str(params.uri)[:200]}")
            try:
                agents = await self.agents(self._credentials(ctx))
            except ToolError as e:
                raise MCPError(code=types.INVALID_REQUEST, message=str(e)) from None
            return types.ReadResourceResult(contents=[types.TextResourceContents(
                uri=AGENTS_URI, mime_type="application/json", text=json.dumps({"agents": agents}))])

        async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
            if str(params.uri) != AGENTS_URI:
                raise MCPError(code=types.INVALID_PARAMS, message=f"no resource {str(params.uri)[:200]}")
            self.subscribers.add(ctx.session)
            return types.EmptyResult()

        async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
            self.subscribers.discard(ctx.session)
            return types.EmptyResult()

        low.add_request_handler("resources/list", types.PaginatedRequestParams, list_resources)
        low.add_request_handler("resources/read", types.ReadResourceRequestParams, read_resource)
        low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
        low.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)

    def _agents_changed(self, payload: str | None) -> None:
        """A NOTIFY on sessionq_agent (an Agent applied, changed or deleted through any replica;
        None: the LISTEN connection came back and changes may have been missed)."""
        self._pending.add(asyncio.get_running_loop().create_task(self._tell_subscribers()))

    async def _tell_subscribers(self) -> None:
        with contextlib.suppress(Exception):  # the listen streams (those that asked for kagent://agents)
            await self.bus.publish(ResourceUpdated(uri=AGENTS_URI))
        for session in list(self.subscribers):
            try:
                await session.send_resource_updated(AGENTS_URI)
            except Exception:  # a session that has gone: forget it
                self.subscribers.discard(session)
        self._pending.discard(asyncio.current_task())

    async def _call(self, ctx: Context, method: str, request: Message, timeout: float = CALL_TIMEOUT,
                    credentials: list[tuple[str, str]] | None = None) -> Any:
        """The answer of `method`'s handler, called in this process with the MCP request's credentials."""
        context = self._context(ctx, self._credentials(ctx) if credentials is None else credentials, timeout)
        try:
            return await call_unary(method, self.handlers[method], request, context)
        except CallFailed as e:
            raise _tool_error(e) from None
        finally:
            context._finish()

    async def invoke(self, ctx: Context, agent: str, text: str, context_id: str) -> dict[str, Any]:
        """One turn, as A2A SendStreamingMessage's handler called in this process: each event of
        the turn is a progress notification (when the client asked for them); a cancelled MCP
        request becomes the A2A CancelTask of the turn (the cancel intent every binding has) before
        it ends."""
        namespace, name = _ref(agent)
        tenant = f"{namespace}/{name}"
        message = a2a_pb2.Message(message_id=str(uuid.uuid4()), role=a2a_pb2.ROLE_USER, context_id=context_id,
                                  parts=[a2a_pb2.Part(text=text)])
        credentials = self._credentials(ctx)
        context = self._context(ctx, credentials, INVOKE_TIMEOUT)
        assert context._deadline is not None
        stream = self.handlers[SEND_STREAMING].unary_stream(
            a2a_pb2.SendMessageRequest(tenant=tenant, message=message), context)
        task = a2a_pb2.Task()
        try:
            async with asyncio.timeout_at(loop_time(context._deadline)):
                await self._events(ctx, stream, task)
        except grpc.aio.AbortError:
            raise _tool_error(CallFailed(context._code or grpc.StatusCode.UNKNOWN, context._details)) from None
        except TimeoutError:
            raise ToolError("DEADLINE_EXCEEDED: Deadline Exceeded") from None
        except Exception as e:  # as grpcio answers a handler that raised
            log.exception("unexpected error in %s", SEND_STREAMING)
            raise ToolError(f"UNKNOWN: Unexpected {type(e).__name__}") from None
        except asyncio.CancelledError:
            context._cancelled = True  # (the stream was closed by _events)
            if task.id:
                with contextlib.suppress(ToolError, asyncio.CancelledError):
                    await asyncio.shield(self._call(ctx, CANCEL_TASK, a2a_pb2.CancelTaskRequest(tenant=tenant, id=task.id),
                                                    timeout=30, credentials=credentials))
            raise
        finally:
            context._finish()
        code = context._code or grpc.StatusCode.OK
        if code != grpc.StatusCode.OK:  # a handler that set its status and ended
            raise _tool_error(CallFailed(code, context._details))
        if task.status.state in (a2a_pb2.TASK_STATE_FAILED, a2a_pb2.TASK_STATE_REJECTED,
                                 a2a_pb2.TASK_STATE_CANCELED):
            raise ToolError(f"the turn ended {a2a_pb2.TaskState.Name(task.status.state).removeprefix('TASK_STATE_')}:"
                            f" {errors.clip(_answer_text(task), 200)}")
        return {"agent": tenant, "text": _answer_text(task), "context_id": task.context_id}

    @staticmethod
    async def _events(ctx: Context, stream: Any, task: a2a_pb2.Task) -> None:
        """The turn's events into `task`, each a progress notification."""
        events = 0
        try:
            async for event in stream:
                events += 1
                state = ""
                if event.HasField("task"):
                    task.CopyFrom(event.task)
                    state = a2a_pb2.TaskState.Name(task.status.state)
                elif event.HasField("status_update"):
                    task.id, task.context_id = event.status_update.task_id, event.status_update.context_id
                    task.status.CopyFrom(event.status_update.status)
                    state = a2a_pb2.TaskState.Name(task.status.state)
                elif event.HasField("artifact_update"):
                    task.artifacts.append(event.artifact_update.artifact)
                elif event.HasField("message"):
                    task.context_id = event.message.context_id
                    task.status.message.CopyFrom(event.message)
                    task.status.state = a2a_pb2.TASK_STATE_COMPLETED
                await ctx.report_progress(events, None, state.removeprefix("TASK_STATE_").lower() or None)
        finally:
            with contextlib.suppress(BaseException):
                await stream.aclose()

    def _tools(self) -> None:
        server = self.server
        sessions, checkpoints = SESSIONS, CHECKPOINTS

        def session_dict(s: sessions_pb2.Session) -> dict[str, Any]:
            return json_format.MessageToDict(s, preserving_proto_field_name=True)

        @server.tool(description="List the Agents you may invoke (namespace/name and description).")
        async def list_agents(ctx: Context) -> dict[str, Any]:
            return {"agents": await self.agents(self._credentials(ctx))}

        @server.tool(description="Send a task to an Agent (namespace/name); continue a conversation with the"
                                 " context_id a previous answer gave. Returns the Agent's answer and the context_id.")
        async def invoke_agent(ctx: Context, agent: str, task: str, context_id: str = "") -> dict[str, Any]:
            return await self.invoke(ctx, agent, task, context_id)

        @server.tool(description="List your Sessions (optionally of one Agent, namespace/name).")
        async def list_sessions(ctx: Context, agent: str = "", limit: int = 50, page_token: str = "") -> dict[str, Any]:
            request = sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=limit, page_token=page_token))
            if agent:
                namespace, name = _ref(agent)
                request.agent.CopyFrom(common_pb2.ResourceReference(namespace=namespace, name=name))
            answer = await self._call(ctx, sessions + "ListSessions", request)
            return {"sessions": [session_dict(s) for s in answer.sessions],
                    "next_page_token": answer.page.next_page_token}

        async def lifecycle(ctx: Context, rpc: str, request: Message) -> dict[str, Any]:
            got = await self._call(ctx, sessions + rpc, request)
            return {"session": session_dict(got.session)}

        @server.tool(description="Get one of your Sessions.")
        async def get_session(ctx: Context, session_id: str) -> dict[str, Any]:
            return await lifecycle(ctx, "GetSession", sessions_pb2.GetSessionRequest(session_id=session_id))

        @server.tool(description="Suspend a Session (its Actor stops; its state is kept).")
        async def suspend_session(ctx: Context, session_id: str) -> dict[str, Any]:
            return await lifecycle(ctx, "SuspendSession", sessions_pb2.SuspendSessionRequest(session_id=session_id))

        @server.tool(description="Resume a suspended Session.")
        async def resume_session(ctx: Context, session_id: str) -> dict[str, Any]:
            return await lifecycle(ctx, "ResumeSession", sessions_pb2.ResumeSessionRequest(session_id=session_id))

        @server.tool(description="Delete a Session.")
        async def delete_session(ctx: Context, session_id: str) -> dict[str, Any]:
            return await lifecycle(ctx, "DeleteSession", sessions_pb2.DeleteSessionRequest(session_id=session_id))

        @server.tool(description="Checkpoint a Session at its current turn (expected_head_task_id: refuse if the"
                                 " conversation has moved past that task).")
        async def checkpoint_session(ctx: Context, session_id: str, expected_head_task_id: str = "") -> dict[str, Any]:
            got = await self._call(ctx, checkpoints + "CreateCheckpoint", checkpoints_pb2.CreateCheckpointRequest(
                session_id=session_id, request_id=str(uuid.uuid4()), expected_head_task_id=expected_head_task_id))
            return {"checkpoint": json_format.MessageToDict(got.checkpoint, preserving_proto_field_name=True)}

        @server.tool(description="Fork a new Session from a checkpoint.")
        async def fork_checkpoint(ctx: Context, checkpoint_id: str) -> dict[str, Any]:
            got = await self._call(ctx, checkpoints + "ForkSession", checkpoints_pb2.ForkSessionRequest(
                checkpoint_id=checkpoint_id, request_id=str(uuid.uuid4())))
            return {"session": session_dict(got.session)}
