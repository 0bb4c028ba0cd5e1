"""Serving the console in-process: uvicorn on its own socket (sessionq.webserve: a connection cap,
request deadlines, a body limit and the Host check), with the process's signals left alone."""

from __future__ import annotations

import logging

from psycopg_pool import AsyncConnectionPool

from sessionq import webserve
from sessionq.config import Settings
from sessionq.console.app import build_app
from sessionq.webserve import AllowedHosts, BodyLimit, HostCheck, HttpServer, Limits

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024  # the console's forms are a few fields


class ConsoleServer:
    """The web console on `address` (HOST:PORT; port 0 picks a free one: see `port`). It answers
    only requests whose Host names it (server.allowedHosts, else webserve.default_hosts): a page
    of another site that rebinds its name to this address gets 400, never a page or its CSRF token."""

    def __init__(self, settings: Settings, pool: AsyncConnectionPool, *, local_user: str | None = None) -> None:
        self.settings = settings
        self.app = build_app(settings, pool, local_user=local_user)
        self.port: int | None = None
        self._http: HttpServer | None = None

    async def start(self, address: str) -> None:
        """Listen on `address` and serve; OSError (e.g. the address is in use) when it cannot."""
        server = self.settings.server
        allowed = AllowedHosts.of(server.allowed_hosts or webserve.default_hosts(address))
        limits = Limits("web console", webserve.connection_cap(server.http_max_connections),
                        server.http_header_timeout)
        self._http = HttpServer(HostCheck(BodyLimit(self.app, MAX_BODY_BYTES), allowed, "web console"), limits)
        await self._http.start(address)
        self.port = self._http.port
        host = address.rpartition(":")[0].strip("[]") or "127.0.0.1"
        log.info("web console on http://%s:%d/", host, self.port)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.stop()
