"""gRPC-Web on the public port: `buf curl --protocol grpcweb` (npm @bufbuild/buf) and raw HTTP/1.1
requests (binary and text, unary and server streaming), the same authentication and errors as
native gRPC, CORS for configured origins only, malformed bodies refused before any call."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import uuid
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2
from conftest import apply_agent
from test_buf_lint import buf as buf_binary
from test_buf_lint import image_of
from test_one_port import create_session, public_port

from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2

pytestmark = pytest.mark.timeout(180)

GET = "/kagent.api.v1alpha1.SessionService/GetSession"
STREAM = "/lf.a2a.v1.A2AService/SendStreamingMessage"
ALICE = {"authorization": "Bearer alice-token"}


def framed(message: Any) -> bytes:
    data = message.SerializeToString()
    return b"\0" + struct.pack(">I", len(data)) + data


def frames(body: bytes) -> list[tuple[int, bytes]]:
    out = []
    while body:
        flag, length = body[0], struct.unpack(">I", body[1:5])[0]
        out.append((flag, body[5:5 + length]))
        body = body[5 + length:]
    return out


def trailer(body: bytes) -> dict[str, str]:
    flag, data = frames(body)[-1]
    assert flag == 0x80
    return dict(line.split(":", 1) for line in data.decode().strip().split("\r\n"))


async def call(http: httpx.AsyncClient, base: str, path: str, body: bytes, *, text: bool = False,
               headers: dict[str, str] | None = None) -> httpx.Response:
    content_type = "application/grpc-web-text" if text else "application/grpc-web+proto"
    return await http.post(f"{base}{path}", content=base64.b64encode(body) if text else body,
                           headers={"content-type": content_type, "x-grpc-web": "1", **(headers or {})})


async def test_grpc_web_binary_and_text_with_the_api_s_own_auth_and_errors(store, sim, database_url):
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url) as public:
        base = f"http://127.0.0.1:{public.port}"
        session = await create_session(f"127.0.0.1:{public.port}")
        request = framed(sessions_pb2.GetSessionRequest(session_id=session.id))
        async with httpx.AsyncClient(timeout=30) as http:
            # binary, unary: one data frame, then the trailer
            r = await call(http, base, GET, request, headers=ALICE)
            assert r.status_code == 200 and r.headers["content-type"].startswith("application/grpc-web")
            got = frames(r.content)
            assert got[0][0] == 0 and sessions_pb2.GetSessionResponse.FromString(got[0][1]).session.id == session.id
            assert trailer(r.content)["grpc-status"] == "0"
            # text: the same, base64
            r = await call(http, base, GET, request, text=True, headers=ALICE)
            body = base64.b64decode(r.content)
            assert sessions_pb2.GetSessionResponse.FromString(frames(body)[0][1]).session.id == session.id
            # no token: UNAUTHENTICATED, trailers-only, short
            r = await call(http, base, GET, request)
            assert r.headers["grpc-status"] == "16" and len(r.headers["grpc-message"]) < 200
            # another user's Session: NOT_FOUND, as over native gRPC
            r = await call(http, base, GET, request, headers={"authorization": "Bearer bob-token"})
            assert r.headers["grpc-status"] == "5"
            # malformed bodies: INVALID_ARGUMENT before any call
            for bad in (request[:-1], request + b"\0", b"\x01" + request[1:], b"\0\0", b"\0\0\0\0\xff" + b"x"):
                r = await call(http, base, GET, bad, headers=ALICE)
                assert r.headers["grpc-status"] == "3", (bad, r.headers)
            r = await http.post(f"{base}{GET}", content=b"%%% not base64",
                                headers={"content-type": "application/grpc-web-text", **ALICE})
            assert r.headers["grpc-status"] == "3"
            # unknown methods and client streaming: UNIMPLEMENTED
            r = await call(http, base, "/kagent.api.v1alpha1.SessionService/Nope", request, headers=ALICE)
            assert r.headers["grpc-status"] == "12"
            # no Origin allowed by default: a cross-origin page is refused, its preflight too
            r = await call(http, base, GET, request, headers={**ALICE, "origin": "https://elsewhere.example"})
            assert r.status_code == 403
            r = await http.options(f"{base}{GET}", headers={"origin": "https://elsewhere.example",
                                                            "access-control-request-method": "POST"})
            assert r.status_code == 403
        assert (await store.get_session(session.id, "alice")).state.name == "READY"  # nothing changed it


async def test_grpc_web_server_streaming_and_cors_for_a_configured_origin(store, sim, database_url):
    await apply_agent(store, sim)
    origin = "https://app.example"
    async with public_port(store, sim, database_url, **{"server.corsOrigins": [origin]}) as public:
        base = f"http://127.0.0.1:{public.port}"
        session = await create_session(f"127.0.0.1:{public.port}")
        async with httpx.AsyncClient(timeout=60) as http:
            r = await http.options(f"{base}{STREAM}", headers={
                "origin": origin, "access-control-request-method": "POST",
                "access-control-request-headers": "authorization,content-type,x-grpc-web"})
            assert r.status_code == 204 and r.headers["access-control-allow-origin"] == origin
            assert "authorization" in r.headers["access-control-allow-headers"]
            message = a2a_pb2.Message(message_id=str(uuid.uuid4()), role=a2a_pb2.ROLE_USER, context_id=session.id,
                                      parts=[a2a_pb2.Part(text="hello over grpc-web")])
            r = await call(http, base, STREAM, framed(a2a_pb2.SendMessageRequest(
                tenant="kagent/my-first-agent", message=message)), headers={**ALICE, "origin": origin})
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
            assert "grpc-status" in r.headers["access-control-expose-headers"]
            events = [a2a_pb2.StreamResponse.FromString(data) for flag, data in frames(r.content) if flag == 0]
            assert len(events) >= 2 and trailer(r.content)["grpc-status"] == "0", r.content[-200:]
            states = [e.status_update.status.state for e in events if e.HasField("status_update")]
            assert a2a_pb2.TASK_STATE_COMPLETED in states or any(
                e.task.status.state == a2a_pb2.TASK_STATE_COMPLETED for e in events if e.HasField("task"))


@pytest.mark.clause("RT-1")
async def test_buf_curl_over_grpc_web(store, sim, database_url, tmp_path):
    """`buf curl --protocol grpcweb`, over HTTP/1.1 and HTTP/2 (h2c), with and without a token (the schema from the protos'
    image: reflection is a bidirectional stream, which gRPC-Web cannot carry)."""
    binary = str(buf_binary())
    image = await asyncio.to_thread(image_of, tmp_path)
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url) as public:
        address = f"127.0.0.1:{public.port}"
        session = await create_session(address)

        async def buf_curl(*headers: str, http2: bool = False) -> Any:
            args = [binary, "curl", "--protocol", "grpcweb", "--schema", str(image), *[a for h in headers for a in ("-H", h)],
                    *(["--http2-prior-knowledge"] if http2 else []),
                    "-d", json.dumps({"session_id": session.id}), f"http://{address}{GET}"]
            return await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)

        proc = await buf_curl("Authorization: Bearer alice-token")
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        assert json.loads(out)["session"]["id"] == session.id
        proc = await buf_curl()
        out, err = await proc.communicate()
        assert proc.returncode != 0 and "unauthenticated" in err.decode().lower(), err.decode()
        # over HTTP/2 (h2c, prior knowledge): the port's HTTP app answers it, not grpcio
        proc = await buf_curl("Authorization: Bearer alice-token", http2=True)
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        assert json.loads(out)["session"]["id"] == session.id
        proc = await buf_curl(http2=True)
        out, err = await proc.communicate()
        assert proc.returncode != 0 and "unauthenticated" in err.decode().lower(), err.decode()


async def test_grpc_web_honours_grpc_timeout_and_a_client_that_goes_away_ends_its_stream(store, sim, database_url):
    """Calls are served by the API's handlers in process (no gRPC hop): `grpc-timeout` is the call's
    deadline there (DEADLINE_EXCEEDED in the trailer), and a client that hangs up ends the handler's
    stream (grpc.health.v1's Watch, which would otherwise stream forever)."""
    from grpc_health.v1 import health_pb2

    watch = "/grpc.health.v1.Health/Watch"
    async with public_port(store, sim, database_url) as public:
        base = f"http://127.0.0.1:{public.port}"
        body = framed(health_pb2.HealthCheckRequest(service=""))
        async with httpx.AsyncClient(timeout=30) as http:
            started = asyncio.get_running_loop().time()
            r = await call(http, base, watch, body, headers={**ALICE, "grpc-timeout": "400m"})
            assert asyncio.get_running_loop().time() - started < 10
            got = frames(r.content)
            assert health_pb2.HealthCheckResponse.FromString(got[0][1]).status == health_pb2.HealthCheckResponse.SERVING
            assert trailer(r.content)["grpc-status"] == "4"  # DEADLINE_EXCEEDED
            assert not public.grpc_web.streams
            # no deadline: the stream stays open until the client goes away
            async with http.stream("POST", f"{base}{watch}", content=body, headers={
                    "content-type": "application/grpc-web+proto", **ALICE}) as r:
                first = await anext(r.aiter_raw())
                assert first[0] == 0
                assert len(public.grpc_web.streams) == 1
            for _ in range(200):
                if not public.grpc_web.streams:
                    break
                await asyncio.sleep(0.05)
            assert not public.grpc_web.streams, "the stream outlived its client"
            # a malformed grpc-timeout: INVALID_ARGUMENT before any call
            r = await call(http, base, watch, body, headers={**ALICE, "grpc-timeout": "soon"})
            assert r.headers["grpc-status"] == "3"
