"""Free TCP ports for the servers a test starts on 127.0.0.1.

A port the kernel picks for ``bind(("127.0.0.1", 0))`` lies in its ephemeral range
(net.ipv4.ip_local_port_range), the range it also takes the local port of every outgoing
connection from. A test that picks one and hands it to a server starting seconds later (`sessionq up`
starts PostgreSQL first) can find it taken by a connection of the other test worker in between (a
CI run failed so: "cannot listen on 127.0.0.1:35305 ... the address is in use"). `free_port` picks,
at random, a port below that range that nothing is bound to now: no outgoing connection ever takes
it, and two picks of the same port by two tests at once are unlikely (one in thousands).

`watched_port` is a port that notes its first connection (a client that should connect before it
is used).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator

__all__ = ["free_port", "watched_port"]

BAND = 12_000  # how many ports below the ephemeral range are picked from


def _ephemeral_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port of 127.0.0.1 that nothing is bound to now, below the kernel's ephemeral range."""
    top = _ephemeral_floor() - 1
    bottom = max(1024, top - BAND)
    for _ in range(100):
        port = random.randint(bottom, top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded band: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def watched_port() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """("127.0.0.1:PORT", an event set once something connected to it); each connection is closed."""
    connected = asyncio.Event()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.set()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}", connected
    finally:
        server.close()
        await server.wait_closed()
