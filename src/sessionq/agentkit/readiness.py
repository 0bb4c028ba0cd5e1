"""The Actor's runtime readiness (RT-3): a private HTTP endpoint answering ``GET /readyz``.

The runtime asks it to know that a started Actor serves its A2A endpoint before it sends a turn
(the seed's "runtime readiness is private HTTP /readyz on port 8081"). It is private like the A2A
endpoint: the runtime alone reaches it, no client is ever given its address.

- Where: the listening socket the runtime hands over (SESSIONQ_READY_FD), else SESSIONQ_READY_PORT
  on 127.0.0.1 (8081 inside a sandbox's network namespace); neither set: no endpoint (an agent run
  by hand).
- What: ``GET`` or ``HEAD /readyz`` answers ``200 ready`` once the agent's A2A server listens, ``503
  not ready: starting`` before and ``503 not ready: stopping`` once the process was told to stop;
  any other path ``404``, any other method ``405``, a request that is not HTTP/1 ``400``. One
  request per connection (``Connection: close``); a request head is at most 8 KiB.
- When: a ``/readyz`` request that comes while the agent is starting is held until it is ready or
  told to stop, at most HOLD seconds (then ``503 not ready: starting``): the runtime's first ask,
  made as the process starts, is answered the moment the agent serves, not at its next ask.

Standard library only: it must cost the Actor's start next to nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

__all__ = ["PATH", "READY_FD_ENV", "READY_PORT_ENV", "Readiness", "env_listener", "listening_socket"]

READY_FD_ENV = "SESSIONQ_READY_FD"
READY_PORT_ENV = "SESSIONQ_READY_PORT"
PATH = "/readyz"
HEAD_LIMIT = 8 * 1024
READ_TIMEOUT = 5.0  # seconds a connection may take to send its request's head
HOLD = 0.25  # seconds a request that comes while starting waits for the state to change


def env_listener(fd_env: str, port_env: str, *, default_port: int | None, backlog: int) -> socket.socket | None:
    """A non-blocking listening socket the runtime gave this process: the descriptor named by
    `fd_env`, else one bound on 127.0.0.1 at the port named by `port_env` (or `default_port`);
    None when neither is set and there is no default."""
    fd = os.environ.get(fd_env)
    if fd:
        sock = socket.socket(fileno=int(fd))
    else:
        port = os.environ.get(port_env) or default_port
        if port is None:
            return None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", int(port)))
        sock.listen(backlog)
    sock.setblocking(False)
    return sock


def listening_socket() -> socket.socket | None:
    """The readiness endpoint's listening socket (module docstring), None when none is asked for."""
    sock = env_listener(READY_FD_ENV, READY_PORT_ENV, default_port=None, backlog=16)
    if sock is not None:
        sock.set_inheritable(False)  # the agent's own children (a bash call) do not get it
    return sock


class Readiness:
    """The endpoint's state (`starting`, `ready`, `stopping`) and its server."""

    def __init__(self) -> None:
        self.state = "starting"
        self._server: asyncio.Server | None = None
        self._changed = asyncio.Event()  # the state left `starting`
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def mark_ready(self) -> None:
        """(on the endpoint's event loop)"""
        if self.state == "starting":
            self.state = "ready"
            self._changed.set()

    def mark_stopping(self) -> None:
        """(any thread, a signal handler too)"""
        self.state = "stopping"
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing is held
                self._loop.call_soon_threadsafe(self._changed.set)

    async def start(self, sock: socket.socket | None) -> None:
        self._loop = asyncio.get_running_loop()
        if sock is not None:
            self._server = await asyncio.start_server(self._answer, sock=sock, limit=HEAD_LIMIT)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(OSError):
                await self._server.wait_closed()
            self._server = None

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                status, body = "400 Bad Request", "bad request"
                head = b""
            else:
                line = head.split(b"\r\n", 1)[0]
                status, body = self._response(line)
                if body == "not ready: starting":
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), HOLD)
                    status, body = self._response(line)
            text = f"{body}\n"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(text)}"
                f"\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n".encode()
                + (b"" if head.startswith(b"HEAD ") else text.encode())
            )
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _response(self, line: bytes) -> tuple[str, str]:
        parts = line.decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return "400 Bad Request", "bad request"
        method, target, _version = parts
        if target.split("?", 1)[0] != PATH:
            return "404 Not Found", "not found"
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "method not allowed"
        if self.ready:
            return "200 OK", "ready"
        return "503 Service Unavailable", f"not ready: {self.state}"
