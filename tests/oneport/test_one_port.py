"""The public port (server.address): every protocol on one listener, through real clients nobody
here wrote (grpcio's stubs, the a2a-sdk's resolver and clients, httpx, `buf curl` when present),
and bad input on the shared port answered at the protocol level while the port keeps serving."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2
from conftest import apply_agent, make_settings, running_worker
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from test_buf_lint import buf as buf_binary

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.api.public import PublicPort

pytestmark = pytest.mark.timeout(180)

ALICE = (("authorization", "Bearer alice-token"),)
BINDINGS = ["GRPC", "JSONRPC", "HTTP+JSON"]
FLOOD, CAP = 100, 32  # half-sent requests beyond the connection cap


@contextlib.asynccontextmanager
async def public_port(store: Any, sim: Any, database_url: str, **overrides: Any) -> AsyncIterator[PublicPort]:
    settings = make_settings(**{"a2a.push.allowPrivateTargets": True, **overrides})
    async with running_worker(settings, database_url, store, sim):
        public = PublicPort(settings, store, address="127.0.0.1:0", runtime=sim)
        await public.start()
        # the Actors report through the one port too; on a TLS port through the private socket, as `serve`
        sim.taskstore_address = public.private.grpc_address if public.tls else f"127.0.0.1:{public.port}"
        try:
            yield public
        finally:
            await public.stop(0)


async def create_session(address: str) -> sessions_pb2.Session:
    async with grpc.aio.insecure_channel(address) as ch:
        r = await sessions_pb2_grpc.SessionServiceStub(ch).CreateSession(
            sessions_pb2.CreateSessionRequest(request_id=str(uuid.uuid4()),
                                              agent=common_pb2.ResourceReference(namespace="kagent",
                                                                                 name="my-first-agent")),
            metadata=ALICE, timeout=60)
        return r.session


async def raw(port: int, data: bytes, *, read_for: float = 3.0) -> bytes:
    """Send `data` on a new connection and read what comes back until the server closes or `read_for`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    got = b""
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(read_for):
            while chunk := await reader.read(65536):
                got += chunk
    writer.close()
    return got


def frame_types(data: bytes) -> list[int]:
    """The types of the HTTP/2 frames a server sent."""
    types, pos = [], 0
    while pos + 9 <= len(data):
        types.append(data[pos + 3])
        pos += 9 + int.from_bytes(data[pos:pos + 3], "big")
    return types


