"""The A2A HTTP side of the public port (server.address, api/public.py): agent cards, JSON-RPC 2.0
(SSE for streams) and HTTP+JSON.

Paths (docs/a2a.md), per Agent ``/api/a2a/<namespace>/<agent>``:

- ``GET  .../.well-known/agent-card.json`` - the card: 404 for a missing Agent, 403 for an
  authorization failure, 401 for a missing or unknown token (clause A2A-4);
- ``POST .../jsonrpc`` - the JSON-RPC binding (the a2a-sdk's `JsonRpcDispatcher`);
- ``.../rest/...`` - the HTTP+JSON binding (the a2a-sdk's REST routes: ``message:send``,
  ``tasks/{id}``, ...).

The bindings are the SDK's own server components over the same `A2AHandler` as gRPC
(api/a2a.py); the Agent is the path's (the card's HTTP interfaces carry no tenant). Before a
binding runs, the caller is identified (401) and authorized for the namespace (403), as for the
card. sessionq's errors become the A2A errors of the SDK (`SdkErrors`), which each binding answers
in its own form (JSON-RPC codes -32001 TaskNotFound, ...; HTTP statuses with google.rpc.Status).

The app is served by uvicorn behind the one-port front (oneport.py); `start` serves it alone on an
address of its own (tests).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import psycopg
from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import JSONRPCError
from a2a.server.request_handlers import response_helpers
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes, create_rest_routes
from a2a.types import a2a_pb2
from a2a.utils import errors as sdk
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol
from google.protobuf import json_format
from google.protobuf.json_format import Error as JsonFormatError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sessionq import errors, telemetry, webserve
from sessionq.api.a2a import BUDGET, IDENTITY, TENANT, A2AHandler
from sessionq.api.auth import Authenticator, credential_headers
from sessionq.api.guard import RateLimitedLog, Rejection
from sessionq.api.storable import check_storable
from sessionq.db.store import Store
from sessionq.errors import SessionqError
from sessionq.models import Agent
from sessionq.webserve import AllowedHosts, BodyLimit, HostCheck, HttpServer, Limits, TracedHttp

log = logging.getLogger("sessionq.api")

PATH = re.compile(r"^/api/a2a/([a-z0-9-]+)/([a-z0-9.-]+)/\.well-known/agent-card\.json$")
AGENT_PREFIX = re.compile(r"^/api/a2a/([a-z0-9-]+)/([a-z0-9.-]+)/(jsonrpc|rest)(/.*)?$")
HTTP_CODES = {"SQ401": 401, "SQ403": 403, "SQ404": 404, "SQ400": 400}
HTTP_WAIT = 60.0  # how long a blocking HTTP call waits for its turn (then it answers the task as it stands)
DEFAULT_SKILL = a2a_pb2.AgentSkill(
    id="chat", name="Conversation", description="Send a message; the agent answers and keeps the conversation's context.",
    tags=["chat"], input_modes=["text/plain"], output_modes=["text/plain"],
)


def agent_card(agent: Agent, grpc_address: str, base_url: str, extended: bool = False) -> a2a_pb2.AgentCard:
    """The A2A card of an Agent: its three interfaces (URLs the a2a-sdk clients dial as they are),
    the protocol version, capabilities, skills (the spec's `skills`, else one default) and the
    bearer security scheme. The extended card adds the revision it runs."""
    ns, name = agent.namespace, agent.name
    root = f"{base_url.rstrip('/')}/api/a2a/{ns}/{name}"
    skills = []
    for i, raw in enumerate(agent.spec.get("skills") or []):
        if isinstance(raw, dict):
            skill = a2a_pb2.AgentSkill(
                id=str(raw.get("id") or f"skill-{i}"), name=str(raw.get("name") or raw.get("id") or f"skill {i}"),
                description=str(raw.get("description") or ""), tags=[str(t) for t in raw.get("tags") or []],
                examples=[str(e) for e in raw.get("examples") or []],
            )
            skills.append(skill)
    description = str(agent.spec.get("description") or f"sessionq agent {ns}/{name}")
    if extended:
        description += f" (revision {agent.desired_revision_id})"
    return a2a_pb2.AgentCard(
        name=name,
        description=description,
        version=str(agent.desired_revision_id),
        supported_interfaces=[
            a2a_pb2.AgentInterface(url=grpc_address, protocol_binding=TransportProtocol.GRPC.value,
                                   tenant=f"{ns}/{name}", protocol_version=PROTOCOL_VERSION_CURRENT),
            a2a_pb2.AgentInterface(url=f"{root}/jsonrpc", protocol_binding=TransportProtocol.JSONRPC.value,
                                   protocol_version=PROTOCOL_VERSION_CURRENT),
            a2a_pb2.AgentInterface(url=f"{root}/rest", protocol_binding=TransportProtocol.HTTP_JSON.value,
                                   protocol_version=PROTOCOL_VERSION_CURRENT),
        ],
        capabilities=a2a_pb2.AgentCapabilities(streaming=True, push_notifications=True, extended_agent_card=True),
        security_schemes={
            "bearer": a2a_pb2.SecurityScheme(
                http_auth_security_scheme=a2a_pb2.HTTPAuthSecurityScheme(scheme="Bearer",
                                                                         description="sessionq API token")
            )
        },
        security_requirements=[a2a_pb2.SecurityRequirement(schemes={"bearer": a2a_pb2.StringList()})],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=skills or [DEFAULT_SKILL],
    )


class TooManyStreamsError(sdk.A2AError):
    """A stream refused by a2a.stream.maxPerUser (SQ429): HTTP 429 RESOURCE_EXHAUSTED on HTTP+JSON and
    JSON-RPC error -32029 (an implementation-defined server error), as gRPC answers RESOURCE_EXHAUSTED.
    A2A defines no such error; the SDK's bindings answer an error by the entries of its class in the
    SDK's tables, so the class is entered in them once, here (tests/a2a/test_streams.py checks both
    bindings' answers, so an SDK that moves these tables fails there)."""

    message = "too many open streams"


TOO_MANY_STREAMS_JSONRPC = -32029
sdk.A2A_ERROR_MAPPING[TooManyStreamsError] = sdk.ErrorMapping(429, "RESOURCE_EXHAUSTED", "TOO_MANY_STREAMS")
sdk.A2A_ERROR_REASONS[TooManyStreamsError] = "TOO_MANY_STREAMS"
sdk.JSON_RPC_ERROR_CODE_MAP[TooManyStreamsError] = TOO_MANY_STREAMS_JSONRPC
response_helpers.EXCEPTION_MAP[TooManyStreamsError] = JSONRPCError


class TurnQueueFullError(sdk.A2AError):
    """A message refused because its Session already has sessions.maxQueuedTurns turns waiting
    (SQ429, KAGENT_TURN_QUEUE_FULL): HTTP 429 RESOURCE_EXHAUSTED on HTTP+JSON and JSON-RPC error
    -32030, entered in the SDK's tables as TooManyStreamsError is."""

    message = "too many queued turns"


TURN_QUEUE_FULL_JSONRPC = -32030
sdk.A2A_ERROR_MAPPING[TurnQueueFullError] = sdk.ErrorMapping(429, "RESOURCE_EXHAUSTED", "TURN_QUEUE_FULL")
sdk.A2A_ERROR_REASONS[TurnQueueFullError] = "TURN_QUEUE_FULL"
sdk.JSON_RPC_ERROR_CODE_MAP[TurnQueueFullError] = TURN_QUEUE_FULL_JSONRPC
response_helpers.EXCEPTION_MAP[TurnQueueFullError] = JSONRPCError


def to_sdk_error(e: SessionqError) -> sdk.A2AError:
    """sessionq's error as the A2A error each HTTP binding answers in its own form."""
    by_reason: dict[str, type[sdk.A2AError]] = sdk.A2A_REASON_TO_ERROR
    cls = by_reason.get(e.reason or "")
    message = errors.clip(e.message, errors.MAX_STATUS_MESSAGE)
    if cls is not None:
        return cls(message)
    # kagent's reason (and its metadata, e.g. retryAfterMs) in the error data: the ErrorInfo metadata
    # of the SDK's answer on both HTTP bindings
    data = {"reason": e.reason, "domain": errors.KAGENT_DOMAIN, **e.metadata} if e.reason else None
    if e.sqlstate == "SQ400":
        return sdk.InvalidParamsError(message)
    if e.sqlstate == "SQ404":
        return sdk.TaskNotFoundError(message)
    if e.sqlstate == "SQ429":
        return TurnQueueFullError(message, data) if e.reason == errors.TURN_QUEUE_FULL else TooManyStreamsError(message)
    if e.sqlstate in ("SQ401", "SQ403", "SQ409", "SQ412", "SQ422"):
        # not allowed, or not now (a turn is running, the session is suspended): the request's fault
        return sdk.InvalidRequestError(message, data)
    return sdk.InternalError(message)  # SQ503 / SQ504: transient on the server's side; retry


def unstorable(name: str, e: Exception) -> sdk.A2AError:
    """A value PostgreSQL or JSON cannot represent that the checks let through: still the client's."""
    log.info("unrepresentable value in %s: %s", name, errors.clip(e, 500))
    return sdk.InvalidParamsError(errors.clip(f"the request holds a value that cannot be stored: {e}",
                                              errors.MAX_STATUS_MESSAGE))


class SdkErrors(RequestHandler):
    """The handler the SDK's HTTP bindings call: `A2AHandler`, with sessionq's errors as A2A errors
    and database outages as an InternalError that says to retry (never a traceback)."""

    def __init__(self, inner: A2AHandler) -> None:
        self.inner = inner

    async def _call(self, name: str, params: Any, context: ServerCallContext) -> Any:
        telemetry.annotate({"rpc.method": name})  # on the request's server span (TracedHttp)
        try:
            check_storable(params)  # as the gRPC binding does: NUL characters, NaN, ... are the client's
            return await getattr(self.inner, name)(params, context)
        except SessionqError as e:
            raise to_sdk_error(e) from None
        except (psycopg.DataError, JsonFormatError) as e:
            raise unstorable(name, e) from None
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise sdk.InternalError("the database is unavailable; retry the same call") from None

    async def _stream(self, name: str, params: Any, context: ServerCallContext) -> AsyncGenerator[Any]:
        telemetry.annotate({"rpc.method": name})
        try:
            check_storable(params)
            async for response in getattr(self.inner, name)(params, context):
                yield getattr(response, response.WhichOneof("payload"))
        except SessionqError as e:
            raise to_sdk_error(e) from None
        except (psycopg.DataError, JsonFormatError) as e:
            raise unstorable(name, e) from None
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise sdk.InternalError("the database is unavailable; subscribe again") from None

    async def on_get_task(self, params: Any, context: ServerCallContext) -> Any:
        return await self._call("on_get_task", params, context)

    async def on_list_tasks(self, params: Any, context: ServerCallContext) -> Any:
        return await self._call("on_list_tasks", params, context)

    async def on_cancel_task(self, params: Any, context: ServerCallContext) -> Any:
        return await self._call("on_cancel_task", params, context)

    async def on_message_send(self, params: Any, context: ServerCallContext) -> Any:
        return await self._call("on_message_send", params, context)

    async def on_message_send_stream(self, params: Any, context: ServerCallContext) -> AsyncGenerator[Any]:
        async for item in self._stream("on_message_send_stream", params, context):
            yield item

    async def on_subscribe_to_task(self, params: Any, context: ServerCallContext) -> AsyncGenerator[Any]:
        async for item in self._stream("on_subscribe_to_task", params, context):
            yield item

    async def on_create_task_push_notification_config(self, params: Any, context: ServerCallContext) -> Any:
        return await self._call("on_create_task_push_notification_config", params, context)

    async def on_get_task_push_notification_config(self, params: Any, context: ServerCallContext) -> Any:
        return await self._call("on_get_task_push_notification_config", params, context)

    async def on_list_task_push_notification_configs(self, params: Any, context: ServerCallContext) -> Any:
        return await self._call("on_list_task_push_notification_configs", params, context)

    async def on_delete_task_push_notification_config(self, params: Any, context: ServerCallContext) -> None:
        await self._call("on_delete_task_push_notification_config", params, context)

    async def on_get_extended_agent_card(self, params: Any, context: ServerCallContext) -> Any:
        return await self._call("on_get_extended_agent_card", params, context)


class _ContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context with sessionq's caller (identified by `_Gate`), the Agent of the path
    as the tenant, and how long a blocking call may wait."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[IDENTITY] = request.scope.get(IDENTITY)
        context.state[BUDGET] = HTTP_WAIT
        context.state[TENANT] = request.scope.get(TENANT, "")
        return context


class _Gate:
    """ASGI middleware before the bindings: identify the caller (401) and authorize the namespace
    (403) of ``/api/a2a/<namespace>/<agent>/(jsonrpc|rest)``; the tenant is the path's Agent."""

    def __init__(self, app: ASGIApp, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        m = AGENT_PREFIX.match(scope.get("path", ""))
        if m is not None:
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
            try:
                who = self.auth.identify_headers(credential_headers(headers))
                self.auth.check_namespace(who, m.group(1))
            except SessionqError as e:
                response = JSONResponse({"error": errors.clip(e.message, errors.MAX_STATUS_MESSAGE)},
                                        status_code=HTTP_CODES.get(e.sqlstate, 500),
                                        headers={"WWW-Authenticate": "Bearer"} if e.sqlstate == "SQ401" else None)
                await response(scope, receive, send)
                return
            scope[IDENTITY] = who
            scope[TENANT] = f"{m.group(1)}/{m.group(2)}"
        await self.app(scope, receive, send)


TASK_ID = re.compile(r"/(tasks|pushNotificationConfigs)/[^/:]+")


def binding_route(path: str) -> str | None:
    """The route template of a request to an A2A HTTP binding (its server span's name: no
    namespace, Agent or task id in it), None for any other path (not traced)."""
    m = AGENT_PREFIX.match(path)
    if m is None:
        return None
    rest = TASK_ID.sub(lambda t: f"/{t.group(1)}/{{id}}", m.group(4) or "")
    return f"/api/a2a/{{namespace}}/{{agent}}/{m.group(3)}{rest}"


MAX_JSON_DEPTH = 64  # nesting a request body may have (a request needs a handful; Struct values a few more)
MALFORMED_LOG = RateLimitedLog()


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests deeper than `limit` (iterative: no recursion on client data)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def json_problem(body: bytes) -> str | None:
    """Why a request body is not JSON the bindings take (None when it is): not UTF-8 (JSON on the wire
    is UTF-8, RFC 8259), not JSON, or nested deeper than MAX_JSON_DEPTH."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "the request body is not UTF-8 text"
    try:
        value = json.loads(text)
    except RecursionError:
        return f"the request body nests deeper than {MAX_JSON_DEPTH} levels"
    except ValueError as e:  # JSONDecodeError, and an integer too long to convert
        return errors.clip(f"the request body is not valid JSON: {e}", 200)
    if _depth_exceeds(value, MAX_JSON_DEPTH):
        return f"the request body nests deeper than {MAX_JSON_DEPTH} levels"
    return None


class _SdkClientErrors(logging.Filter):
    """The a2a-sdk logs a client's mistake with a traceback at ERROR (JSON-RPC: an envelope or params
    that do not parse) and one WARNING line per error it answers (each A2A error, each parse error);
    these become one rate-limited line at most, as on gRPC (api/guard.py). Its other records (a
    server-side failure, INTERNAL) pass unchanged."""

    JSONRPC = "a2a.server.routes.jsonrpc_dispatcher"
    REST = "a2a.utils.error_handlers"
    CLIENT_MESSAGES = ("Failed to validate base JSON-RPC request", "Failed to parse request params")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == self.JSONRPC and record.msg in self.CLIENT_MESSAGES:
            error = record.exc_info[1] if record.exc_info else None
            MALFORMED_LOG.warn(Rejection.MALFORMED, "JSON-RPC", f"{record.msg}: {type(error).__name__}: {error}")
            return False
        if record.name in (self.JSONRPC, self.REST) and record.levelno == logging.WARNING:
            if str(record.msg).startswith("Parse error"):
                MALFORMED_LOG.warn(Rejection.MALFORMED, "HTTP+JSON", record.getMessage())
            return False  # a client error the answer carries: nothing for the server's log
        return True


SDK_CLIENT_ERRORS = _SdkClientErrors()


class _JsonBodies:
    """ASGI middleware before the bindings: a body that is not JSON they take (see `json_problem`) gets
    each binding's client error (JSON-RPC -32700, HTTP+JSON 400) with a short message, and one
    rate-limited log line instead of the SDK's traceback and INTERNAL answer."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        m = AGENT_PREFIX.match(scope.get("path", "")) if scope["type"] == "http" else None
        if m is None or scope.get("method") in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        body = await webserve.read_body(receive, self.limit)  # BodyLimit has read and counted it already
        if body is None:
            return
        problem = json_problem(body) if body.strip() else None
        if problem is not None:
            MALFORMED_LOG.warn(Rejection.MALFORMED, scope.get("path", ""), problem)
            response: Response
            if m.group(3) == "jsonrpc":
                response = JSONResponse({"jsonrpc": "2.0", "id": None,
                                         "error": {"code": -32700, "message": problem}})
            else:
                response = JSONResponse({"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": problem}},
                                        status_code=400)
            await response(scope, receive, send)
            return
        await self.app(scope, webserve.replay(body, receive), send)


