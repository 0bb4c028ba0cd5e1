"""The process runtime's isolation levels, from inside: a program that tries to leave its sandbox
(escape_process.py) runs as an Actor at every level this machine has. Under gvisor and namespaces
every attempt fails and egress goes only where the Actor's persisted policy allows, with the
credential headers the proxy adds; under none the suite says plainly what a plain process reaches.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sessionq.db.operator_store import PROCESS_RUNTIME_APPLICATION
from sessionq.runtime.base import ActorState, Code, EgressRule, SubstrateError
from sessionq.runtime.process import ProcessSubstrate
from sessionq.runtime.process.sandbox import APPLICATION_NAME, Isolation, actor_uid, unavailable
from tests.process.conftest import ATESPACE, LEVELS, TESTS, config, wait_for
from tests.tls_pair import TestCA

ESCAPE = str(Path(__file__).with_name("escape_process.py"))
ORIGIN_NAME = "origin.sessionq.test"
SECRET = "Bearer origin-secret-7f3a"
UNMATCHED = "blocked.sessionq.test"
TLS_PORT = 8443
SANDBOXED = [p for p in LEVELS if p.values[0] != Isolation.NONE]  # type: ignore[attr-defined]
WARM = [pytest.param(0, id="cold"), pytest.param(1, id="warm")]  # runtime.process.warmInterpreters


def _targets(rt: ProcessSubstrate, database_url: str, other: Path, config_file: Path) -> dict[str, Any]:
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    host = str(info.get("host") or "127.0.0.1")
    port = int(info.get("port") or 5432)
    writes = [str(rt.root / "escaped.txt"), str(config_file.parent / "escaped.txt")]
    if rt.isolation != Isolation.NONE:  # a plain process as root would really write these
        writes += ["/escaped.txt", f"{TESTS}/escaped.txt", f"{sys.prefix}/escaped.txt"]
    return {
        "other_actor": str(other),
        "runtime_root": str(rt.root),
        "config": str(config_file),
        "database_host": "127.0.0.1" if host.startswith("/") else host,
        "database_port": port,
        "database_socket": f"{host}/.s.PGSQL.{port}" if host.startswith("/") else "",
        "runtime_pid": os.getpid(),
        "writes": writes,
        "unmatched_name": UNMATCHED,
        "allowed_url": f"http://{ORIGIN_NAME}:8080/hello",
    }


async def _run_escape(rt: ProcessSubstrate, database_url: str, tmp_path: Path, name: str = "escaper",
                      rules: list[EgressRule] | None = None) -> tuple[str, dict[str, Any]]:
    """Start the escape program as an Actor with another Actor's files and sessionq's configuration
    beside its own; returns its UID and its report."""
    other = rt.root / "actors" / str(uuid.uuid4()) / "data"
    other.mkdir(parents=True)
    (other / "memory.json").write_text("another session's secret")
    config_file = rt.root.parent / "sessionq.yaml"
    config_file.write_text("database:\n  url: postgresql://secret@db/sessionq\n")
    await rt.create_actor_template(ATESPACE, name, "local/escape:1", command=[sys.executable], args=[ESCAPE])
    targets = _targets(rt, database_url, other, config_file)
    actor = await rt.create_actor(ATESPACE, name, f"{ATESPACE}/{name}", env={
        "ESCAPE_TARGETS": json.dumps(targets), "SESSIONQ_WORKLOAD_TOKEN": "sqw.test.token"})
    await rt.create_egress_policy(ATESPACE, name, actor.uid, rules if rules is not None else [
        EgressRule("http", ORIGIN_NAME, 8080, {"Authorization": SECRET})])
    await rt.warm_ready(120)  # (a warm sandbox, when the runtime keeps one, is ready: it is taken)
    await rt.resume_actor(ATESPACE, name, actor.uid)
    report = rt.data_dir(actor.uid) / "escape.json"
    await wait_for(report.exists, timeout=60, what="the escape program's report")
    return actor.uid, json.loads(report.read_text())


_origins = itertools.count()


def _veth_addresses() -> tuple[str, str]:
    """The host's and the origin's address on a /30 of 10.214.0.0/16 for one origin's veth pair,
    derived from this process's pid and a count: two suites running at once do not collide."""
    block = (os.getpid() * 8 + next(_origins) % 8) % (1 << 14)
    base = ipaddress.IPv4Address("10.214.0.0") + block * 4
    return str(base + 1), str(base + 2)


