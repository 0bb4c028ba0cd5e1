"""The POSTs of a deliver_webhooks job: HTTP/1.1 over asyncio streams, on connections kept between
POSTs; the framing (the request written, the answer's head and body parsed, whether the connection
may carry the next request) is h11's.

A job POSTs to its subscription's one URL only, many times, several Sessions at a time. httpx's
connection pool spent 2-3 ms of the worker's CPU per POST at that concurrency (most of it finding,
checking and returning pooled connections), which on a busy machine is CPU the worker's other jobs
(a CreateSession's execution) need; one POST written and read here costs a fraction of that.

The rules are A2A push's (domain/push.py), whose target checks it uses: every attempt resolves and
checks the URL's host again and connects only to an address it checked (a kept connection is
reused only for an address the attempt checked), TLS verifies the certificate for the URL's host
(SNI), no redirect is followed (a 3xx is just a status that is not 2xx), the environment's proxies
are never used, one deadline covers the attempt, the answer's head is at most `HEAD_LIMIT` bytes
and at most `ANSWER_LIMIT` bytes of its body are read. A connection is kept only after an answer
read whole that leaves it open for the next request (h11's cycle done on both sides: a
Content-Length or chunked body, no ``Connection: close``, HTTP/1.1, nothing unread after it);
anything else closes it, and a body that only the receiver's close would end is not read at all.
A kept connection the receiver closed while it waited is noticed before reuse; one that fails
before any byte of the answer came is replaced by a new one for the same attempt once (the
receiver never read that request, as a closed idle connection means).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field

import h11

from sessionq import errors
from sessionq.domain import push

HEAD_LIMIT = 64 * 1024  # bytes of an answer's status line and headers (a chunk's size line too)
USER_AGENT = "sessionq-webhooks"
# the fields every POST carries after its Host, as bytes (h11 takes them as they are)
_FIELDS = ((b"User-Agent", USER_AGENT.encode()), (b"Content-Type", b"application/json"), (b"Accept", b"*/*"))


class _Closed(Exception):
    """A kept connection ended before any byte of the answer came."""


def _client() -> h11.Connection:
    return h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_LIMIT)


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    http: h11.Connection = field(default_factory=_client)

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
                    return await self._exchange(key, c, request, body, reused=True)
                except _Closed:
                    pass  # a kept connection the receiver had closed: a new one, once
            try:
                c = await self._connect(target, key)
            except OSError as e:
                error = f"ConnectError: {errors.clip(e, 200)}"  # the next checked address, if any
                continue
            try:
                return await self._exchange(key, c, request, body, reused=False)
            except _Closed:
                return "RemoteProtocolError: the connection closed without an answer"
        return error

    @staticmethod
    def _request(host: str, path: str, body: bytes, headers: dict[str, str]) -> h11.Request:
        try:
            fields = [(b"Host", host.encode("ascii")), *_FIELDS, (b"Content-Length", b"%d" % len(body)),
                      *((k.encode("ascii"), v.encode("ascii")) for k, v in headers.items())]
            return h11.Request(method="POST", target=path or "/", headers=fields)
        except (h11.LocalProtocolError, UnicodeEncodeError) as e:  # never: the URL is parsed, the headers ours
            raise errors.invalid(f"a webhook request's head is not HTTP/1.1: {errors.clip(e, 200)}") from None

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

    async def _exchange(self, key: tuple[str, int], c: _Connection, request: h11.Request, body: bytes, *,
                        reused: bool) -> int | str:
        """Write the request, read the answer's head and at most ANSWER_LIMIT bytes of its body; the
        connection is kept when h11 says it may carry the next request. _Closed when the connection
        ended before any byte of the answer came."""
        http = c.http
        keep = False
        came = 0  # bytes of the answer received
        try:
            try:
                c.writer.write(b"".join((http.send(request), http.send(h11.Data(data=body)),
                                         http.send(h11.EndOfMessage()))))
                await c.writer.drain()
                answer: h11.Response | None = None
                while answer is None:  # a cycle starts with nothing unread (see _body): read first
                    # at most HEAD_LIMIT + 1 bytes before the final answer's head is whole: h11 refuses
                    # a head it has not parsed in that many
                    if came > HEAD_LIMIT:  # 1xx answers, parsed, fill it
                        return f"RemoteProtocolError: the answer's head is longer than {HEAD_LIMIT} bytes"
                    data = await c.reader.read(HEAD_LIMIT + 1 - came)
                    if not data and not came:
                        raise _Closed
                    came += len(data)
                    http.receive_data(data)  # b"": the receiver closed
                    while (event := http.next_event()) is not h11.NEED_DATA:
                        if type(event) is h11.Response:
                            answer = event
                            break
                        # an InformationalResponse (1xx): the final answer follows
            except ConnectionError as e:
                if reused and not came:
                    raise _Closed from None
                return f"RemoteProtocolError: {type(e).__name__}: {errors.clip(e, 200)}"
            except h11.RemoteProtocolError as e:
                unread, closed = http.trailing_data
                if closed:
                    return f"RemoteProtocolError: the answer ended in its head: {errors.clip(unread, 80)}"
                return f"RemoteProtocolError: the answer is not HTTP/1.1: {errors.clip(e, 200)}"
            except OSError as e:
                return f"NetworkError: {type(e).__name__}: {errors.clip(e, 200)}"
            # a body without Content-Length or chunks ends only when the receiver closes (RFC 9112,
            # 6.3): that connection is never kept, so the body is not read; h11 frames the others
            # (a 204 or 304 has none whatever its headers say)
            if answer.status_code in (204, 304) or any(
                    name in (b"content-length", b"transfer-encoding") for name, _ in answer.headers):
                try:
                    keep = await self._body(c)
                except (OSError, h11.RemoteProtocolError):
                    pass  # the status has come; the rest of the answer is not needed
            return answer.status_code
        finally:
            if keep:
                self._give_back(key, c)
            else:
                c.close()

    @staticmethod
    async def _body(c: _Connection) -> bool:
        """Read the answer's body, at most about ANSWER_LIMIT bytes: whether it was read whole and the
        connection is ready for the next request (then its next cycle has begun)."""
        http = c.http
        limit = push.ANSWER_LIMIT
        read = 0
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                http.receive_data(await c.reader.read(max(1, limit + 1 - read)))
            elif type(event) is h11.Data:
                read += len(event.data)
                if read > limit:
                    return False
            elif type(event) is h11.EndOfMessage:
                break
            else:
                return False
        if http.our_state is h11.DONE and http.their_state is h11.DONE and not http.trailing_data[0]:
            http.start_next_cycle()
            return True
        return False  # Connection: close, HTTP/1.0, or bytes after the answer
