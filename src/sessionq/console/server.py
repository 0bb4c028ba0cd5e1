"""Serving the console in-process: uvicorn on its own socket, with the process's signals left alone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn
from psycopg_pool import AsyncConnectionPool

from sessionq.config import Settings
from sessionq.console.app import build_app

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: the process (sessionq.app.process.Shutdown)
    owns SIGINT and SIGTERM and stops the console itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ConsoleServer:
    """The web console on `address` (HOST:PORT; port 0 picks a free one: see `port`)."""

    def __init__(self, settings: Settings, pool: AsyncConnectionPool, *, local_user: str | None = None) -> None:
        self.app = build_app(settings, pool, local_user=local_user)
        self.port: int | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, address: str) -> None:
        """Listen on `address` and serve; OSError (e.g. the address is in use) when it cannot."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, int(port)))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False,
                                timeout_graceful_shutdown=2)
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="web console")
        while not self._server.started and not self._task.done():  # noqa: ASYNC110 - uvicorn offers no event
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()
        log.info("web console on http://%s:%d/", host, self.port)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._task), 5)
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