@contextlib.contextmanager
def _origin_in_netns(tmp_path: Path, port: int, tls: bool = False) -> Iterator[tuple[str, Path]]:
    """An HTTP server (HTTPS with `tls`: origin.pem and origin.key of `tmp_path`) in a network namespace of its own,
    reached over a veth pair, standing for an allowed origin: it answers 200 and records each
    request's headers. Yields (its address, the record)."""
    if os.geteuid() != 0:
        pytest.skip("the origin's network namespace needs root")
    tag = uuid.uuid4().hex[:6]
    ns, host_if, ns_if = f"sqo-{tag}", f"sqh{tag}", f"sqn{tag}"
    host_ip, origin_ip = _veth_addresses()
    record = tmp_path / f"origin-{port}-requests.jsonl"
    server = tmp_path / f"origin-{port}.py"
    wrap = ""
    if tls:
        wrap = (f"import ssl\nctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
                f"ctx.load_cert_chain({str(tmp_path / 'origin.pem')!r}, {str(tmp_path / 'origin.key')!r})\n"
                "httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)\n")
    server.write_text(
        "import http.server, json, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        f"        open({str(record)!r}, 'a').write(json.dumps(dict(self.headers)) + '\\n')\n"
        "        body = b'hello from the origin'\n"
        "        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()\n"
        "        self.wfile.write(body)\n"
        "    def log_message(self, *a): pass\n"
        f"httpd = http.server.HTTPServer(('0.0.0.0', {port}), H)\n"
        f"{wrap}"
        "httpd.serve_forever()\n"
    )
    steps = [
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
        ["ip", "link", "set", ns_if, "netns", ns],
        ["ip", "addr", "add", f"{host_ip}/30", "dev", host_if],
        ["ip", "link", "set", host_if, "up"],
        ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{origin_ip}/30", "dev", ns_if],
        ["ip", "netns", "exec", ns, "ip", "link", "set", ns_if, "up"],
        ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"],
    ]
    proc = None
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, str(server)])
        yield origin_ip, record
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An allowed origin over plain HTTP at ORIGIN_NAME:8080 (`_origin_in_netns`)."""
    with _origin_in_netns(tmp_path, 8080) as found:
        yield found


def _certificates(tmp_path: Path) -> Path:
    """A CA made for the test and the origin's certificate for ORIGIN_NAME signed by it (origin.pem,
    origin.key); returns the CA's PEM file."""
    ca = TestCA()
    key, cert = ca.issue(ORIGIN_NAME, dns=[ORIGIN_NAME], server=True)
    (tmp_path / "origin.pem").write_bytes(cert)
    (tmp_path / "origin.key").write_bytes(key)
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.pem)
    return ca_file


async def _fetch(rt: ProcessSubstrate, uid: str, url: str) -> dict[str, Any]:
    data = rt.data_dir(uid)
    answer = data / "fetch.out"
    answer.unlink(missing_ok=True)
    (data / "fetch").write_text(url)
    await wait_for(answer.exists, timeout=30, what="the fetch's answer")
    return json.loads(answer.read_text())  # type: ignore[no-any-return]


def test_the_runtime_names_its_level_as_the_operator_store_reads_it() -> None:
    assert APPLICATION_NAME == PROCESS_RUNTIME_APPLICATION


def test_unavailable_levels_say_why() -> None:
    assert unavailable(Isolation.NONE) is None
    for level in (Isolation.GVISOR, Isolation.NAMESPACES):
        reason = unavailable(level)
        assert reason is None or level.value in reason


