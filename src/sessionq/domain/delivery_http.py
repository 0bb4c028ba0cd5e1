"""The POSTs of a deliver_webhooks job: HTTP/1.1 over asyncio streams, on connections kept between
POSTs.

A job POSTs to its subscription's one URL only, many times, several Sessions at a time. httpx's
connection pool spent 2-3 ms of the worker's CPU per POST at that concurrency (most of it finding,
checking and returning pooled connections), which on a busy machine is CPU the worker's other jobs
(a CreateSession's execution) need; one POST written and read here costs a fraction of that.

The rules are A2A push's (domain/push.py), whose target checks it uses: every attempt resolves and
checks the URL's host again and connects only to an address it checked (a kept connection is
reused only for an address the attempt checked), TLS verifies the certificate for the URL's host
(SNI), no redirect is followed (a 3xx is just a status that is not 2xx), the environment's proxies
are never used, one deadline covers the attempt, and at most `ANSWER_LIMIT` bytes of the answer's
body are read. A connection is kept only after an answer read whole (Content-Length or chunked, no
``Connection: close``); anything else closes it. A kept connection the receiver closed while it
waited is noticed before reuse; one that fails before any byte of the answer came is replaced by a
new one for the same attempt once (the receiver never read that request, as a closed idle
connection means).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

from sessionq import errors
from sessionq.domain import push

HEAD_LIMIT = 64 * 1024  # bytes of an answer's status line and headers
USER_AGENT = "sessionq-webhooks"


class _Closed(Exception):
    """A kept connection ended before any byte of the answer came."""


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


class KeptConnections:
    """The connections of one job to one URL's checked addresses: at most `keep` kept between POSTs
    (0: a connection per POST). `tls`: the context of https connections (push.tls_context: the
    system's CAs)."""

    def __init__(self, keep: int, tls: ssl.SSLContext | None = None) -> None:
        self.keep = keep
        self.tls = tls
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def aclose(self) -> None:
        for kept in self._idle.values():
            for c in kept:
                c.close()
        self._idle.clear()

    def _take(self, key: tuple[str, int]) -> _Connection | None:
        kept = self._idle.get(key)
        while kept:
            c = kept.pop()
            if c.usable():
                return c
            c.close()
        return None

    def _give_back(self, key: tuple[str, int], c: _Connection) -> None:
        if sum(len(v) for v in self._idle.values()) >= self.keep:
            c.close()
            return
        self._idle.setdefault(key, []).append(c)

    async def post(self, url: str, body: bytes, headers: dict[str, str], policy: push.TargetPolicy,
                   timeout: float) -> tuple[bool, int | None, str | None]:
        """One attempt: (delivered (a 2xx answer), the HTTP status if one came, the error), within
        `timeout` seconds in all, the target checked first."""
        try:
            async with asyncio.timeout(timeout):
                target = await push.resolve_target(url, policy)
                status = await self._attempt(target, body, headers)
        except errors.SessionqError as e:
            return False, None, e.message
        except TimeoutError:
            return False, None, f"no answer within {timeout:g}s (webhooks.timeout)"
        if isinstance(status, str):
            return False, None, status
        if 200 <= status < 300:
            return True, status, None
        return False, status, f"HTTP {status}"

    async def _attempt(self, target: push.Target, body: bytes, headers: dict[str, str]) -> int | str:
        url = target.url
        request = self._request(url.netloc.decode("ascii"), url.raw_path.decode("ascii"), body, headers)
        port = url.port or (443 if url.scheme == "https" else 80)
        error = "no address to connect to"
        for ip in target.addresses:
            key = (str(ip), port)
            c = self._take(key)
            if c is not None:
                try:
                    return await self._exchange(key, c, request, reused=True)
                except _Closed:
                    pass  # a kept connection the receiver had closed: a new one, once
            try:
                c = await self._connect(target, key)
            except OSError as e:
                error = f"ConnectError: {errors.clip(e, 200)}"  # the next checked address, if any
                continue
            try:
                return await self._exchange(key, c, request, reused=False)
            except _Closed:
                return "RemoteProtocolError: the connection closed without an answer"
        return error

    @staticmethod
    def _request(host: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        lines = [f"POST {path or '/'} HTTP/1.1", f"Host: {host}", f"User-Agent: {USER_AGENT}",
                 "Content-Type: application/json", f"Content-Length: {len(body)}", "Accept: */*"]
        lines.extend(f"{k}: {v}" for k, v in headers.items())
        if any("\r" in line or "\n" in line for line in lines):  # never: the URL is parsed, the headers ours
            raise errors.invalid("a webhook request's head holds a line break")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def _connect(self, target: push.Target, key: tuple[str, int]) -> _Connection:
        tls: ssl.SSLContext | None = None
        server_hostname: str | None = None
        if target.url.scheme == "https":
            tls = self.tls or push.tls_context()
            # the certificate is checked for the URL's host, whichever checked address is dialled
            server_hostname = target.url.raw_host.decode("ascii")
        reader, writer = await asyncio.open_connection(key[0], key[1], ssl=tls, server_hostname=server_hostname,
                                                       limit=HEAD_LIMIT)
        return _Connection(reader, writer)

    async def _exchange(self, key: tuple[str, int], c: _Connection, request: bytes, *, reused: bool) -> int | str:
        """Write the request, read the answer's head and at most ANSWER_LIMIT bytes of its body; the
        connection is kept when the answer was read whole and the receiver keeps it. _Closed when
        the connection ended before any byte of the answer came."""
        keep = False
        try:
            try:
                c.writer.write(request)
                await c.writer.drain()
                status, fields = await self._head(c.reader)
            except asyncio.IncompleteReadError as e:
                if not e.partial:
                    raise _Closed from None
                return f"RemoteProtocolError: the answer ended in its head: {errors.clip(e.partial, 80)}"
            except ConnectionError as e:
                if reused:
                    raise _Closed from None
                return f"RemoteProtocolError: {type(e).__name__}: {errors.clip(e, 200)}"
            except (ValueError, asyncio.LimitOverrunError) as e:
                return f"RemoteProtocolError: the answer is not HTTP/1.1: {errors.clip(e, 200)}"
            except OSError as e:
                return f"NetworkError: {type(e).__name__}: {errors.clip(e, 200)}"
            try:
                # a 204 or 304 has no body whatever its headers say (RFC 9112, 6.3)
                whole = status in (204, 304) or await self._body(c.reader, fields)
            except (OSError, asyncio.IncompleteReadError, ValueError, asyncio.LimitOverrunError):
                whole = False  # the status has come; the rest of the answer is not needed
            keep = whole and "close" not in fields.get("connection", "").lower()
            return status
        finally:
            if keep:
                self._give_back(key, c)
            else:
                c.close()

    @staticmethod
    async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
        """The final answer's status and headers (names in lower case); 1xx answers skipped."""
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            version, _, rest = lines[0].partition(" ")
            if not version.startswith("HTTP/1."):
                raise ValueError(f"status line {lines[0][:80]!r}")
            status = int(rest[:3])
            if not 100 <= status < 600:
                raise ValueError(f"status {status}")
            fields: dict[str, str] = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    fields[name.strip().lower()] = value.strip()
            if status >= 200 or status == 101:
                return status, fields

    @staticmethod
    async def _body(reader: asyncio.StreamReader, fields: dict[str, str]) -> bool:
        """Read the answer's body, at most about ANSWER_LIMIT bytes: whether it was read whole."""
        limit = push.ANSWER_LIMIT
        if "chunked" in fields.get("transfer-encoding", "").lower():
            read = 0
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                        pass
                    return True
                read += size
                if read > limit:
                    return False
                await reader.readexactly(size + 2)
        length = fields.get("content-length")
        if length is not None:
            n = int(length)
            if n > limit:
                return False
            await reader.readexactly(n)
            return True
        await reader.read(limit)  # until the receiver closes: never kept
        return False
