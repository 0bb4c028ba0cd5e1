"""The HTTP side of the API port (server.address) against malformed and hostile requests, through real
sockets: malformed bodies get each binding's client error with a short message and no traceback in
the log; a chunked body past the limit is refused at once; a foreign Host is refused."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest
from conftest import apply_agent
from harness import a2a_env, settings_for_a2a

from sessionq.api.agentcard import AgentCardServer
from sessionq.api.auth import Authenticator

pytestmark = pytest.mark.timeout(180)

AUTH = {"Authorization": "Bearer alice-token", "A2A-Version": "1.0", "Content-Type": "application/json"}
JSONRPC_CLIENT_ERRORS = {-32700, -32600, -32601, -32602, -32001}


def send_message(text: str = "hi", message_id: str = "m-1", request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "SendMessage",
            "params": {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}}


def malformed_bodies() -> dict[str, tuple[bytes, bytes]]:
    """name -> (JSON-RPC body, HTTP+JSON message:send body)."""
    def both(rpc: dict[str, Any] | bytes, encoding: str = "utf-8") -> tuple[bytes, bytes]:
        if isinstance(rpc, bytes):
            return rpc, rpc
        return json.dumps(rpc).encode(encoding), json.dumps(rpc["params"]).encode(encoding)

    deep_array = b"[" * 100_000 + b"]" * 100_000
    deep_object = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    return {
        "NUL in a text": both(send_message("hi\u0000there")),
        "NUL in the message id": both(send_message(message_id="m\u0000")),
        "a raw NUL byte": both(json.dumps(send_message()).replace("hi", "h\x00i").encode()),
        "100,000-deep array": both(deep_array),
        "100,000-deep object": both(b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":' + deep_object + b"}"),
        "65-deep params": both(send_message() | {"params": json.loads('{"a":' * 65 + "1" + "}" * 65)}),
        "UTF-16 with a BOM": both(send_message(), "utf-16"),
        "UTF-16-LE": both(send_message(), "utf-16-le"),
        "UTF-32": both(send_message(), "utf-32"),
        "Latin-1": both(json.dumps(send_message("caf\u00e9"), ensure_ascii=False).encode("latin-1")),
        "a lone surrogate": both(send_message("\ud800")),
        "a 5,000-digit id": both(b'{"jsonrpc":"2.0","id":' + b"1" * 5000 + b',"method":"GetTask","params":{}}'),
        "NaN id": both(b'{"jsonrpc":"2.0","id":NaN,"method":"GetTask","params":{"id":"x"}}'),
        "a huge text where a message belongs": both(send_message() | {"params": {"message": "X" * 100_000}}),
        "not JSON": both(b"{oops"),
        "a batch": both(b"[1, 2]"),
    }


async def counts(store: Any) -> tuple[int, int]:
    row = (await store._rows("SELECT (SELECT count(*) FROM sessionq.sessions) AS s,"
                             " (SELECT count(*) FROM sessionq.tasks) AS t"))[0]
    return row["s"], row["t"]


@pytest.mark.clause("A2A-1")
async def test_malformed_bodies_get_client_errors_short_messages_and_no_traceback(database_url, store, sim, caplog):
    caplog.set_level(logging.INFO)
    await apply_agent(store, sim)
    async with a2a_env(settings_for_a2a(), database_url, store, sim) as env:
        jsonrpc = f"{env.base}/api/a2a/kagent/my-first-agent/jsonrpc"
        rest = f"{env.base}/api/a2a/kagent/my-first-agent/rest"
        before = await counts(store)
        caplog.clear()
        wrong = []
        for name, (rpc_body, rest_body) in malformed_bodies().items():
            r = await env.http.post(jsonrpc, content=rpc_body, headers=AUTH)
            error = r.json().get("error") if r.status_code == 200 else None
            if error is None or error["code"] not in JSONRPC_CLIENT_ERRORS or len(r.text) > 2000:
                wrong.append(f"JSON-RPC {name}: {r.status_code} {r.text[:300]}")
            r = await env.http.post(f"{rest}/message:send", content=rest_body, headers=AUTH)
            if r.status_code != 400 or len(r.text) > 2000 or "INVALID_ARGUMENT" not in r.text:
                wrong.append(f"HTTP+JSON {name}: {r.status_code} {r.text[:300]}")
        for path in ("/tasks/a%00b", "/tasks/a%00b:cancel"):
            r = await (env.http.get if ":" not in path else env.http.post)(f"{rest}{path}", headers=AUTH)
            if r.status_code != 400:
                wrong.append(f"HTTP+JSON {path}: {r.status_code} {r.text[:300]}")
        assert not wrong, "\n".join(wrong)
        assert await counts(store) == before  # nothing was written

        # the log: no traceback and nothing at ERROR for any of it; a few short lines at most
        records = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore", "procrastinate"))]
        assert not [r for r in records if r.exc_info or r.levelno >= logging.ERROR], \
            [(r.name, r.getMessage()[:200]) for r in records if r.exc_info or r.levelno >= logging.ERROR]
        assert len(records) <= 5 and all(len(r.getMessage()) < 600 for r in records), \
            [(r.levelname, r.name, r.getMessage()[:200]) for r in records]


async def raw_request(port: int, head: bytes, body_chunks: Any, timeout: float = 30.0) -> tuple[bytes, int, float]:
    """Send `head`, then the chunks while the server reads them; returns (the answer, bytes of body
    sent, seconds until the answer came)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    sent = 0
    answer = b""
    try:
        writer.write(head)
        reading = asyncio.create_task(reader.read(65536))
        for chunk in body_chunks:
            if reading.done():
                break
            writer.write(chunk)
            sent += len(chunk)
            try:
                await asyncio.wait_for(writer.drain(), timeout)
            except (ConnectionError, TimeoutError):
                break
        answer = await asyncio.wait_for(reading, timeout)
        return answer, sent, time.monotonic() - started
    finally:
        writer.close()


