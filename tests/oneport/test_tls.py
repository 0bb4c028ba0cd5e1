"""TLS on the public port (server.tls): every protocol over TLS through clients nobody here wrote
(grpcio's stubs with ssl_channel_credentials, `buf curl` over https, the mcp SDK and httpx, the
a2a-sdk resolving the card over https), a client of the wrong kind refused clearly on either kind
of port while the port keeps serving, and the certificate files checked at start."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import grpc
import httpx
import httpx2
import pytest
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.types import a2a_pb2
from conftest import apply_agent
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from test_buf_lint import buf as buf_binary
from test_buf_lint import image_of
from test_one_port import ALICE, BINDINGS, frame_types, public_port, raw

from sessionq import config
from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.config import ConfigError
from sessionq.oneport import tls_context
from tests.tls_pair import TestCA

pytestmark = pytest.mark.timeout(180)


def write_certificates(directory: Path) -> tuple[Path, Path, bytes]:
    """A test CA and a server certificate it signed for 127.0.0.1 and localhost: (cert file, key
    file, the CA's PEM)."""
    ca = TestCA()
    cert_file, key_file = ca.write(directory, "server", "localhost", dns=["localhost"], ips=["127.0.0.1"])
    (directory / "ca.crt").write_bytes(ca.pem)
    return cert_file, key_file, ca.pem


def tls_settings(directory: Path) -> tuple[dict[str, Any], bytes]:
    cert_file, key_file, ca_pem = write_certificates(directory)
    return {"server.tls.certFile": str(cert_file), "server.tls.keyFile": str(key_file)}, ca_pem


def client_context(ca_pem: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem.decode())


async def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(subprocess.run, list(args), capture_output=True, text=True, timeout=timeout)


@pytest.mark.clause("RT-1")
async def test_every_protocol_over_tls_through_clients_nobody_here_wrote(store, sim, database_url, tmp_path):
    overrides, ca_pem = tls_settings(tmp_path)
    credentials = grpc.ssl_channel_credentials(root_certificates=ca_pem)
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url, **overrides) as public:
        address = f"127.0.0.1:{public.port}"
        base = f"https://{address}"
        # native gRPC: grpcio's stubs over TLS (ALPN h2), the CA the only trust
        async with grpc.aio.secure_channel(address, credentials) as ch:
            created = await sessions_pb2_grpc.SessionServiceStub(ch).CreateSession(
                sessions_pb2.CreateSessionRequest(request_id=str(uuid.uuid4()), agent=common_pb2.ResourceReference(
                    namespace="kagent", name="my-first-agent")), metadata=ALICE, timeout=60)
            session = created.session
            got = await sessions_pb2_grpc.SessionServiceStub(ch).GetSession(
                sessions_pb2.GetSessionRequest(session_id=session.id), metadata=ALICE, timeout=30)
            assert got.session.id == session.id
            health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        # buf curl over https: native gRPC (the schema from reflection) and gRPC-Web (from the protos'
        # image: reflection is a bidirectional stream, which gRPC-Web cannot carry)
        binary = str(buf_binary())
        image = await asyncio.to_thread(image_of, tmp_path)
        for protocol, schema in (("grpc", []), ("grpcweb", ["--schema", str(image)])):
            out = await run(binary, "curl", "--protocol", protocol, *schema, "--cacert", str(tmp_path / "ca.crt"),
                            "-H", "Authorization: Bearer alice-token", "-d", json.dumps({"session_id": session.id}),
                            f"{base}/kagent.api.v1alpha1.SessionService/GetSession")
            assert out.returncode == 0, (protocol, out.stderr)
            assert json.loads(out.stdout)["session"]["id"] == session.id
        verify = client_context(ca_pem)
        # HTTP over TLS, HTTP/1.1 (ALPN http/1.1) and HTTP/2 (ALPN h2): health and the card
        for http2 in (False, True):
            async with httpx2.AsyncClient(verify=verify, http1=not http2, http2=http2, timeout=30) as http:
                r = await http.get(f"{base}/healthz")
                assert r.status_code == 200 and r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
                r = await http.get(f"{base}/api/a2a/kagent/my-first-agent/.well-known/agent-card.json",
                                   headers={"Authorization": "Bearer alice-token"})
                assert r.status_code == 200
                urls = [i["url"] for i in r.json()["supportedInterfaces"]]
                assert all(u.startswith(f"{base}/") for u in urls if "//" in u), urls  # https, this port
        # the a2a-sdk resolves the card over https and sends a turn on each binding, over TLS
        async with httpx.AsyncClient(verify=verify, timeout=60) as http:
            card = await A2ACardResolver(http, f"{base}/api/a2a/kagent/my-first-agent").get_agent_card(
                http_kwargs={"headers": {"Authorization": "Bearer alice-token"}})
            for n, binding in enumerate(BINDINGS):
                client = ClientFactory(ClientConfig(
                    streaming=False, supported_protocol_bindings=[binding], httpx_client=http,
                    grpc_channel_factory=lambda url: grpc.aio.secure_channel(url, credentials))).create(card)
                message = a2a_pb2.Message(message_id=str(uuid.uuid4()), role=a2a_pb2.ROLE_USER,
                                          context_id=session.id, parts=[a2a_pb2.Part(text=f"hello {n}")])
                events = [e async for e in client.send_message(a2a_pb2.SendMessageRequest(message=message), context=
                          ClientCallContext(service_parameters={"authorization": "Bearer alice-token"}, timeout=60))]
                assert events, binding
                await client.close()
        # the mcp SDK's client over https: a turn, then its memory on the second
        async with httpx2.AsyncClient(verify=verify, headers={"Authorization": "Bearer alice-token"},
                                      timeout=120) as http, \
                streamable_http_client(f"{base}/mcp", http_client=http) as (read, write), \
                ClientSession(read, write) as mcp:
            await mcp.initialize()
            first = await mcp.call_tool("invoke_agent", {"agent": "kagent/my-first-agent",
                                                         "task": "Remember the number 7."})
            assert not first.is_error, first.content
            context_id = first.structured_content["context_id"]
            second = await mcp.call_tool("invoke_agent", {"agent": "kagent/my-first-agent", "task":
                                                          "What number did I ask you to remember?",
                                                          "context_id": context_id})
            assert not second.is_error and "7" in second.structured_content["text"], second.content


