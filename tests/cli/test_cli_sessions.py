"""`sessionq session ...` (and `sessionq agent session ...`) against the in-process API.

The in-process server runs on the test's event loop, so the CLI runs in a thread
(`asyncio.to_thread(runner.invoke, ...)`), never directly.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from click.testing import CliRunner, Result
from sessionq.cli import session as cli_session
from sessionq.cli.client import Client, CliError, parse_duration
from sessionq.cli.main import main

SID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
CREATED = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


class Cli:
    """Runs `sessionq --server ADDRESS --token TOKEN ...` in a thread, isolated from any client config."""

    def __init__(self, address: str, home: Path) -> None:
        self.address = address
        empty = home / "empty-client.yaml"
        empty.write_text("{}\n")
        self.env = {"XDG_CONFIG_HOME": str(home / "xdg"), "SESSIONQ_CLIENT_CONFIG": str(empty),
                    "SESSIONQ_SERVER": None, "SESSIONQ_TOKEN": None}

    async def __call__(self, *args: str, token: str | None = "alice-token", budget: str = "10") -> Result:
        argv = ["--server", self.address, "--timeout", budget]
        if token:
            argv += ["--token", token]
        return await asyncio.to_thread(CliRunner().invoke, main, [*argv, *args], env=self.env)


async def prepared_agent(store: Any, name: str = "my-first-agent", namespace: str = "kagent") -> Any:
    """Apply an Agent and let the running worker prepare its revision.

    (conftest's `apply_agent` prepares in-line, which races the `worker` fixture's prepare job
    for the same revision: the loser's create_actor_template gets ALREADY_EXISTS and can mark the
    revision FAILED. The `api` fixture always runs a worker, so these tests wait for it instead.)"""
    from sessionq.domain.agents import compile_egress, parse_spec

    spec = parse_spec({"name": name, "namespace": namespace})
    await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                            compile_egress(spec), "alice")
    for _ in range(200):
        agent = await store.get_agent(namespace, name)
        if agent.latest_successful_revision_id:
            return agent
        await asyncio.sleep(0.05)
    raise AssertionError(f"agent {namespace}/{name} was not prepared within 10 s")


async def lifecycle(cli: Cli, *args: str) -> Result:
    """An explicit suspend/resume/delete. While the workers' automatic quiescence holds its claim
    (right after create or resume), the server answers ABORTED "being quiesced; retry after it is
    recorded" (Q-4); like a user, try again then."""
    for _ in range(100):
        result = await cli(*args)
        if result.exit_code == 1 and "is being quiesced" in result.stderr:
            await asyncio.sleep(0.1)
            continue
        return result
    raise AssertionError(f"{args}: the session stayed quiesced for 10 s")


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def one_error_line(result: Result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def table_rows(text: str) -> list[list[str]]:
    """The cells of a boxed table's rows (header first)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


@pytest.fixture
def cli(api: Any, tmp_path: Path) -> Cli:
    return Cli(api.address, tmp_path)


async def create(cli: Cli, *extra: str) -> dict[str, Any]:
    result = ok(await cli("session", "create", "--agent", "my-first-agent", "-o", "json", *extra))
    return json.loads(result.stdout)["session"]


@pytest.mark.clause("TUT-1")
async def test_tut1_session_part_create_json_prints_session_id_and_list_shows_ready(cli, store, sim):
    await prepared_agent(store)
    # the tutorial's spelling:
    #   kagent agent session create --agent my-first-agent -o json | jq -r .session.id
    result = ok(await cli("agent", "session", "create", "--agent", "my-first-agent", "-o", "json"))
    body = json.loads(result.stdout)
    session_id = body["session"]["id"]
    assert SID.match(session_id)
    assert body["session"]["state"] == "RUNTIME_STATE_READY"
    assert body["session"]["agent"] == {"namespace": "kagent", "name": "my-first-agent"}
    assert body["session"]["contextId"] == session_id  # camelCase field names
    assert result.stdout.startswith("{\n  \"session\": {\n    ")  # pretty-printed, indent 2

    # `kagent agent session list`: the boxed table, READY, CREATED like 2026-08-31T15:02:10Z
    listing = ok(await cli("agent", "session", "list")).stdout
    lines = listing.splitlines()
    assert re.fullmatch(r"\+(-+\+){4}", lines[0]) and lines[0] == lines[2] == lines[-1]
    rows = table_rows(listing)
    assert rows[0] == ["ID", "AGENT", "STATE", "CREATED"]
    assert rows[1][:3] == [session_id, "my-first-agent", "READY"]
    assert CREATED.match(rows[1][3])
    # both spellings are the same group
    assert ok(await cli("session", "list")).stdout == listing


async def test_session_get_rename_suspend_resume_delete(cli, store, sim):
    await prepared_agent(store)
    created = ok(await cli("session", "create", "--agent", "my-first-agent", "--name", "first"))
    rows = table_rows(created.stdout)
    assert rows[0] == ["ID", "AGENT", "STATE", "CREATED"] and rows[1][2] == "READY"
    sid = rows[1][0]

    detail = dict(table_rows(ok(await cli("session", "get", sid)).stdout)[1:])
    assert detail["ID"] == sid and detail["NAME"] == "first" and detail["STATE"] == "READY"
    assert detail["AGENT"] == "kagent/my-first-agent" and detail["CREATOR"] == "alice"
    assert detail["OPERATION"] == "NONE" and CREATED.match(detail["CREATED"])
    got = json.loads(ok(await cli("session", "get", sid, "-o", "json")).stdout)
    assert got["session"]["id"] == sid and got["session"]["creator"] == "alice"

    renamed = json.loads(ok(await cli("session", "rename", sid, "renamed turn", "-o", "json")).stdout)
    assert renamed["session"]["name"] == "renamed turn"
    cleared = ok(await cli("session", "rename", sid, ""))
    assert dict(table_rows(cleared.stdout)[1:])["NAME"] == ""

    suspended = ok(await lifecycle(cli, "session", "suspend", sid))
    assert table_rows(suspended.stdout)[1][:3] == [sid, "my-first-agent", "SUSPENDED"]
    resumed = json.loads(ok(await lifecycle(cli, "session", "resume", sid, "-o", "json")).stdout)
    assert resumed["session"]["state"] == "RUNTIME_STATE_READY"
    deleted = ok(await lifecycle(cli, "session", "delete", sid))
    assert table_rows(deleted.stdout)[1][2] == "DELETED"

    line = one_error_line(await cli("session", "get", sid))
    assert line.startswith("error: NOT_FOUND: ") and sid in line


async def test_create_retry_with_same_request_id_returns_the_same_session(cli, store, sim):
    await prepared_agent(store)
    first = await create(cli, "--request-id", "req-1")
    again = await create(cli, "--request-id", "req-1")
    assert again["id"] == first["id"]
    other = await create(cli)  # a fresh uuid4 request id each time
    assert other["id"] != first["id"]
    # a different name under the same request id is an idempotency conflict: one line, exit 1
    line = one_error_line(await cli("session", "create", "--agent", "my-first-agent", "--request-id", "req-1",
                                    "--name", "different"))
    assert line.startswith("error: ALREADY_EXISTS: ")


async def test_create_follows_a_slow_operation_by_retrying_the_same_call(cli, store, sim):
    await prepared_agent(store)
    fault = await sim.inject("create_actor", "block", times=None)
    # --timeout 3: attempts of 1 s; the first ends UNAVAILABLE ("still in progress"), a retry joins
    task = asyncio.create_task(cli("session", "create", "--agent", "my-first-agent", "--request-id", "slow",
                                   "-o", "json", budget="3"))
    await sim.wait_blocked(fault)
    await asyncio.sleep(1.3)
    await sim.release(fault)
    body = json.loads(ok(await task).stdout)
    assert body["session"]["state"] == "RUNTIME_STATE_READY"
    listed = json.loads(ok(await cli("session", "list", "-o", "json")).stdout)
    assert [s["id"] for s in listed["sessions"]] == [body["session"]["id"]]


async def test_list_pages_through_everything_and_filters_by_agent(cli, store, sim, monkeypatch):
    await prepared_agent(store)
    await prepared_agent(store, name="other-agent")
    ids = {(await create(cli))["id"] for _ in range(3)}
    other = (await create(cli, "--agent", "other-agent"))["id"]  # the last --agent wins
    monkeypatch.setattr(cli_session, "PAGE", 2)  # force several pages

    body = json.loads(ok(await cli("session", "list", "-o", "json")).stdout)
    assert {s["id"] for s in body["sessions"]} == ids | {other}
    assert "page" not in body or not body["page"].get("nextPageToken")
    mine = table_rows(ok(await cli("session", "list", "--agent", "my-first-agent")).stdout)[1:]
    assert {r[0] for r in mine} == ids and {r[1] for r in mine} == {"my-first-agent"}

    empty = ok(await cli("session", "list", "--agent", "nobody"))
    assert empty.stdout == "" and "No sessions found" in empty.stderr
    assert json.loads(ok(await cli("session", "list", "--agent", "nobody", "-o", "json")).stdout) == {}

    # other creators: bob sees none of alice's; --all-creators needs an administrator
    assert ok(await cli("session", "list", "-o", "json", token="bob-token")).stdout.strip() == "{}"
    line = one_error_line(await cli("session", "list", "--all-creators"))
    assert line.startswith("error: PERMISSION_DENIED: ")
    admin = ok(await cli("session", "list", "--all-creators", "-o", "json", token="admin-token"))
    everyone = json.loads(admin.stdout)
    assert {s["id"] for s in everyone["sessions"]} == ids | {other}


async def test_shares_create_list_revoke(cli, store, sim):
    await prepared_agent(store)
    sid = (await create(cli))["id"]
    made = json.loads(ok(await cli("session", "share", "create", sid, "--permission", "read-only",
                                   "--ttl", "1h", "-o", "json")).stdout)
    assert made["token"].startswith("sqs_")
    assert made["share"]["sessionId"] == sid
    assert made["share"]["permission"] == "SESSION_SHARE_PERMISSION_READ_ONLY"
    table = ok(await cli("session", "share", "create", sid, "--permission", "READ-WRITE", "--ttl", "30m"))
    assert "token: sqs_" in table.stdout and table_rows(table.stdout)[1][2] == "READ_WRITE"

    listing = table_rows(ok(await cli("session", "share", "list", sid)).stdout)
    assert listing[0] == ["ID", "SESSION", "PERMISSION", "CREATED", "EXPIRES"]
    assert {r[2] for r in listing[1:]} == {"READ_ONLY", "READ_WRITE"}
    revoked = ok(await cli("session", "share", "revoke", made["share"]["id"]))
    assert revoked.stdout.strip() == f"share {made['share']['id']} revoked"
    after = json.loads(ok(await cli("session", "share", "list", sid, "-o", "json")).stdout)
    assert [s["permission"] for s in after["shares"]] == ["SESSION_SHARE_PERMISSION_READ_WRITE"]
    last = after["shares"][0]["id"]
    assert json.loads(ok(await cli("session", "share", "revoke", last, "-o", "json")).stdout) == {}


async def test_errors_are_one_line_with_the_status_code(cli, store, sim):
    missing = str(uuid.uuid4())
    line = one_error_line(await cli("session", "get", missing))
    assert line == f"error: NOT_FOUND: session {missing} not found"
    assert one_error_line(await cli("session", "delete", missing)).startswith("error: NOT_FOUND: ")
    assert one_error_line(await cli("session", "get", "not-a-uuid")).startswith("error: INVALID_ARGUMENT: ")
    assert one_error_line(await cli("session", "suspend", "nope")).startswith("error: INVALID_ARGUMENT: ")
    # an Agent that does not exist
    line = one_error_line(await cli("session", "create", "--agent", "ghost"))
    assert line == "error: NOT_FOUND: agent kagent/ghost not found"
    # a bad token
    assert one_error_line(await cli("session", "list", token="wrong")).startswith("error: UNAUTHENTICATED: ")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_server_is_a_clear_line_and_create_does_not_retry_it(tmp_path):
    cli = Cli(f"127.0.0.1:{_closed_port()}", tmp_path)
    for args in (("session", "list"), ("session", "get", str(uuid.uuid4()))):
        line = one_error_line(await cli(*args))
        assert f"server at {cli.address} is not reachable" in line and "sessionq up" in line
    started = time.monotonic()
    line = one_error_line(await cli("session", "create", "--agent", "a", budget="20"))
    assert "is not reachable" in line
    assert time.monotonic() - started < 5  # never reached: reported at once, not retried for 20 s


async def test_bad_arguments_are_usage_errors(tmp_path):
    cli = Cli("127.0.0.1:1", tmp_path)
    for args in (
        ("session", "list", "--bogus"),
        ("session", "create"),  # --agent is required
        ("session", "get"),
        ("session", "get", "x", "-o", "yaml"),
        ("session", "share", "create", "x", "--permission", "admin"),
        ("session", "share", "create", "x", "--permission", "read-only", "--ttl", "soon"),
        ("session", "share", "create", "x", "--permission", "read-only", "--ttl", "0s"),
        ("--timeout", "0", "session", "list"),
    ):
        result = await cli(*args)
        assert result.exit_code == 2, (args, result.stdout, result.stderr)
        assert "Usage:" in result.stderr


def test_durations():
    assert parse_duration("1h") == 3600
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90
    assert parse_duration("7d") == 7 * 86400
    assert parse_duration("250ms") == 0.25
    for bad in ("", "h", "1 h", "1y", "-1h", "1h-"):
        with pytest.raises(ValueError):
            parse_duration(bad)


class _Unavailable(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_retrying_call_repeats_the_identical_request_until_it_succeeds():
    seen: list[tuple[Any, float]] = []

    def method(request: Any, *, metadata: Any, timeout: float) -> str:
        seen.append((request, timeout))
        assert metadata == [("authorization", "Bearer t")]
        if len(seen) == 1:
            raise _Unavailable(grpc.StatusCode.UNAVAILABLE, "the operation is still in progress; retry")
        if len(seen) == 2:
            raise _Unavailable(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        return "done"

    request = object()
    client = Client(server="x:1", token="t", timeout=6)
    assert client.call_retrying(method, request) == "done"  # type: ignore[arg-type]
    assert [r for r, _ in seen] == [request, request, request]
    assert all(t <= 2.0 for _, t in seen)  # attempts are slices of the budget

    def refused(request: Any, *, metadata: Any, timeout: float) -> str:
        raise _Unavailable(grpc.StatusCode.ABORTED, "superseded")

    with pytest.raises(CliError, match=r"^ABORTED: superseded$"):
        Client(timeout=5).call_retrying(refused, request)  # type: ignore[arg-type]

    def busy(request: Any, *, metadata: Any, timeout: float) -> str:
        raise _Unavailable(grpc.StatusCode.UNAVAILABLE, "still in progress")

    started = time.monotonic()
    expected = r"^UNAVAILABLE: still in progress \(still failing after retrying for 1s\)$"
    with pytest.raises(CliError, match=expected):
        Client(timeout=1).call_retrying(busy, request)  # type: ignore[arg-type]
    assert time.monotonic() - started < 2


async def test_client_config_lookup_order(tmp_path, monkeypatch):
    """--client-config, $SESSIONQ_CLIENT_CONFIG, ./.sessionq/client.yaml, ~/.config/sessionq/client.yaml;
    --server / $SESSIONQ_SERVER win over the file. The error names the server that was chosen."""
    ports = [_closed_port() for _ in range(5)]

    def config(path: Path, port: int) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"server: 127.0.0.1:{port}\nuser: alice\ndatabaseUrl: postgresql://x/y\npsql: psql\n")
        return path

    xdg = tmp_path / "xdg"
    config(xdg / "sessionq" / "client.yaml", ports[0])
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    base_env = {"XDG_CONFIG_HOME": str(xdg), "SESSIONQ_CLIENT_CONFIG": None, "SESSIONQ_SERVER": None,
                "SESSIONQ_TOKEN": None}

    async def server_named(*args: str, **env: str | None) -> str:
        result = await asyncio.to_thread(CliRunner().invoke, main, [*args, "session", "list"],
                                         env={**base_env, **env})
        line = one_error_line(result)
        m = re.search(r"server at (\S+) is not reachable", line)
        assert m, line
        return m.group(1)

    assert await server_named() == f"127.0.0.1:{ports[0]}"  # the user's config
    config(work / ".sessionq" / "client.yaml", ports[1])
    assert await server_named() == f"127.0.0.1:{ports[1]}"  # ./.sessionq wins over the user's
    env_file = config(tmp_path / "env.yaml", ports[2])
    assert await server_named(SESSIONQ_CLIENT_CONFIG=str(env_file)) == f"127.0.0.1:{ports[2]}"
    opt_file = config(tmp_path / "opt.yaml", ports[3])
    assert await server_named("--client-config", str(opt_file),
                              SESSIONQ_CLIENT_CONFIG=str(env_file)) == f"127.0.0.1:{ports[3]}"
    assert await server_named(SESSIONQ_SERVER=f"127.0.0.1:{ports[4]}") == f"127.0.0.1:{ports[4]}"
    chosen = await server_named("--server", "127.0.0.1:1", SESSIONQ_SERVER=f"127.0.0.1:{ports[4]}")
    assert chosen == "127.0.0.1:1"

    # a broken config is one clear line; a missing explicit one is a usage error
    (work / ".sessionq" / "client.yaml").write_text("server: [unclosed\n")
    result = await asyncio.to_thread(CliRunner().invoke, main, ["session", "list"], env=base_env)
    assert "is not valid YAML" in one_error_line(result)
    argv = ["--client-config", str(tmp_path / "nope.yaml"), "session", "list"]
    result = await asyncio.to_thread(CliRunner().invoke, main, argv, env=base_env)
    assert result.exit_code == 2


async def test_default_server_without_any_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "SESSIONQ_CLIENT_CONFIG": None, "SESSIONQ_SERVER": None}
    result = await asyncio.to_thread(CliRunner().invoke, main, ["--timeout", "2", "session", "list"], env=env)
    if result.exit_code == 0:  # something really listens on 127.0.0.1:8083 here
        pytest.skip("a server is listening on the default address")
    assert "server at 127.0.0.1:8083" in result.stderr
