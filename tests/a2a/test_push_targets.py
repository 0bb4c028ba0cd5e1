"""Where a push notification may go, and where its connection goes: every IPv6 form that leads to a
non-public IPv4 address is refused, and a delivery connects to the very address it checked (the
name is resolved once; TLS still checks the certificate for the name). Real servers on loopback;
the resolver is a parameter so that a test can answer differently at each look-up."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from sessionq.domain import push
from sessionq.errors import SessionqError
from tests.tls_pair import tls_pair

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("url", [
    "http://[::127.0.0.1]/hook",  # IPv4-compatible
    "http://[::ffff:0:127.0.0.1]/hook",  # IPv4-translated
    "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped
    "http://[::ffff:10.0.0.1]/hook",
    "http://[64:ff9b::7f00:1]/hook",  # NAT64 of 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/latest",  # NAT64 of 169.254.169.254
    "http://[64:ff9b:1::808:808]/hook",  # local-use NAT64: never globally routed
    "http://[2002:7f00:1::]/hook",  # 6to4 of 127.0.0.1
    "http://[2002:c0a8:101::1]/hook",  # 6to4 of 192.168.1.1
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",  # Teredo, client 127.0.0.1
    "http://[::8.8.8.8]/hook",  # IPv4-compatible, even of a public address: deprecated, not routed
])
async def test_ipv6_forms_that_embed_a_private_ipv4_address_are_refused(url: str) -> None:
    with pytest.raises(SessionqError) as refused:
        await push.check_target(url, allow_private=False)
    assert refused.value.sqlstate == "SQ400" and "private" in refused.value.message


@pytest.mark.parametrize("url", [
    "http://[64:ff9b::808:808]/hook",  # NAT64 of 8.8.8.8
    "http://[2002:808:808::1]/hook",  # 6to4 of 8.8.8.8
    "http://[2606:4700:4700::1111]/hook",
])
async def test_ipv6_forms_of_public_addresses_are_accepted(url: str) -> None:
    await push.check_target(url, allow_private=False)


def test_each_embedded_form_names_the_ipv4_address_it_leads_to() -> None:
    v6 = ipaddress.IPv6Address
    assert push.embedded_ipv4(v6("::ffff:10.1.2.3")) == ipaddress.IPv4Address("10.1.2.3")
    assert push.embedded_ipv4(v6("64:ff9b::7f00:1")) == ipaddress.IPv4Address("127.0.0.1")
    assert push.embedded_ipv4(v6("2002:7f00:1::")) == ipaddress.IPv4Address("127.0.0.1")
    assert push.embedded_ipv4(v6("2001:0:4136:e378:8000:63bf:80ff:fffe")) == ipaddress.IPv4Address("127.0.0.1")
    assert push.embedded_ipv4(v6("2606:4700:4700::1111")) is None


# -- the connection goes to the checked address -------------------------------------------------------------


@dataclass
class Receiver:
    """An HTTP receiver on one loopback address: it records each request's head and answers 200."""

    host: str
    port: int = 0
    ssl_context: ssl.SSLContext | None = None
    requests: list[dict[str, str]] = field(default_factory=list)
    server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, self.host, self.port, ssl=self.ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            await reader.readexactly(int(headers.get("content-length", "0")))
            headers["peer"] = writer.get_extra_info("peername")[0]
            headers["sockname"] = writer.get_extra_info("sockname")[0]
            self.requests.append(headers)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def receivers_on(*hosts: str, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[list[Receiver]]:
    """One receiver on each loopback address, all on the same port (a URL names one port)."""
    for _ in range(20):
        first = Receiver(hosts[0], ssl_context=ssl_context)
        await first.start()
        started = [first]
        try:
            for host in hosts[1:]:
                r = Receiver(host, first.port, ssl_context=ssl_context)
                await r.start()
                started.append(r)
        except OSError:  # the port is taken on another address: try another one
            for r in started:
                await r.stop()
            continue
        try:
            yield started
        finally:
            for r in started:
                await r.stop()
        return
    raise RuntimeError("no port free on every address")


class Resolver:
    """A name server under the test's control: the n-th look-up gets answers[n] (the last one after)."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[push.IPAddress]:
        answer = self.answers[min(len(self.lookups), len(self.answers) - 1)]
        self.lookups.append(host)
        return [ipaddress.ip_address(a) for a in answer]


@dataclass(frozen=True)
class OneAllowedAddress(push.TargetPolicy):
    """A policy that allows 127.0.0.1 only: it stands for "a public address" on a machine whose
    receivers all listen on loopback; every other address is private."""

    def refuses(self, ip: push.IPAddress) -> bool:
        return ip != ipaddress.ip_address("127.0.0.1")


def delivery(url: str) -> dict[str, Any]:
    return {"url": url, "payload": {"statusUpdate": {"taskId": "t"}}, "token": "tok"}


async def test_a_name_that_resolves_elsewhere_after_the_check_is_still_sent_to_the_checked_address() -> None:
    """The name answers an allowed address to the check, then a private one: the delivery goes to
    the address checked, never to the private one, and the name is looked up once."""
    async with receivers_on("127.0.0.1", "127.0.0.2") as (allowed, private):
        resolver = Resolver(["127.0.0.1"], ["127.0.0.2"])
        policy = OneAllowedAddress(resolve=resolver)
        url = f"http://rebind.test:{allowed.port}/hook"
        async with push.delivery_client(10.0) as http:
            ok, status, error = await push.post(http, delivery(url), policy, 10.0)
            assert (ok, status, error) == (True, 200, None)
            assert resolver.lookups == ["rebind.test"]
            assert private.requests == []
            assert [(r["sockname"], r["host"]) for r in allowed.requests] == [
                ("127.0.0.1", f"rebind.test:{allowed.port}")]
            # the next delivery looks the name up again and checks what it gets: refused, nothing sent
            ok, status, error = await push.post(http, delivery(url), policy, 10.0)
            assert not ok and status is None and error is not None and "private" in error
            assert resolver.lookups == ["rebind.test", "rebind.test"]
            assert private.requests == [] and len(allowed.requests) == 1


async def test_a_name_with_one_private_address_among_its_answers_is_refused_whole() -> None:
    async with receivers_on("127.0.0.1", "127.0.0.2") as (allowed, private):
        policy = OneAllowedAddress(resolve=Resolver(["127.0.0.1", "127.0.0.2"]))
        async with push.delivery_client(10.0) as http:
            ok, _, error = await push.post(http, delivery(f"http://two.test:{allowed.port}/"), policy, 10.0)
        assert not ok and error is not None and "private" in error
        assert allowed.requests == [] and private.requests == []


async def test_without_the_private_check_the_name_is_still_resolved_once_and_its_answer_dialled() -> None:
    """a2a.push.allowPrivateTargets: nothing is refused, but the connection still goes to the
    address looked up (the first that accepts a connection), not to a second look-up's."""
    async with receivers_on("127.0.0.3", "127.0.0.4") as (first, second):
        resolver = Resolver(["127.0.0.5", "127.0.0.3"], ["127.0.0.4"])  # nothing listens on .5
        policy = push.TargetPolicy(allow_private=True, resolve=resolver)
        async with push.delivery_client(10.0) as http:
            ok, status, _ = await push.post(http, delivery(f"http://local.test:{first.port}/"), policy, 10.0)
        assert ok and status == 200 and resolver.lookups == ["local.test"]
        assert [r["sockname"] for r in first.requests] == ["127.0.0.3"] and second.requests == []


# -- TLS keeps the name ----------------------------------------------------------------------------------


async def test_over_tls_the_checked_address_is_dialled_and_the_certificate_checked_for_the_name(
    tmp_path: Path,
) -> None:
    server_ctx, client_ctx, names = tls_pair(tmp_path, "push.test")
    async with receivers_on("127.0.0.1", ssl_context=server_ctx) as (receiver,):
        policy = OneAllowedAddress(resolve=Resolver(["127.0.0.1"]))
        async with httpx.AsyncClient(verify=client_ctx, trust_env=False,
                                     limits=httpx.Limits(max_keepalive_connections=0)) as http:
            ok, status, error = await push.post(http, delivery(f"https://push.test:{receiver.port}/h"), policy, 10.0)
            assert (ok, status, error) == (True, 200, None)
            assert names == ["push.test"]  # SNI: the name, not the address
            assert receiver.requests[0]["host"] == f"push.test:{receiver.port}"
            # the same address under a name the certificate does not cover: refused by TLS
            ok, status, error = await push.post(http, delivery(f"https://other.test:{receiver.port}/h"), policy, 10.0)
            assert not ok and status is None and error is not None and "certificate" in error.lower()
            assert len(receiver.requests) == 1