async def test_a_client_of_the_wrong_kind_is_refused_clearly_and_the_port_keeps_serving(
        store, sim, database_url, tmp_path, caplog):
    overrides, ca_pem = tls_settings(tmp_path)
    credentials = grpc.ssl_channel_credentials(root_certificates=ca_pem)
    verify = client_context(ca_pem)

    async def tls_still_serves(address: str) -> None:
        async with grpc.aio.secure_channel(address, credentials) as ch:
            r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert r.status == health_pb2.HealthCheckResponse.SERVING
        async with httpx.AsyncClient(verify=verify, timeout=10) as http:
            assert (await http.get(f"https://{address}/healthz")).status_code == 200

    async with public_port(store, sim, database_url, **{**overrides, "server.httpHeaderTimeout": 2.0}) as public:
        address = f"127.0.0.1:{public.port}"
        # plaintext HTTP/1.1 to the TLS port: a 400 that says so, and closed
        answer = await raw(public.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400") and b"speaks TLS only" in answer, answer[:120]
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.get(f"http://{address}/healthz")
            assert r.status_code == 400 and "TLS" in r.text
        # plaintext HTTP/2 (prior knowledge): GOAWAY INADEQUATE_SECURITY saying why
        answer = await raw(public.port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        assert frame_types(answer) == [0x7], answer[:80]
        goaway = answer[9:]
        assert int.from_bytes(goaway[4:8], "big") == 0xC and b"TLS" in goaway[8:]
        # grpcio's plaintext stub: UNAVAILABLE at once, not a hang
        async with grpc.aio.insecure_channel(address) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
        # a TLS record that is no handshake, and a client that trusts another CA: closed, no traceback
        answer = await raw(public.port, b"\x16\x03\x01\x00\x05junk!" + b"\0" * 64)
        assert b"Traceback" not in answer and not answer.startswith(b"HTTP")
        other_ca = write_certificates(tmp_path / "other" if (tmp_path / "other").mkdir() is None else tmp_path)[2]
        async with httpx.AsyncClient(verify=client_context(other_ca), timeout=10) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get(f"https://{address}/healthz")
        # silence before the ClientHello, and half a ClientHello: closed at server.httpHeaderTimeout
        assert await raw(public.port, b"", read_for=6.0) == b""
        assert await raw(public.port, b"\x16\x03\x01\x02\x00\x01", read_for=6.0) == b""
        # every refused connection, failed handshakes included, has left the port's count
        assert public.front is not None
        async with asyncio.timeout(10):
            while public.front.connections():
                await asyncio.sleep(0.1)
        await tls_still_serves(address)
        # no traceback for any of them: failed handshakes are the clients' mistakes, not errors
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text[-2000:]
    async with public_port(store, sim, database_url) as public:
        address = f"127.0.0.1:{public.port}"
        # TLS clients to the plaintext port: a failed handshake, at once
        async with grpc.aio.secure_channel(address, credentials) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
        async with httpx.AsyncClient(verify=verify, timeout=10) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get(f"https://{address}/healthz")
        async with grpc.aio.insecure_channel(address) as ch:
            r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert r.status == health_pb2.HealthCheckResponse.SERVING


def test_the_certificate_files_are_checked_at_start(tmp_path):
    cert_file, key_file, _ = write_certificates(tmp_path)
    assert tls_context(str(cert_file), str(key_file)).minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(ConfigError, match=r"server\.tls\.certFile: cannot read .*missing\.crt: no such file"):
        tls_context(str(tmp_path / "missing.crt"), str(key_file))
    with pytest.raises(ConfigError, match=r"server\.tls\.keyFile: cannot read"):
        tls_context(str(cert_file), str(tmp_path))  # a directory: unreadable as a file
    (tmp_path / "garbage.crt").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="not a PEM certificate"):
        tls_context(str(tmp_path / "garbage.crt"), str(key_file))
    with pytest.raises(ConfigError, match="set both certFile and keyFile"):
        config.load(None, env={"SESSIONQ_SERVER__TLS__CERT_FILE": str(cert_file)})


async def test_serve_with_a_missing_certificate_says_so_in_one_line(database_url, tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sessionq.cli.main", "serve", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={
            "PATH": "/usr/bin:/bin", "SESSIONQ_DATABASE__URL": database_url, "SESSIONQ_SERVER__ADDRESS": "127.0.0.1:0",
            "SESSIONQ_SERVER__TLS__CERT_FILE": str(tmp_path / "missing.crt"),
            "SESSIONQ_SERVER__TLS__KEY_FILE": str(tmp_path / "missing.key")})
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode != 0
    text = err.decode()
    assert "server.tls.certFile: cannot read" in text and "missing.crt" in text, text
    assert "Traceback" not in text and len(text.strip().splitlines()) <= 2, text


