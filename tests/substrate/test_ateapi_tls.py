"""TLS to the Substrate: server verification with a CA file and a server name, mTLS with a client
certificate; a wrong CA or a missing client certificate is one clear log line and a retryable
UNAVAILABLE, never a crash (issue 17)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import grpc
import pytest

from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from sessionq.runtime.ateapi.server import start_server
from sessionq.runtime.base import Code, SubstrateError
from sessionq.runtime.simulator import SimulatedSubstrate
from tests.tls_pair import TestCA


@pytest.mark.timeout(120)
async def test_mtls_and_refused_certificates(database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ca = TestCA("substrate test CA")
    other_ca = TestCA("someone else's CA")
    server_key, server_cert = ca.issue("substrate", dns=["substrate.test"])
    client_key, client_cert = ca.issue("sessionq")
    files = {"ca": ca.pem, "other-ca": other_ca.pem, "client.key": client_key, "client.crt": client_cert}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    creds = grpc.ssl_server_credentials([(server_key, server_cert)], root_certificates=ca.pem,
                                        require_client_auth=True)
    async with SimulatedSubstrate(database_url) as sim:
        server, port, _ = await start_server(sim, "127.0.0.1:0", credentials=creds)
        base: dict[str, Any] = {"address": f"127.0.0.1:{port}", "tls": True, "server_name": "substrate.test",
                                "call_timeout": 5.0}
        good = SubstrateOptions(**base, ca_file=str(tmp_path / "ca"), cert_file=str(tmp_path / "client.crt"),
                                key_file=str(tmp_path / "client.key"))
        good.validate()
        wrong_ca = SubstrateOptions(**base, ca_file=str(tmp_path / "other-ca"), cert_file=str(tmp_path / "client.crt"),
                                    key_file=str(tmp_path / "client.key"))
        no_client_cert = SubstrateOptions(**base, ca_file=str(tmp_path / "ca"))
        try:
            client = SubstrateClient(good)
            await client.open()
            try:
                assert len((await client.list_workers(3, "")).items) == 3
                assert await client.check_health() is None
            finally:
                await client.close()
            for options in (wrong_ca, no_client_cert):
                caplog.clear()
                client = SubstrateClient(options)
                await client.open()
                try:
                    with caplog.at_level(logging.ERROR, logger="sessionq.runtime.ateapi.client"):
                        for _ in range(3):
                            with pytest.raises(SubstrateError) as e:
                                await client.list_workers(3, "")
                            assert e.value.code == Code.UNAVAILABLE, e.value.message  # retryable
                    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
                    assert len(lines) == 1, lines
                    assert f"127.0.0.1:{port}" in lines[0] and ("TLS" in lines[0] or "credentials" in lines[0]), lines
                finally:
                    await client.close()
        finally:
            await server.stop(0)


def test_tls_options_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="certFile and keyFile go together"):
        SubstrateOptions(address="a:1", tls=True, cert_file=str(tmp_path)).validate()
    with pytest.raises(ValueError, match=r"tls\.enabled is false"):
        SubstrateOptions(address="a:1", ca_file="/x").validate()
