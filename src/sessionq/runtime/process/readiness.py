"""How the process runtime knows a started Actor is ready (RT-3): it asks the Actor's private
readiness endpoint, ``GET /readyz`` (sessionq.agentkit.readiness serves it), until it answers 200.

- Where: under ``none`` a listening socket on the host's 127.0.0.1 the Actor inherits
  (SESSIONQ_READY_FD), so a request waits in its backlog until the agent serves it; in a sandbox
  127.0.0.1:READY_PORT (8081) of the Actor's network namespace (a warm sandbox listens there from
  its start and hands the socket to its Actor: agentkit/warm.py), asked again every POLL seconds
  (POLL_GVISOR under gVisor) while nothing listens or it answers 503. The address is the runtime's
  alone: no client is given it, and nothing of it is recorded.
- When: from the moment the process starts (`probe`, a task of its own) until it answers 200 or
  the process ends (the agent kit holds an ask made while it starts until it serves, at most
  agentkit.readiness.HOLD: an ask waiting in a handed-over socket's backlog is answered 200 the
  moment the agent is ready). A turn waits for it (`wait_ready`) before it is sent, at most
  `ProcessConfig.ready_timeout` seconds (then it fails, saying why: `Child.not_ready`).
"""

from __future__ import annotations

import asyncio
import socket

from sessionq.runtime.process.children import Child, ReadyAddress

__all__ = ["POLL", "POLL_GVISOR", "READY_PORT", "probe", "wait_ready"]

READY_PORT = 8081  # inside a sandbox's network namespace (the seed's port)
# seconds between two asks while nothing listens, or the answer is 503: a turn waits for the first 200,
# so half of it on average is added to a sandboxed resume (an ask that finds nothing: ~0.15 ms, most
# of it the thread that makes the namespace's socket)
POLL = 0.002
# under gVisor each ask the starting agent answers (503) costs it system calls at gVisor's price
POLL_GVISOR = 0.01
ASK_TIMEOUT = 30.0  # seconds one ask waits for its answer (under none, in the socket's backlog)
ANSWER_LIMIT = 4096  # bytes of an answer read, at most
REQUEST = b"GET /readyz HTTP/1.1\r\nHost: actor\r\nUser-Agent: sessionq-runtime\r\nConnection: close\r\n\r\n"


async def _connect(address: ReadyAddress) -> socket.socket:
    loop = asyncio.get_running_loop()
    if address.netns is not None:
        sock = address.netns()
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
    try:
        await loop.sock_connect(sock, ("127.0.0.1", address.port))
    except BaseException:
        sock.close()
        raise
    return sock


async def ask(address: ReadyAddress) -> int:
    """One ``GET /readyz``: the answer's status code (ConnectionRefusedError when nothing listens,
    OSError or ValueError for a connection cut or an answer that is not HTTP)."""
    loop = asyncio.get_running_loop()
    sock = await _connect(address)
    with sock:
        await loop.sock_sendall(sock, REQUEST)
        answer = b""
        while b"\r\n" not in answer and len(answer) < ANSWER_LIMIT:
            more = await loop.sock_recv(sock, ANSWER_LIMIT)
            if not more:
                break
            answer += more
    parts = answer.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise ValueError("not an HTTP answer")
    return int(parts[1])


async def probe(child: Child) -> None:
    """Ask the child's readiness endpoint until it answers 200 (`child.ready` set) or the process
    ends; `child.not_ready` says why it is not ready yet."""
    assert child.ready_at is not None
    while not child.exited.is_set():
        try:
            status = await asyncio.wait_for(ask(child.ready_at), ASK_TIMEOUT)
        except ConnectionRefusedError:
            child.not_ready = "nothing listens on its readiness endpoint"
        except TimeoutError:
            child.not_ready = "its /readyz did not answer"
            continue
        except (OSError, ValueError) as exc:
            child.not_ready = f"its /readyz failed ({type(exc).__name__})"
        else:
            if status == 200:
                child.ready.set()
                return
            child.not_ready = f"its /readyz answered {status}"
        await asyncio.sleep(child.ready_at.poll or POLL)
    child.not_ready = "the actor's process ended before it was ready"


async def wait_ready(child: Child, timeout: float) -> str | None:
    """Until the child is ready (None), its process ends or `timeout` passes (why it is not ready)."""
    if child.ready.is_set():
        return None
    if child.prober is None:
        return "the actor's readiness is not probed"
    ready = asyncio.ensure_future(child.ready.wait())
    try:
        # the probe ends with the process (or is cancelled by a stop, never by this caller's cancel)
        await asyncio.wait({ready, child.prober}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready.cancel()
    if child.ready.is_set():
        return None
    if child.prober.done():
        return child.not_ready or "the actor is not ready"
    return f"the actor did not become ready within {timeout:g} s ({child.not_ready or 'its /readyz did not answer'})"