async def grpc_still_serves(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as ch:
        r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert r.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.clause("RT-1")
async def test_native_grpc_a2a_bindings_cards_and_health_share_one_listener(store, sim, database_url):
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url) as public:
        address = f"127.0.0.1:{public.port}"
        base = f"http://{address}"
        # native gRPC: a kagent service, health and reflection through grpcio's own stubs
        session = await create_session(address)
        async with grpc.aio.insecure_channel(address) as ch:
            got = await sessions_pb2_grpc.SessionServiceStub(ch).GetSession(
                sessions_pb2.GetSessionRequest(session_id=session.id), metadata=ALICE, timeout=30)
            assert got.session.id == session.id
            health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            stream = reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
            services = [s.name async for r in stream for s in r.list_services_response.service]
            assert "kagent.api.v1alpha1.SessionService" in services and "lf.a2a.v1.A2AService" in services
        async with httpx.AsyncClient(timeout=60) as http:
            # HTTP health for probes, without a token
            assert (await http.get(f"{base}/healthz")).status_code == 200
            assert (await http.get(f"{base}/readyz")).status_code == 200
            # the card, resolved by the a2a-sdk from this port; every interface it names is this port
            resolver = A2ACardResolver(http, f"{base}/api/a2a/kagent/my-first-agent")
            card = await resolver.get_agent_card(http_kwargs={"headers": {"Authorization": "Bearer alice-token"}})
            ports = {urlsplit(i.url if "//" in i.url else f"//{i.url}").port for i in card.supported_interfaces}
            assert ports == {public.port}
            assert sorted(i.protocol_binding for i in card.supported_interfaces) == sorted(BINDINGS)
            # a turn on the Session over each binding, the a2a-sdk's client dialling the card as it is
            for n, binding in enumerate(BINDINGS):
                config = ClientConfig(streaming=False, supported_protocol_bindings=[binding], httpx_client=http,
                                      grpc_channel_factory=lambda url: grpc.aio.insecure_channel(url))
                client = ClientFactory(config).create(card)
                from a2a.client import ClientCallContext

                context = ClientCallContext(service_parameters={"authorization": "Bearer alice-token"}, timeout=60)
                message = a2a_pb2.Message(message_id=str(uuid.uuid4()), role=a2a_pb2.ROLE_USER,
                                          context_id=session.id, parts=[a2a_pb2.Part(text=f"hello {n}")])
                events = [e async for e in client.send_message(
                    a2a_pb2.SendMessageRequest(message=message), context=context)]
                assert events, binding
                await client.close()
        # unauthenticated on every protocol: UNAUTHENTICATED / 401, short
        async with grpc.aio.insecure_channel(address) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await sessions_pb2_grpc.SessionServiceStub(ch).GetSession(
                    sessions_pb2.GetSessionRequest(session_id=session.id), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        async with httpx.AsyncClient(timeout=30) as http:
            r = await http.get(f"{base}/api/a2a/kagent/my-first-agent/.well-known/agent-card.json")
            assert r.status_code == 401 and len(r.text) < 200
            # the web console is not on this port (a listener of its own: docs/operating.md), with or
            # without a token: none of its pages, no login form, no cookie
            for path in ("/", "/login", "/sessions", "/jobs"):
                for headers in ({}, {"Authorization": "Bearer alice-token"}):
                    r = await http.get(f"{base}{path}", headers=headers)
                    assert r.status_code in (401, 404) and "set-cookie" not in r.headers, (path, r.status_code)
                    assert "<form" not in r.text and "csrf" not in r.text.lower()


@pytest.mark.clause("RT-2")
async def test_clients_only_ever_see_the_public_port_never_an_actor_address(store, sim, database_url):
    """The card, the Session and a turn's answer name this port only; what the control plane
    derives an Actor's private A2A address from (its name and UID) appears nowhere a
    client reads, and the turn reaches the Actor all the same."""
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url) as public:
        address = f"127.0.0.1:{public.port}"
        session = await create_session(address)
        async with httpx.AsyncClient(timeout=60) as http:
            card = await http.get(f"http://{address}/api/a2a/kagent/my-first-agent/.well-known/agent-card.json",
                                  headers={"Authorization": "Bearer alice-token"})
            urls = [i["url"] for i in card.json()["supportedInterfaces"]]
            assert urls and all(f"127.0.0.1:{public.port}" in u for u in urls), urls
            r = await http.post(f"http://{address}/api/a2a/kagent/my-first-agent/jsonrpc",
                                headers={"Authorization": "Bearer alice-token", "A2A-Version": "1.0"},
                                json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                                    "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                                                "contextId": session.id, "parts": [{"text": "hi"}]}}})
            assert r.status_code == 200 and "result" in r.json(), r.text
        async with grpc.aio.insecure_channel(address) as ch:
            again = (await sessions_pb2_grpc.SessionServiceStub(ch).GetSession(
                sessions_pb2.GetSessionRequest(session_id=session.id), metadata=ALICE, timeout=30)).session
        row = await store.get_session(session.id, "alice")
        assert row.actor_uid  # the turn ran on an Actor the control plane dialled
        seen = card.text + r.text + str(session) + str(again)
        for secret in (row.actor_name, row.actor_uid):  # (the atespace is the namespace, public anyway)
            assert secret not in seen, secret


async def test_bad_input_on_the_shared_port_is_refused_and_the_port_keeps_serving(store, sim, database_url):
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url, **{"server.httpHeaderTimeout": 2.0,
                                                         "a2a.maxMessageBytes": 64 * 1024}) as public:
        port = public.port
        address = f"127.0.0.1:{port}"
        # HTTP/1.1 garbage: 400 from the HTTP side, connection closed
        answer = await raw(port, b"\x16\x03\x01garbage that is not HTTP at all\r\n\r\n")
        assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer[:80]
        # the HTTP/2 preface followed by junk: grpcio's GOAWAY (PROTOCOL_ERROR), nothing else
        answer = await raw(port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64)
        assert b"Traceback" not in answer
        # non-gRPC h2c (a plain GET with prior knowledge) is the HTTP app's, over HTTP/2
        proc = await asyncio.create_subprocess_exec(
            "curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{http_version}", "--max-time", "10",
            "--http2-prior-knowledge", "-H", "Authorization: Bearer alice-token",
            f"http://{address}/api/a2a/kagent/my-first-agent/.well-known/agent-card.json",
            stdout=asyncio.subprocess.PIPE) if shutil.which("curl") else None
        if proc is not None:
            out, _ = await proc.communicate()
            assert out.decode() == "200 2", (out, proc.returncode)
        # HTTP/2 whose first request's header block is junk: grpcio's answer (the stream reset), no traceback
        headers = b"\0\0\x05\x01\x05\0\0\0\x01" + b"\xff" * 5  # HEADERS, END_STREAM|END_HEADERS, bad HPACK
        answer = await raw(port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0\0\0\x04\0\0\0\0\0" + headers)
        assert b"Traceback" not in answer and {0x3, 0x7} & set(frame_types(answer)), answer[:80]  # RST_STREAM/GOAWAY
        # a head larger than the HTTP side accepts: 4xx, no traceback
        answer = await raw(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n")
        assert answer == b"" or answer[:12] in (b"HTTP/1.1 400", b"HTTP/1.1 431"), answer[:80]
        # a body over the limit: 413 before it is read
        answer = await raw(port, b"POST /api/a2a/kagent/my-first-agent/jsonrpc HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 b"Content-Type: application/json\r\nAuthorization: Bearer alice-token\r\n"
                                 b"Content-Length: 99999999\r\n\r\n{")
        assert answer.startswith(b"HTTP/1.1 413"), answer[:80]
        # the Host check (DNS rebinding)
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.get(f"http://{address}/api/a2a/kagent/my-first-agent/.well-known/agent-card.json",
                               headers={"Host": "evil.example", "Authorization": "Bearer alice-token"})
            assert r.status_code == 400
        # slowloris: half a head, then silence: 408 and closed at server.httpHeaderTimeout
        answer = await raw(port, b"GET /healthz HTTP/1.1\r\nHost: 127", read_for=6.0)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        # silence before the first byte: closed at the same deadline
        answer = await raw(port, b"", read_for=6.0)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        # half the preface, then silence: closed too
        answer = await raw(port, b"PRI * HTTP/2.0\r\n", read_for=6.0)
        assert b"Traceback" not in answer
        await grpc_still_serves(address)
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(f"http://{address}/healthz")).status_code == 200


async def test_a_flood_at_the_connection_cap_never_keeps_a_grpc_client_out(store, sim, database_url):
    """At server.httpMaxConnections, new connections close the oldest ones still waiting for their
    request; a new gRPC client gets in and is answered."""
    async with public_port(store, sim, database_url, **{"server.httpMaxConnections": CAP}) as public:
        port = public.port
        socks = []
        try:
            for _ in range(FLOOD):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                socks.append(s)
            await asyncio.sleep(0.5)
            assert public.front is not None and public.front.connections() <= CAP
            await grpc_still_serves(f"127.0.0.1:{port}")
        finally:
            for s in socks:
                s.close()


async def test_buf_curl_native_grpc_through_the_port(store, sim, database_url):
    """`buf curl` (npm @bufbuild/buf) calls GetSession over native gRPC, reflection resolving the schema."""
    binary = str(buf_binary())
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url) as public:
        address = f"127.0.0.1:{public.port}"
        session = await create_session(address)
        out = await asyncio.to_thread(subprocess.run, [
            binary, "curl", "--protocol", "grpc", "--http2-prior-knowledge",
            "-H", "Authorization: Bearer alice-token", "-d", json.dumps({"session_id": session.id}),
            f"http://{address}/kagent.api.v1alpha1.SessionService/GetSession"], capture_output=True, text=True,
            timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["session"]["id"] == session.id


@pytest.mark.quiet_horizon
async def test_lifecycle_event_streams_are_served_on_the_port(store, sim, database_url):
    """The resumable event streams (/v1/events, /v1/sessions/{id}/events) are on the API port with the
    API's authentication: a caller without a token gets 401, the owner reads the created and ready
    events of a Session made over native gRPC on the same port, and `Last-Event-ID` resumes after one."""
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url) as public:
        address = f"127.0.0.1:{public.port}"
        session = await create_session(address)
        url = f"http://127.0.0.1:{public.port}/v1/sessions/{session.id}/events"
        async with httpx.AsyncClient(timeout=20) as http:
            assert (await http.get(url)).status_code == 401

            async def read_events(headers: dict[str, str], n: int) -> list[tuple[str, str]]:
                got: list[tuple[str, str]] = []
                async with http.stream("GET", url, headers={"authorization": "Bearer alice-token", **headers}) as r:
                    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                    event_id = ""
                    async for line in r.aiter_lines():
                        if line.startswith("id:"):
                            event_id = line[3:].strip()
                        elif line.startswith("data:"):
                            got.append((event_id, json.loads(line[5:])["type"]))
                            if len(got) == n:
                                break
                return got

            both = await read_events({}, 2)
            assert [t for _, t in both] == ["created", "ready"]
            after = await read_events({"last-event-id": both[0][0]}, 1)
            assert after == [both[1]]
        await grpc_still_serves(address)