@pytest.mark.clause("RT-9")
@pytest.mark.clause("RT-4")
@pytest.mark.parametrize("warm", WARM)
@pytest.mark.parametrize("level", SANDBOXED)
async def test_every_escape_attempt_fails_in_a_sandbox(
    level: Isolation, warm: int, database_url: str, tmp_path: Path
) -> None:
    """Each attempt, in a sandbox started for the Actor (cold) and in a warm one (warm.py)."""
    runtime = ProcessSubstrate(database_url, config(tmp_path / "state" / "runtime", level, slots=4,
                                                    stop_grace=1.0, warm_interpreters=warm))
    await runtime.open()
    try:
        uid, report = await _run_escape(runtime, database_url, tmp_path)
        assert runtime.started_warm(uid) is bool(warm)
        reached = {k for k, v in report.items() if v["reached"]}
        assert reached == {"write_data", "write_tmp", "processes", "environment", "uid"}, report
        assert report["processes"]["value"] <= 3, "only the sandbox's own processes are visible"
        assert (runtime.data_dir(uid) / "inside.txt").read_text() == "escaped", "/data is the durable directory"
        assert not (runtime.root / "escaped.txt").exists()
        assert "403" in report["fetch_refused"]["error"] and "egress policy" in report["fetch_refused"]["error"]
        user = report["uid"]["value"]
        assert user == runtime.sandbox_user(uid) and user >= 200_000, "an unprivileged user of its own"
        if not warm:
            assert user == actor_uid(uid)
        env = report["environment"]["value"]
        # PWD: the sandbox's working directory; LC_CTYPE: Python's own coercion of the C locale
        assert set(env) - {"PWD", "LC_CTYPE"} == {
            "PATH", "HOME", "ESCAPE_TARGETS", "SESSIONQ_WORKLOAD_TOKEN", "SESSIONQ_DATA_DIR", "SESSIONQ_ACTOR",
            "SESSIONQ_A2A_PORT", "SESSIONQ_READY_PORT", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
            "NO_PROXY", "no_proxy",
            # a warm sandbox listened on the readiness port before the hand-over: its socket's number
            *(("SESSIONQ_READY_FD",) if warm else ()),
        }, "exactly the Actor's variables and what the agent kit needs"
        assert SECRET not in json.dumps(report), "the credential header is never visible inside"
    finally:
        await runtime.close()


async def test_isolation_none_allows_what_the_runtimes_user_can(database_url: str, tmp_path: Path) -> None:
    """What `none` allows, plainly: the Actor is a process of the runtime's user; it reads another
    Actor's durable directory, the runtime's state and configuration, sees the host's processes and
    writes wherever that user may; its egress policy is stored, not enforced."""
    runtime = ProcessSubstrate(database_url, config(tmp_path / "state" / "runtime", Isolation.NONE, slots=4,
                                                    stop_grace=1.0, warm_interpreters=0))
    await runtime.open()
    try:
        _, report = await _run_escape(runtime, database_url, tmp_path)
        for reached in ("other_actor", "runtime_root", "config", "host_process", "write_0", "write_1"):
            assert report[reached]["reached"], (reached, report[reached])
        assert report["processes"]["value"] > 3
        (runtime.root / "escaped.txt").unlink()
        (tmp_path / "state" / "escaped.txt").unlink()
    finally:
        await runtime.close()


