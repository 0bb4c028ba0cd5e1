"""The public port (server.address, 8083): every protocol the API speaks, on one listener.

- native gRPC (every service of api/server.py, reflection, grpc.health.v1): grpcio, listening on a
  unix socket in a private directory, behind the front of oneport.py;
- over HTTP/1.1 (uvicorn, every limit of webserve.py) and HTTP/2 (h2c: the front's h2 server): gRPC-Web, binary and text, for every
  unary and server-streaming method (api/grpcweb.py: served by the API's own handlers, CORS for
  server.corsOrigins), the A2A agent cards and the JSON-RPC and HTTP+JSON bindings at
  ``/api/a2a/{namespace}/{name}/...`` (api/agentcard.py), MCP at ``/mcp`` (api/mcpserver.py:
  the `mcp` SDK's streamable HTTP transport, authenticated as the API), and the health
  endpoints for probes, ``GET /healthz`` (the API serves) and ``GET /readyz`` (the API serves
  and the runtime answers): 200 ``ok`` or 503, no authentication, no Host check (a kubelet names
  the Pod's address), nothing else said.

The cards advertise this same port for gRPC and for the HTTP bindings. With server.tls the port
speaks TLS only (oneport.py: ALPN h2 and http/1.1) and the cards' HTTP bindings are https URLs.
"""

from __future__ import annotations

from grpc_health.v1 import health_pb2
from starlette.types import ASGIApp, Receive, Scope, Send

from sessionq import webserve
from sessionq.api.agentcard import AgentCardServer
from sessionq.api.events import event_routes
from sessionq.api.grpcweb import GrpcWeb, is_grpc_web
from sessionq.api.mcpserver import PATH as MCP_PATH
from sessionq.api.mcpserver import McpApp
from sessionq.api.server import ApiServer
from sessionq.config import Settings, grpc_message_limit
from sessionq.db.store import Store
from sessionq.oneport import OnePort, PrivateSocket, tls_context
from sessionq.runtime.base import RuntimeReader
from sessionq.webserve import AllowedHosts, BodyLimit, HostCheck, Limits

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
RUNTIME_HEALTH_SERVICE = "sessionq.runtime"  # the health service the runtime's watch sets (app/services.py)


class PublicPort:
    """The API on one port: `api` (grpcio, private), `cards` (the A2A HTTP app), the front;
    `port` once started."""

    def __init__(self, settings: Settings, store: Store, *, address: str | None = None,
                 runtime: RuntimeReader | None = None, reuse_port: bool = False) -> None:
        self.settings = settings
        self.address = address or settings.server.address
        self.reuse_port = reuse_port
        tls = settings.server.tls
        # the files are read now: one that is missing or unreadable is a ConfigError at start
        self.tls = tls_context(tls.cert_file, tls.key_file) if tls.cert_file else None
        self.private = PrivateSocket()
        try:
            self.api = ApiServer(settings, store, address=self.private.grpc_address, runtime=runtime)
        except BaseException:
            self.private.close()
            raise
        self.advertised = settings.a2a.public_grpc_address
        self.cards = AgentCardServer(
            store,
            self.api.auth,
            self.advertised or self.address,
            handler=self.api.a2a,
            base_url=settings.a2a.public_url,
            max_body_bytes=grpc_message_limit(settings.a2a.max_message_bytes),
            allowed_hosts=settings.server.allowed_hosts,
            max_connections=settings.server.http_max_connections,
            header_timeout=settings.server.http_header_timeout,
            routes=event_routes(self.api.events, self.api.auth),
        )
        if self.tls is not None:
            self.cards.scheme = "https"
        self.grpc_web = GrpcWeb(self.api.handlers, grpc_message_limit(settings.a2a.max_message_bytes), settings.server.cors_origins)
        self.mcp = McpApp(store, self.api.auth, self.api.handlers, stateless=settings.server.mcp_stateless,
                          max_body=grpc_message_limit(settings.a2a.max_message_bytes))
        self.front: OnePort | None = None
        self.port = 0

    def app(self) -> ASGIApp:
        """The HTTP side of the port: health, then the cards and A2A bindings behind the Host check."""
        names = self.settings.server.allowed_hosts or webserve.default_hosts(self.address, self.settings.a2a.public_url)
        allowed = AllowedHosts.of(names)
        http = self.cards.app(allowed)
        limit = grpc_message_limit(self.settings.a2a.max_message_bytes)
        grpc_web = HostCheck(BodyLimit(self.grpc_web, limit), allowed, "grpc-web")
        mcp = HostCheck(self.mcp, allowed, "mcp")
        api = self.api

        async def route(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and scope["path"].rstrip("/") == MCP_PATH:
                await mcp(scope, receive, send)
                return
            if is_grpc_web(scope):
                await grpc_web(scope, receive, send)
                return
            if scope["type"] == "http" and scope["path"] in (HEALTH_PATH, READY_PATH):
                ok = api.serving("") and (scope["path"] == HEALTH_PATH or api.serving(RUNTIME_HEALTH_SERVICE)
                                          or RUNTIME_HEALTH_SERVICE not in api.statuses)
                body = b"ok\n" if ok else b"not serving\n"
                await send({"type": "http.response.start", "status": 200 if ok else 503,
                            "headers": [(b"content-type", b"text/plain"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
            await http(scope, receive, send)

        return route

    async def start(self) -> None:
        await self.api.start()
        await self.mcp.start()
        limits = Limits("server.address", webserve.connection_cap(self.settings.server.http_max_connections),
                        self.settings.server.http_header_timeout)
        # an HTTP/2 request's body is bounded by the app's limit (413) and, past twice that, by the front
        self.front = OnePort(self.app(), limits, self.private.path,
                             max_body=2 * grpc_message_limit(self.settings.a2a.max_message_bytes) + (64 << 10),
                             tls=self.tls)
        await self.front.start(self.address, reuse_port=self.reuse_port)
        self.port = self.cards.port = self.front.port
        if not self.advertised:  # a port chosen at start (0) is advertised as it is
            host = self.address.rpartition(":")[0]
            self.cards.grpc_address = f"{host}:{self.port}"

    async def stop(self, grace: float = 5.0) -> None:
        """The health endpoints say not serving, the port closes, grpcio gives calls `grace` seconds."""
        try:
            await self.api.set_health("", health_pb2.HealthCheckResponse.NOT_SERVING)
            if self.front is not None:
                await self.front.stop()
            await self.api.stop(grace)
            await self.grpc_web.close()
            await self.mcp.stop()
        finally:
            if self.front is not None:
                self.front.close_pipes()
            self.private.close()