class AgentCardServer:
    """Agent cards and the A2A HTTP bindings on one address. `grpc_url`: the gRPC address the cards
    advertise (host:port; a ``grpc://`` prefix is dropped: the SDK dials host:port); `base_url`: the
    http://host:port the cards advertise for the HTTP bindings (empty: this server's own address)."""

    def __init__(
        self,
        store: Store,
        auth: Authenticator,
        grpc_url: str,
        handler: A2AHandler | None = None,
        base_url: str = "",
        max_body_bytes: int = 8 * 1024 * 1024,
        allowed_hosts: list[str] | None = None,
        max_connections: int = 1000,
        header_timeout: float = 15.0,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.store = store
        self.auth = auth
        self.extra_routes = list(routes)  # other self-contained routes on this listener (the event streams)
        self.grpc_address = grpc_url.removeprefix("grpc://")
        self.base_url = base_url
        self.handler = handler
        self.max_body_bytes = max_body_bytes
        self.allowed_hosts = allowed_hosts or []
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.port = 0
        self.scheme = "http"  # "https" on a TLS port (api/public.py)
        self._http: HttpServer | None = None
        if handler is not None and handler.card is None:
            handler.card = self.extended_card

    def _base(self, seen_as: str | None = None) -> str:
        """The base URL the card advertises: a2a.publicUrl, else how the client reached this server
        (the card request's Host), else this server's loopback address."""
        return self.base_url or seen_as or f"{self.scheme}://127.0.0.1:{self.port}"

    def _grpc(self, host: str | None = None) -> str:
        """The gRPC address the card advertises: a wildcard listen host is replaced by the host the
        client reached this server by (else 127.0.0.1)."""
        listen, _, port = self.grpc_address.rpartition(":")
        if listen in ("0.0.0.0", "::", "[::]", ""):
            return f"{host or '127.0.0.1'}:{port}"
        return self.grpc_address

    async def extended_card(self, namespace: str, name: str, extended: bool) -> a2a_pb2.AgentCard:
        try:
            agent = await self.store.get_agent(namespace, name)
        except SessionqError as e:
            if e.sqlstate == "SQ404":
                raise SessionqError("SQ404", f"agent {namespace}/{name} not found") from None
            raise
        return agent_card(agent, self._grpc(), self._base(), extended)

    async def card(
        self, headers: list[tuple[str, str]], path: str, seen_as: str | None = None, host: str | None = None
    ) -> tuple[int, dict[str, object]]:
        m = PATH.match(path)
        if not m:
            return 404, {"error": "not found"}
        namespace, name = m.groups()
        try:
            who = self.auth.identify_headers(credential_headers(headers))
            self.auth.check_namespace(who, namespace)
            agent = await self.store.get_agent(namespace, name)
        except SessionqError as e:
            return HTTP_CODES.get(e.sqlstate, 500), {"error": errors.clip(e.message, errors.MAX_STATUS_MESSAGE)}
        return 200, json_format.MessageToDict(agent_card(agent, self._grpc(host), self._base(seen_as)))

    async def _card_endpoint(self, request: Request) -> Response:
        try:
            seen_as = f"{request.url.scheme}://{request.url.netloc}" if request.url.netloc else None
            status, body = await self.card(list(request.headers.items()), request.url.path, seen_as,
                                           request.url.hostname)
        except Exception:
            log.exception("agent card request failed")
            status, body = 500, {"error": "internal error; see the server log"}
        return JSONResponse(body, status_code=status)

    @staticmethod
    async def _http_error(request: Request, exc: Exception) -> Response:
        code = getattr(exc, "status_code", 500)
        text = {404: "not found", 405: "method not allowed"}.get(code, getattr(exc, "detail", "error"))
        return JSONResponse({"error": text}, status_code=code)

    def app(self, allowed: AllowedHosts | None = None) -> ASGIApp:
        """The bindings and cards behind the Gate, the JSON check, the body limit and the Host check
        (any host when `allowed` is None)."""
        for name in (_SdkClientErrors.JSONRPC, _SdkClientErrors.REST):
            logging.getLogger(name).addFilter(SDK_CLIENT_ERRORS)  # once: addFilter skips a filter it has
        routes: list[Any] = [
            Route("/api/a2a/{namespace}/{agent}/.well-known/agent-card.json", self._card_endpoint, methods=["GET"]),
            *self.extra_routes,
        ]
        if self.handler is not None:
            sdk_handler = SdkErrors(self.handler)
            builder = _ContextBuilder()
            routes.append(
                Mount(
                    "/api/a2a/{namespace}/{agent}",
                    routes=[
                        *create_jsonrpc_routes(sdk_handler, "/jsonrpc", context_builder=builder),
                        Mount("/rest", routes=create_rest_routes(sdk_handler, context_builder=builder)),
                    ],
                )
            )
        app = Starlette(routes=routes, exception_handlers={404: self._http_error, 405: self._http_error})
        # the caller is identified before its body is read
        guarded: ASGIApp = _Gate(BodyLimit(_JsonBodies(app, self.max_body_bytes), self.max_body_bytes), self.auth)
        checked = HostCheck(guarded, allowed, "a2a http") if allowed is not None else guarded
        return TracedHttp(checked, binding_route)  # a binding's call joins the trace of its traceparent

    async def start(self, address: str, *, reuse_port: bool = False) -> None:
        """Listen on address; reuse_port: share the port with the other API processes of one
        `serve` (SO_REUSEPORT, app/supervisor.py). The Host names answered are `allowed_hosts`, else
        those of the address (webserve.default_hosts)."""
        names = self.allowed_hosts or webserve.default_hosts(address, self.base_url)
        limits = Limits("a2a http", webserve.connection_cap(self.max_connections), self.header_timeout)
        self._http = HttpServer(self.app(AllowedHosts.of(names)), limits)
        await self._http.start(address, reuse_port=reuse_port)
        self.port = self._http.port

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.stop()