@pytest.mark.parametrize("path", ["jsonrpc", "rest/message:send"])
async def test_a_chunked_body_past_the_limit_is_refused_at_once(database_url, store, sim, path):
    limit = 256 * 1024
    await apply_agent(store, sim)
    async with a2a_env(settings_for_a2a(), database_url, store, sim) as env:
        cards = AgentCardServer(store, env.api.auth, env.grpc_address, handler=env.api.a2a, max_body_bytes=limit)
        await cards.start("127.0.0.1:0")
        try:
            head = (f"POST /api/a2a/kagent/my-first-agent/{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Authorization: Bearer alice-token\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n").encode()
            piece = b" " * 65536
            chunks = (b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(100 * 16))  # 100 MiB, never all sent
            answer, sent, seconds = await raw_request(cards.port, head, chunks)
            assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
            assert b"larger than" in answer and len(answer) < 1000
            assert sent < 16 * 1024 * 1024, sent  # refused without reading the rest (socket buffers aside)
            assert seconds < 20
        finally:
            await cards.stop()


async def test_a_foreign_host_is_refused_and_the_configured_ones_answered(store, sim):
    await apply_agent(store, sim)
    auth = Authenticator({"alice-token": "alice"})
    card = "/api/a2a/kagent/my-first-agent/.well-known/agent-card.json"
    jsonrpc_get = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}})
    import httpx

    for allowed, hosts in (
        (None, {"127.0.0.1": 200, "localhost": 200, "[::1]": 200, "evil.example": 400, "127.0.0.1.nip.io": 400}),
        (["sessionq.example", "*.svc.cluster.local"],
         {"sessionq.example": 200, "api.ns.svc.cluster.local": 200, "127.0.0.1": 400, "evil.example": 400}),
    ):
        cards = AgentCardServer(store, auth, "127.0.0.1:8083", allowed_hosts=allowed)
        await cards.start("127.0.0.1:0")
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{cards.port}") as http:
                for host, status in hosts.items():
                    r = await http.get(card, headers={"Host": f"{host}:{cards.port}",
                                                      "Authorization": "Bearer alice-token"})
                    assert r.status_code == status, (allowed, host, r.text[:200])
                    if status == 400:
                        assert "allowedHosts" in r.text and host not in r.text and len(r.text) < 200
                    else:
                        assert f"{host}:{cards.port}" in r.text  # the card names the address it was reached by
                    r = await http.post("/api/a2a/kagent/my-first-agent/jsonrpc", content=jsonrpc_get,
                                        headers={"Host": host, **AUTH})
                    assert (r.status_code == 400) == (status == 400), (allowed, host, r.status_code)
        finally:
            await cards.stop()


async def test_requests_that_are_not_http_get_400_and_one_log_line(store, sim):
    cards = AgentCardServer(store, Authenticator({"alice-token": "alice"}), "127.0.0.1:8083")
    await cards.start("127.0.0.1:0")
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    collect = Collect()
    for name in ("uvicorn.error", "sessionq.http"):
        logging.getLogger(name).addHandler(collect)
    try:
        for garbage in (b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nbad header\r\n\r\n",
                        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64) * 20:
            reader, writer = await asyncio.open_connection("127.0.0.1", cards.port)
            writer.write(garbage)
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 400"), answer[:100]
        assert len(lines) <= 1, lines  # one line a minute, not one per request
    finally:
        for name in ("uvicorn.error", "sessionq.http"):
            logging.getLogger(name).removeHandler(collect)
        await cards.stop()


async def test_a_head_or_body_that_stops_arriving_is_cut_off_at_the_deadline(store, sim):
    await apply_agent(store, sim)
    cards = AgentCardServer(store, Authenticator({"alice-token": "alice"}), "127.0.0.1:8083", header_timeout=1.0)
    await cards.start("127.0.0.1:0")
    card = b"GET /api/a2a/kagent/my-first-agent/.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\n"

    async def ended_after(data: bytes) -> tuple[bytes, float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", cards.port)
        started = time.monotonic()
        writer.write(data)
        try:
            return await asyncio.wait_for(reader.read(), 30), time.monotonic() - started
        finally:
            writer.close()

    try:
        answer, seconds = await ended_after(b"")  # connects and says nothing
        assert answer.startswith(b"HTTP/1.1 408") and seconds < 10
        answer, seconds = await ended_after(card + b"X-Slow: ")  # half a head
        assert answer.startswith(b"HTTP/1.1 408") and seconds < 10
        body_stops = (b"POST /api/a2a/kagent/my-first-agent/jsonrpc HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Authorization: Bearer alice-token\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\":")
        answer, seconds = await ended_after(body_stops)
        assert answer == b"" and seconds < 10  # closed: the app never got a body to answer
        # a whole request, then a second one on the same connection after a pause shorter than the
        # keep-alive timeout: both answered
        reader, writer = await asyncio.open_connection("127.0.0.1", cards.port)
        try:
            for _ in range(2):
                writer.write(card + b"Authorization: Bearer alice-token\r\n\r\n")
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                assert head.startswith(b"HTTP/1.1 200"), head
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                await asyncio.sleep(0.5)
        finally:
            writer.close()
    finally:
        await cards.stop()