async def test_http2_to_the_http_app_stalled_bodies_are_reset_and_protocol_errors_end_the_connection(
        store, sim, database_url):
    """An h2c connection served by the HTTP app (its first request is not gRPC), driven by the `h2`
    library's client: a request whose body stops is reset at server.httpHeaderTimeout; a frame that
    breaks the protocol is answered with GOAWAY; the port keeps serving gRPC and HTTP."""
    import h2.config
    import h2.connection
    import h2.events

    async with public_port(store, sim, database_url, **{"server.httpHeaderTimeout": 2.0}) as public:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        conn.initiate_connection()
        reader, writer = await asyncio.open_connection("127.0.0.1", public.port)

        async def events_until(kind: type, seconds: float) -> list[Any]:
            seen: list[Any] = []
            async with asyncio.timeout(seconds):
                while not any(isinstance(e, kind) for e in seen):
                    data = await reader.read(65536)
                    if not data:
                        break
                    seen += conn.receive_data(data)
                    writer.write(conn.data_to_send())
            return seen

        base = [(b":scheme", b"http"), (b":authority", b"127.0.0.1"), (b"authorization", b"Bearer alice-token")]
        # the HTTP app answers over HTTP/2
        conn.send_headers(1, [(b":method", b"GET"), (b":path", b"/healthz"), *base], end_stream=True)
        writer.write(conn.data_to_send())
        got = await events_until(h2.events.StreamEnded, 10)
        assert any(isinstance(e, h2.events.ResponseReceived) and (b":status", b"200") in e.headers for e in got)
        # a body that stops after its first piece: reset at the deadline, not held
        conn.send_headers(3, [(b":method", b"POST"), (b":path", b"/mcp"), *base,
                              (b"content-type", b"application/json"), (b"accept", b"application/json")])
        conn.send_data(3, b'{"jsonrpc": "2.0", ')
        writer.write(conn.data_to_send())
        started = asyncio.get_running_loop().time()
        got = await events_until(h2.events.StreamReset, 15)
        assert any(isinstance(e, h2.events.StreamReset) and e.stream_id == 3 for e in got), got
        assert asyncio.get_running_loop().time() - started < 12
        # DATA on stream 0 breaks the protocol: GOAWAY, the connection ends
        writer.write(b"\0\0\x01\0\0\0\0\0\0x")
        got = await events_until(h2.events.ConnectionTerminated, 10)
        assert any(isinstance(e, h2.events.ConnectionTerminated) for e in got), got
        writer.close()
        await grpc_still_serves(f"127.0.0.1:{public.port}")
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(f"http://127.0.0.1:{public.port}/healthz")).status_code == 200