async def test_the_cli_reaches_a_tls_port_with_tls_in_its_client_config(store, sim, database_url, tmp_path):
    """`sessionq agent apply` (its own process) over TLS: `tls: true` and `caFile` in the client
    config; without them the same command fails in one line and nothing is applied."""
    overrides, _ = tls_settings(tmp_path)  # (the CA's PEM is in tmp_path/ca.crt too)
    async with public_port(store, sim, database_url, **overrides) as public:
        spec = tmp_path / "agent.yaml"
        spec.write_text("name: over-tls\nnamespace: kagent\n")

        async def apply(client_config: str) -> tuple[int, str]:
            path = tmp_path / "client.yaml"
            path.write_text(client_config)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "sessionq.cli.main", "--token", "alice-token", "--timeout", "10",
                "agent", "apply", "--no-wait", "-f", str(spec), stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env={**os.environ, "SESSIONQ_CLIENT_CONFIG": str(path)})
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            return proc.returncode or 0, err.decode()

        code, err = await apply(f"server: 127.0.0.1:{public.port}\n")
        assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
        assert [a for a in await store.list_agents(None, None, 100) if a.name == "over-tls"] == []
        code, err = await apply(f"server: 127.0.0.1:{public.port}\ntls: true\ncaFile: {tmp_path / 'ca.crt'}\n")
        assert code == 0, err
        assert [a.name for a in await store.list_agents(None, None, 100) if a.name == "over-tls"] == ["over-tls"]