@pytest.mark.clause("EGR-1")
@pytest.mark.clause("EGR-2")
@pytest.mark.clause("EGR-3")
@pytest.mark.clause("EGR-4")
@pytest.mark.clause("EGR-5")
@pytest.mark.clause("RT-9")
@pytest.mark.parametrize("warm", WARM)
@pytest.mark.parametrize("level", SANDBOXED)
async def test_the_allowed_origin_gets_the_request_with_the_credential_header_and_an_update_applies(
    level: Isolation, warm: int, database_url: str, tmp_path: Path, origin: tuple[str, Path]
) -> None:
    address, record = origin
    runtime = ProcessSubstrate(database_url, config(tmp_path / "state" / "runtime", level, slots=4,
                                                    stop_grace=1.0, warm_interpreters=warm))
    runtime.egress_hosts[ORIGIN_NAME] = address  # the origin's DNS name, without a DNS server
    await runtime.open()
    try:
        uid, report = await _run_escape(runtime, database_url, tmp_path)
        assert report["fetch_allowed"]["reached"], report["fetch_allowed"]
        assert report["fetch_allowed"]["value"] == "200 hello from the origin"
        seen = [json.loads(line) for line in record.read_text().splitlines()]
        assert seen[-1]["Authorization"] == SECRET, "the proxy added the deciding rule's credential header"
        assert SECRET not in json.dumps(report["environment"])
        # an update of the policy applies to the running Actor's next request
        await runtime.update_egress_policy(ATESPACE, "escaper", uid, [EgressRule("http", "other.sessionq.test", 80)])
        after = await _fetch(runtime, uid, f"http://{ORIGIN_NAME}:8080/hello")
        assert not after["reached"] and "403" in after["error"], after
        await runtime.update_egress_policy(ATESPACE, "escaper", uid, [
            EgressRule("http", ORIGIN_NAME, 8080, {"Authorization": SECRET})])
        again = await _fetch(runtime, uid, f"http://{ORIGIN_NAME}:8080/hello")
        assert again["reached"], again
        # EGR-4, EGR-5: the allowed origin by its address, or by a short name, is refused by the proxy
        literal = await _fetch(runtime, uid, f"http://{address}:8080/hello")
        assert not literal["reached"] and "DNS names only" in literal["error"], literal
        short = await _fetch(runtime, uid, "http://origin:8080/hello")
        assert not short["reached"] and "403" in short["error"], short
        # EGR-3: two protocols on one host and port never reach the proxy: the update is refused
        with pytest.raises(SubstrateError) as refused:
            await runtime.update_egress_policy(ATESPACE, "escaper", uid, [
                EgressRule("http", ORIGIN_NAME, 8080), EgressRule("tls_passthrough", ORIGIN_NAME, 8080)])
        assert refused.value.code == Code.INVALID_ARGUMENT
        still = await _fetch(runtime, uid, f"http://{ORIGIN_NAME}:8080/hello")
        assert still["reached"], "the refused update changed nothing"
        assert json.loads(record.read_text().splitlines()[-1])["Authorization"] == SECRET
        assert (await runtime.get_actor(ATESPACE, "escaper")).state == ActorState.RUNNING
    finally:
        await runtime.close()


@pytest.mark.clause("EGR-1")
@pytest.mark.clause("EGR-2")
@pytest.mark.clause("RT-9")
@pytest.mark.parametrize("warm", WARM)
@pytest.mark.parametrize("level", SANDBOXED)
async def test_the_proxy_originates_tls_to_an_https_origin_with_the_credential_header(
    level: Isolation, warm: int, database_url: str, tmp_path: Path
) -> None:
    """An https origin whose rule carries a credential header: the agent sends its request to the
    proxy in the clear (http://name:8443/...), the proxy adds the header and opens TLS to the origin,
    verifying its certificate against runtime.process.egressCaFile (a CA made here). The origin, an
    HTTPS server in its own network namespace, gets the request over TLS with the header; the agent
    never holds the secret, and a CONNECT tunnel to that origin (where the proxy could not add it)
    is refused."""
    ca_file = _certificates(tmp_path)
    with _origin_in_netns(tmp_path, TLS_PORT, tls=True) as (address, record):
        runtime = ProcessSubstrate(database_url, config(
            tmp_path / "state" / "runtime", level, slots=4, stop_grace=1.0, warm_interpreters=warm,
            egress_ca_file=str(ca_file)))
        runtime.egress_hosts[ORIGIN_NAME] = address
        await runtime.open()
        try:
            uid, report = await _run_escape(runtime, database_url, tmp_path, rules=[
                EgressRule("https", ORIGIN_NAME, TLS_PORT, {"Authorization": SECRET})])
            answer = await _fetch(runtime, uid, f"http://{ORIGIN_NAME}:{TLS_PORT}/hello")
            assert answer == {"reached": True, "value": "200 hello from the origin"}, answer
            seen = [json.loads(line) for line in record.read_text().splitlines()]
            assert len(seen) == 1 and seen[0]["Authorization"] == SECRET, "over TLS, with the proxy's header"
            assert seen[0]["Host"] == f"{ORIGIN_NAME}:{TLS_PORT}"
            tunnel = await _fetch(runtime, uid, f"https://{ORIGIN_NAME}:{TLS_PORT}/hello")
            assert not tunnel["reached"] and "403" in tunnel["error"], tunnel  # its reason: the decide test below
            assert len(record.read_text().splitlines()) == 1, "the refused tunnel reached nothing"
            assert SECRET not in json.dumps(report)
        finally:
            await runtime.close()


