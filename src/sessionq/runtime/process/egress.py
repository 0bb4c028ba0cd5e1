"""The runtime's side of a sandboxed Actor's network namespace (`ActorNetwork`): the namespace has
only a loopback, and on it only what the runtime listens on, so these are its one way out.

- the egress proxy (127.0.0.1:PROXY_PORT inside; HTTP_PROXY and HTTPS_PROXY name it), enforcing the
  Actor's egress policy as persisted (read again for every request: an UpdateActorEgressPolicy
  applies to the next request of the running Actor):
  - ``GET http://host:port/...`` (absolute form) is forwarded when a rule allows that DNS name and
    port with protocol ``http``, or ``https`` (the proxy then opens TLS to the origin itself and
    verifies its certificate against the system's CAs and `runtime.process.egressCaFile`'s,
    `origination_context`: the way to reach an https origin whose rule carries credential
    headers, which the proxy adds, so the agent never holds them);
  - ``CONNECT host:port`` opens a tunnel when a rule allows it with ``tls_passthrough``, or ``https``
    without credential headers (the proxy cannot add headers to a stream it cannot read);
  - a request header named like one of the deciding rule's credential headers is dropped and the
    rule's value sent instead; ``Proxy-*`` headers never reach the origin;
  - anything else is refused with ``403`` and a one-line reason the agent can read. The proxy
    resolves a name only once a rule matched it; inside the sandbox no name resolves at all (no
    resolver, no route), so DNS answers exist only for the names the policy matches.
- the task store's forwarder (127.0.0.1:TASKSTORE_PORT inside), passing the TaskStoreService calls
  the agent kit makes to the runtime's task store, and no other path of its API
  (taskstore_forward.py);
- the Actor's A2A endpoint: a listener on the host's 127.0.0.1 (the port the runtime records and
  `invoke` dials) whose connections the runtime opens to 127.0.0.1:A2A_PORT inside.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from sessionq.runtime.base import EgressRule
from sessionq.runtime.process import children
from sessionq.runtime.process.sandbox import A2A_PORT, PROXY_PORT, TASKSTORE_PORT, NetNamespace
from sessionq.runtime.process.taskstore_forward import TaskStoreForwarder

log = logging.getLogger(__name__)

__all__ = ["ActorNetwork", "Decision", "decide", "origination_context"]

HEAD_LIMIT = 64 * 1024  # bytes of a request's line and headers the proxy reads, at most
CHUNK = 64 * 1024
CONNECT_TIMEOUT = 30.0  # seconds the proxy waits for an origin
A2A_WAIT = 60.0  # seconds a connection to the A2A endpoint waits for the Actor to listen
REFUSED_HEADER = "X-Sessionq-Egress"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"}


def origination_context(ca_file: str | None = None) -> ssl.SSLContext:
    """How the proxy verifies an origin it opens TLS to: the system's CAs, and those of `ca_file`
    (PEM) when given (OSError or ssl.SSLError when it cannot be read)."""
    context = ssl.create_default_context()
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    return context


@dataclass(frozen=True)
class Decision:
    """What the proxy does with a request: `rule` the deciding rule (None: refused, `reason` why),
    `tls` whether the proxy opens TLS to the origin itself."""

    rule: EgressRule | None
    tls: bool = False
    reason: str = ""


def _name(host: str) -> str:
    return host.strip().rstrip(".").lower()


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def decide(rules: Sequence[EgressRule], host: str, port: int, *, tunnel: bool) -> Decision:
    """The policy's answer for a request to `host`:`port` (a CONNECT tunnel, or a request the proxy
    reads). Rules match on DNS name (case-insensitive) and port; literal addresses never match."""
    origin = f"{host}:{port}"
    if _is_literal(host):
        return Decision(None, reason=f"{origin}: a literal IP address; the egress policy allows DNS names only")
    matches = [r for r in rules if _name(r.hostname) == _name(host) and r.port == port]
    if not matches:
        return Decision(None, reason=f"{origin} is not allowed by the Actor's egress policy")
    rule = matches[0]
    if tunnel:
        if rule.protocol == "tls_passthrough" or (rule.protocol == "https" and not rule.credential_headers):
            return Decision(rule)
        if rule.protocol == "https":
            return Decision(None, reason=(
                f"https://{origin} carries credential headers the proxy adds: send the request to the proxy in the "
                f"clear as http://{origin}/... and the proxy opens TLS to the origin"))
        return Decision(None, reason=f"{origin} is allowed as {rule.protocol}, not for a CONNECT tunnel")
    if rule.protocol == "http":
        return Decision(rule)
    if rule.protocol == "https":
        return Decision(rule, tls=True)
    return Decision(None, reason=f"{origin} is allowed as {rule.protocol} only (CONNECT)")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        pass


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, asyncio.CancelledError):
        await writer.wait_closed()


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter], b: tuple[asyncio.StreamReader, asyncio.StreamWriter]
) -> None:
    try:
        await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))
    finally:
        await _close(a[1])
        await _close(b[1])


async def _refuse(writer: asyncio.StreamWriter, status: str, reason: str) -> None:
    body = f"sessionq egress: {reason}\n".encode()
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n{REFUSED_HEADER}: refused\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()
    await _close(writer)


def _split_host_port(value: str, default: int) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or "]" in port:
        return value, default
    return host.strip("[]"), int(port)


class ActorNetwork:
    """The listeners of one sandboxed Actor (module docstring). `rules` returns its egress policy's
    current rules; `taskstore` is the runtime's TaskStoreService ("host:port", None: none)."""

    def __init__(
        self,
        netns: NetNamespace,
        rules: Callable[[], Sequence[EgressRule]],
        taskstore: str | None,
        hosts: Mapping[str, str] | None = None,
        origination: ssl.SSLContext | None = None,
    ) -> None:
        self.netns = netns
        self.origination = origination  # the TLS the proxy opens to https origins (None: the system's CAs)
        self.hosts = hosts if hosts is not None else {}  # names dialled at a fixed address (tests)
        self.rules = rules
        self.taskstore = taskstore
        self.port = 0  # the A2A endpoint's port on the host
        self.closed = False
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._forwarder: TaskStoreForwarder | None = None

    async def start(self) -> None:
        proxy = self.netns.listen(PROXY_PORT)
        self._servers.append(await asyncio.start_server(self._tracked(self._proxy), sock=proxy, limit=HEAD_LIMIT))
        await self.serve_taskstore(self.taskstore)
        a2a = children.listen()
        a2a.set_inheritable(False)
        self.port = a2a.getsockname()[1]
        self._servers.append(await asyncio.start_server(self._tracked(self._to_actor), sock=a2a))

    async def serve_taskstore(self, address: str | None) -> None:
        """Forward 127.0.0.1:TASKSTORE_PORT inside to `address` (a warm sandbox's network is made
        before the runtime may know its task store: it is served from the hand-over on)."""
        if not address:
            return
        self.taskstore = address
        if self._forwarder is None:
            forwarder = TaskStoreForwarder(self.netns, address)
            try:
                await forwarder.start(TASKSTORE_PORT)
            except BaseException:
                await forwarder.close()
                raise
            self._forwarder = forwarder

    async def close(self) -> None:
        self.closed = True
        forwarder, self._forwarder = self._forwarder, None
        if forwarder is not None:
            await forwarder.close()
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._servers.clear()
        self.netns.close()

    def _tracked(self, handler: Handler) -> Handler:
        async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            try:
                await handler(reader, writer)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                await _close(writer)
            except asyncio.CancelledError:
                # the network closed (`close`): the connection ends with it; not re-raised, so the
                # stream's own callback finds a finished task, not a cancelled one
                writer.close()
            finally:
                self._tasks.discard(task)

        return run

    def _address(self, host: str) -> str:
        return self.hosts.get(_name(host), host)

    # forwarders ------------------------------------------------------------------------------

    async def _to_actor(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + A2A_WAIT
        while True:
            sock = self.netns.socket()
            try:
                await loop.sock_connect(sock, ("127.0.0.1", A2A_PORT))
                break
            except ConnectionRefusedError:
                sock.close()
                if self.closed or time.monotonic() > deadline:
                    await _close(writer)
                    return
                await asyncio.sleep(0.02)
        inside = await asyncio.open_connection(sock=sock)
        await _splice((reader, writer), inside)

    # the egress proxy ------------------------------------------------------------------------

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            await _refuse(writer, "400 Bad Request", "the request's head is incomplete or over 64 KiB")
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            await _refuse(writer, "400 Bad Request", "not an HTTP/1 request line")
            return
        method, target, version = parts
        headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:] if ":" in line]
        if method.upper() == "CONNECT":
            await self._tunnel(reader, writer, target)
            return
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            await _refuse(writer, "400 Bad Request", (
                "send requests in absolute form through the proxy (http://host:port/path), or CONNECT host:port"))
            return
        port = url.port or 80
        decision = decide(self.rules(), url.hostname, port, tunnel=False)
        if decision.rule is None:
            await _refuse(writer, "403 Forbidden", decision.reason)
            return
        rule = decision.rule
        context = (self.origination or origination_context()) if decision.tls else None
        try:
            upstream = await asyncio.wait_for(
                asyncio.open_connection(self._address(url.hostname), port, ssl=context,
                                        server_hostname=url.hostname if context else None),
                CONNECT_TIMEOUT,
            )
        except (OSError, TimeoutError) as exc:
            reason = f"{url.hostname}:{port} could not be reached ({type(exc).__name__})"
            await _refuse(writer, "502 Bad Gateway", reason)
            return
        replaced = {k.lower() for k in rule.credential_headers}
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        out = [f"{method} {path} {version}"]
        has_host = False
        for name, value in headers:
            low = name.lower()
            if low in replaced or low in HOP_BY_HOP or low.startswith("proxy-"):
                continue
            has_host = has_host or low == "host"
            out.append(f"{name}: {value}")
        if not has_host:
            out.append(f"Host: {url.netloc}")
        out += [f"{k}: {v}" for k, v in rule.credential_headers.items()]
        out.append("Connection: close")
        upstream[1].write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
        await _splice((reader, writer), upstream)

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: str) -> None:
        try:
            host, port = _split_host_port(target, 443)
        except ValueError:
            await _refuse(writer, "400 Bad Request", "CONNECT needs host:port")
            return
        decision = decide(self.rules(), host, port, tunnel=True)
        if decision.rule is None:
            await _refuse(writer, "403 Forbidden", decision.reason)
            return
        try:
            upstream = await asyncio.wait_for(asyncio.open_connection(self._address(host), port), CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            await _refuse(writer, "502 Bad Gateway", f"{host}:{port} could not be reached ({type(exc).__name__})")
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await _splice((reader, writer), upstream)
