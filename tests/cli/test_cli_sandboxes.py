"""`sessionq sandbox create|get|list|suspend|resume|delete` against the in-process API (the CLI runs
in a thread; see test_cli_sessions)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cli_sessions import CREATED, SID, Cli, ok, prepared_agent, table_rows


@pytest.fixture
def cli(api: Any, tmp_path: Path) -> Cli:
    return Cli(api.address, tmp_path)


async def create(cli: Cli, *extra: str) -> dict[str, Any]:
    result = ok(await cli("sandbox", "create", "--template", "my-first-agent", "-o", "json", *extra))
    return dict(json.loads(result.stdout)["sandbox"])


async def test_sandbox_commands_create_get_list_suspend_resume_delete(cli, store, sim):
    await prepared_agent(store)
    sb = await create(cli, "--name", "scratch", "--ttl", "30m", "--request-id", "cli-1")
    assert SID.match(sb["id"]) and sb["state"] == "RUNTIME_STATE_READY"
    assert sb["sandboxTemplate"] == {"namespace": "kagent", "name": "my-first-agent"} and sb["name"] == "scratch"
    assert (await create(cli, "--name", "scratch", "--ttl", "30m", "--request-id", "cli-1"))["id"] == sb["id"]

    detail = table_rows(ok(await cli("sandbox", "get", sb["id"])).stdout)
    fields = dict(row[:2] for row in detail[1:])
    assert (fields["ID"], fields["STATE"], fields["TEMPLATE"]) == (sb["id"], "READY", "kagent/my-first-agent")
    assert CREATED.match(fields["EXPIRES"])

    rows = table_rows(ok(await cli("sandbox", "list")).stdout)
    assert rows[0] == ["ID", "TEMPLATE", "STATE", "CREATED", "EXPIRES"]
    assert [r[:3] for r in rows[1:]] == [[sb["id"], "my-first-agent", "READY"]]
    assert table_rows(ok(await cli("sandbox", "list", "--template", "my-first-agent")).stdout)[1][0] == sb["id"]
    empty = ok(await cli("sandbox", "list", "--template", "other"))
    assert empty.stdout == "" and "No sandboxes found." in empty.stderr

    suspended = json.loads(ok(await cli("sandbox", "suspend", sb["id"], "-o", "json")).stdout)["sandbox"]
    assert suspended["state"] == "RUNTIME_STATE_SUSPENDED"
    rows = table_rows(ok(await cli("sandbox", "resume", sb["id"])).stdout)
    assert rows[1][:3] == [sb["id"], "my-first-agent", "READY"]
    deleted = json.loads(ok(await cli("sandbox", "delete", sb["id"], "-o", "json")).stdout)["sandbox"]
    assert deleted["state"] == "RUNTIME_STATE_DELETED"
    gone = await cli("sandbox", "get", sb["id"])
    assert gone.exit_code == 1 and "NOT_FOUND" in gone.stderr and f"sandbox {sb['id']} not found" in gone.stderr


async def test_sandbox_commands_refuse_bad_input_plainly(cli, store, sim):
    await prepared_agent(store)
    for args, words in (
        (("sandbox", "create", "--template", "my-first-agent", "--ttl", "25h"), "ttl"),
        (("sandbox", "create", "--template", "missing"), "agent kagent/missing not found"),
        (("sandbox", "get", "not-a-uuid"), "sandbox_id"),
        (("sandbox", "list", "--namespace", "kagent"), "give --template too"),
    ):
        result = await cli(*args)
        assert result.exit_code != 0 and words in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    other = await create(cli)
    hidden = await cli("sandbox", "delete", other["id"], token="bob-token")
    assert hidden.exit_code == 1 and f"sandbox {other['id']} not found" in hidden.stderr
    assert json.loads(ok(await cli("sandbox", "get", other["id"], "-o", "json")).stdout)["sandbox"]["state"] == (
        "RUNTIME_STATE_READY")
