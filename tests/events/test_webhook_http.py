"""The POSTs of a deliver_webhooks job (domain/delivery_http.py): HTTP/1.1 on connections kept
between POSTs. Real receivers on loopback answering raw bytes: the status decides, a connection is
kept only after an answer read whole that does not say `close`, a kept connection the receiver
closed is replaced without losing the attempt, a huge or endless answer is not read past its limit,
a receiver that never answers costs one deadline, and over TLS the checked address is dialled and
the certificate checked for the URL's name."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
import time
from collections.abc import AsyncIterator, Callable

from sessionq.domain import push
from sessionq.domain.delivery_http import HEAD_LIMIT, KeptConnections
from tests.tls_pair import tls_pair

LOOPBACK = push.TargetPolicy(allow_loopback=True)
BODY = b'{"type":"created"}'


class Raw:
    """A receiver answering each request with `answer(n)` (the n-th request, from 0): raw bytes,
    then it closes the connection if `close(n)`."""

    def __init__(self, answer: Callable[[int], bytes], close: Callable[[int], bool] = lambda n: False) -> None:
        self.answer = answer
        self.close = close
        self.requests: list[tuple[int, bytes, bytes]] = []  # (connection, head, body)
        self.connections = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                body = await reader.readexactly(length)
                n = len(self.requests)
                self.requests.append((conn, head, body))
                writer.write(self.answer(n))
                await writer.drain()
                if self.close(n):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def serving(r: Raw, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[Raw]:
    server = await asyncio.start_server(r.handle, "127.0.0.1", 0, ssl=ssl_context)
    r.port = server.sockets[0].getsockname()[1]
    async with server:
        yield r


async def test_the_status_decides_and_a_connection_is_kept_only_after_a_whole_answer():
    answers = [
        b"HTTP/1.1 200 OK\r\n\r\nok",  # no length: read until the receiver closes, not kept
        b"HTTP/1.1 204 No Content\r\n\r\n",  # no body (a 204 has none), kept
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",  # kept
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",  # chunked, kept
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n",  # the final status
        b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/elsewhere\r\nContent-Length: 0\r\n\r\n",  # not followed
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",  # not kept
    ]
    r = Raw(lambda n: answers[n], close=lambda n: n in (0, 6))
    async with serving(r):
        http = KeptConnections(keep=2)
        url = f"http://127.0.0.1:{r.port}/hook?x=1"
        outcomes = [await http.post(url, BODY, {"webhook-id": f"evt_{i}"}, LOOPBACK, 5) for i in range(len(answers))]
        await http.aclose()
    assert outcomes == [(True, 200, None), (True, 204, None), (True, 200, None), (True, 200, None),
                        (False, 500, "HTTP 500"), (False, 302, "HTTP 302"), (True, 200, None)]
    # the first answer had no length, so its connection was read to its end; the next ones shared one
    assert [conn for conn, _, _ in r.requests] == [1, 2, 2, 2, 2, 2, 2]
    head = r.requests[1][1].decode()
    assert head.startswith("POST /hook?x=1 HTTP/1.1\r\n") and f"Host: 127.0.0.1:{r.port}\r\n" in head
    assert "webhook-id: evt_1\r\n" in head and "Content-Type: application/json\r\n" in head
    assert all(body == BODY for _, _, body in r.requests)


async def test_a_kept_connection_the_receiver_closed_is_replaced_and_the_event_sent_once():
    """The receiver closes its side after every answer although it said nothing: the next POST
    finds the kept connection ended (before reuse, or on its first read) and sends its one request
    on a new connection."""
    r = Raw(lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", close=lambda n: True)
    async with serving(r):
        http = KeptConnections(keep=1)
        url = f"http://127.0.0.1:{r.port}/"
        for i in range(3):
            assert await http.post(url, BODY, {"webhook-id": f"evt_{i}"}, LOOPBACK, 5) == (True, 200, None)
            await asyncio.sleep(0.05)
        await http.aclose()
    assert len(r.requests) == 3 and r.connections == 3


async def test_a_huge_answer_is_not_read_and_a_silent_receiver_costs_one_deadline():
    huge = b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 65536
    r = Raw(lambda n: huge)
    async with serving(r):
        http = KeptConnections(keep=1)
        assert await http.post(f"http://127.0.0.1:{r.port}/", BODY, {}, LOOPBACK, 5) == (True, 200, None)
        await http.aclose()
    assert r.connections == 1

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        await asyncio.sleep(10)
        writer.close()

    garbage = Raw(lambda n: b"SSH-2.0-OpenSSH\r\n\r\n")
    async with serving(garbage):
        ok, status, error = await KeptConnections(0).post(f"http://127.0.0.1:{garbage.port}/", BODY, {}, LOOPBACK, 5)
        assert not ok and status is None and error is not None and "not HTTP/1.1" in error
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    async with server:
        started = time.monotonic()
        ok, status, error = await KeptConnections(0).post(
            f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/", BODY, {}, LOOPBACK, 0.5)
        assert time.monotonic() - started < 2
    assert (ok, status) == (False, None) and error == "no answer within 0.5s (webhooks.timeout)"


async def test_an_answer_that_cannot_carry_the_next_request_closes_its_connection():
    """HTTP/1.0, a chunked body past the read limit, and bytes after the answer: the status counts,
    the connection is not kept; a head past HEAD_LIMIT is not HTTP/1.1."""
    answers = [
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",  # HTTP/1.0: not kept
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(b"400\r\n" + b"x" * 1024 + b"\r\n" for _ in range(push.ANSWER_LIMIT // 1024 + 2))
        + b"0\r\n\r\n",  # more than ANSWER_LIMIT: not read whole, not kept
        b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",  # bytes after it: not kept
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",  # kept
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"y" * HEAD_LIMIT + b"\r\nContent-Length: 0\r\n\r\n",  # head too long
    ]
    r = Raw(lambda n: answers[n])
    async with serving(r):
        http = KeptConnections(keep=1)
        url = f"http://127.0.0.1:{r.port}/"
        outcomes = [await http.post(url, BODY, {}, LOOPBACK, 5) for _ in answers]
        await http.aclose()
    assert outcomes[:5] == [(True, 200, None), (True, 200, None), (True, 201, None), (True, 200, None),
                            (True, 200, None)]
    ok, status, error = outcomes[5]
    assert not ok and status is None and error is not None and "not HTTP/1.1" in error
    assert len(error) < 300  # the head is not echoed
    assert [conn for conn, _, _ in r.requests] == [1, 2, 3, 4, 4, 4]


async def test_a_refused_target_is_never_dialled():
    r = Raw(lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    async with serving(r):
        ok, status, error = await KeptConnections(1).post(f"http://127.0.0.1:{r.port}/", BODY, {},
                                                          push.TargetPolicy(), 5)
    assert not ok and status is None and error is not None and "loopback" in error
    assert r.requests == []


async def test_over_tls_the_checked_address_is_dialled_and_the_certificate_checked_for_the_name(tmp_path):
    server_ctx, client_ctx, names = tls_pair(tmp_path, "hook.test")
    lookups: list[str] = []

    async def resolve(host: str, port: int) -> list[push.IPAddress]:
        lookups.append(host)
        return [ipaddress.ip_address("127.0.0.1")]

    policy = push.TargetPolicy(allow_loopback=True, resolve=resolve)
    r = Raw(lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    async with serving(r, server_ctx):
        http = KeptConnections(keep=1, tls=client_ctx)
        assert await http.post(f"https://hook.test:{r.port}/h", BODY, {}, policy, 5) == (True, 200, None)
        assert await http.post(f"https://hook.test:{r.port}/h", BODY, {}, policy, 5) == (True, 200, None)
        assert names == ["hook.test"] and r.connections == 1  # SNI the name; the connection kept
        assert lookups == ["hook.test", "hook.test"]  # each attempt checks the name again
        # the same address under a name the certificate does not cover: refused by TLS
        other = KeptConnections(keep=1, tls=client_ctx)
        ok, status, error = await other.post(f"https://other.test:{r.port}/h", BODY, {}, policy, 5)
        assert not ok and status is None and error is not None and "certificate" in error.lower(), error
        await http.aclose()
        await other.aclose()
    assert len(r.requests) == 2
    assert f"Host: hook.test:{r.port}\r\n" in r.requests[0][1].decode()