async def test_the_proxy_verifies_the_https_origin_it_opens_tls_to(
    database_url: str, tmp_path: Path
) -> None:
    """Without the origin's CA among those the proxy trusts, its certificate is refused: 502, and the
    origin gets no request (so no credential header)."""
    levels = [p.values[0] for p in SANDBOXED if unavailable(p.values[0]) is None]  # type: ignore[attr-defined]
    if not levels:
        pytest.skip("no sandbox level on this machine")
    _certificates(tmp_path)
    with _origin_in_netns(tmp_path, TLS_PORT, tls=True) as (address, record):
        runtime = ProcessSubstrate(database_url, config(tmp_path / "state" / "runtime", levels[0], slots=2,
                                                        stop_grace=1.0, warm_interpreters=0))
        runtime.egress_hosts[ORIGIN_NAME] = address
        await runtime.open()
        try:
            uid, _ = await _run_escape(runtime, database_url, tmp_path, rules=[
                EgressRule("https", ORIGIN_NAME, TLS_PORT, {"Authorization": SECRET})])
            answer = await _fetch(runtime, uid, f"http://{ORIGIN_NAME}:{TLS_PORT}/hello")
            assert not answer["reached"] and "502" in answer["error"] and "could not be reached" in answer["error"]
            assert not record.exists() or record.read_text() == ""
        finally:
            await runtime.close()


async def test_an_egress_ca_file_that_is_not_pem_is_refused_at_open(database_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    runtime = ProcessSubstrate(database_url, config(tmp_path / "rt", Isolation.NONE, egress_ca_file=str(bad)))
    with pytest.raises(SubstrateError) as refused:
        await runtime.open()
    assert refused.value.code == Code.FAILED_PRECONDITION
    assert "runtime.process.egressCaFile" in refused.value.message and "not a certificate" not in refused.value.message
    await runtime.close()


@pytest.mark.clause("EGR-4")
async def test_the_proxy_refuses_literal_addresses_and_unlisted_ports() -> None:
    from sessionq.runtime.process.egress import decide

    rules = [EgressRule("http", "api.example.com", 80, {}), EgressRule("https", "llm.example.com", 443,
                                                                          {"x-api-key": "k"})]
    assert decide(rules, "API.example.com.", 80, tunnel=False).rule is not None
    assert decide(rules, "api.example.com", 8080, tunnel=False).rule is None
    assert decide(rules, "93.184.216.34", 80, tunnel=False).reason.endswith("DNS names only")
    tls = decide(rules, "llm.example.com", 443, tunnel=False)
    assert tls.rule is not None and tls.tls, "an https origin with credential headers: the proxy opens TLS"
    refused = decide(rules, "llm.example.com", 443, tunnel=True)
    assert refused.rule is None and "in the clear" in refused.reason


async def test_a_command_the_sandbox_does_not_show_fails_clearly(
    database_url: str, tmp_path: Path
) -> None:
    levels = [p.values[0] for p in SANDBOXED if unavailable(p.values[0]) is None]  # type: ignore[attr-defined]
    if not levels:
        pytest.skip("no sandbox level on this machine")
    hidden = tmp_path / "hidden-tool"
    hidden.write_text("#!/bin/sh\necho hi\n")
    hidden.chmod(0o755)
    runtime = ProcessSubstrate(database_url, config(tmp_path / "rt", levels[0], slots=2, warm_interpreters=0))
    await runtime.open()
    try:
        await runtime.create_actor_template(ATESPACE, "t", "x", command=[str(hidden)])
        actor = await runtime.create_actor(ATESPACE, "a", f"{ATESPACE}/t")
        with pytest.raises(SubstrateError) as e:
            await runtime.resume_actor(ATESPACE, "a", actor.uid)
        assert e.value.code == Code.FAILED_PRECONDITION and "not visible inside the sandbox" in e.value.message
        assert (await runtime.get_actor(ATESPACE, "a")).state == ActorState.CRASHED
    finally:
        await runtime.close()

