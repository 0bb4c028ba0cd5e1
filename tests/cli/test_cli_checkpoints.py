"""`sessionq checkpoint create|list|get|rename|delete` and `sessionq session fork`."""

import asyncio
import json

from click.testing import CliRunner
from conftest import apply_agent
from sessionq.cli.main import main


async def cli(api, *args, user="alice"):
    return await asyncio.to_thread(CliRunner().invoke, main,
                                   ["--server", api.address, "--token", f"{user}-token", *args])


async def test_checkpoint_commands_and_fork(api, store, sim):
    await apply_agent(store, sim)
    created = await cli(api, "session", "create", "--agent", "my-first-agent", "-o", "json")
    sid = json.loads(created.output)["session"]["id"]
    first = json.loads((await cli(api, "agent", "invoke", "--session", sid, "--task", "What is 2+2?", "-o", "json")).output)
    second = json.loads((await cli(api, "agent", "invoke", "--session", sid, "--task", "What is 3+3?", "-o", "json")).output)

    advanced = await cli(api, "checkpoint", "create", "--session", sid, "--head", first["task"]["id"])
    assert advanced.exit_code == 1 and "conversation advanced beyond the expected task" in advanced.output

    made = await cli(api, "checkpoint", "create", "--session", sid, "--head", second["task"]["id"],
                     "--request-id", "cp-1", "-o", "json")  # waits out a pending snapshot by itself
    assert made.exit_code == 0, made.output
    cp = json.loads(made.output)["checkpoint"]
    assert cp["state"] == "CHECKPOINT_STATE_READY" and cp["name"] == "my-first-agent turn 4"

    table = await cli(api, "checkpoint", "list", "--session", sid)
    assert table.exit_code == 0 and cp["id"] in table.output and "READY" in table.output
    got = json.loads((await cli(api, "checkpoint", "get", cp["id"], "-o", "json")).output)
    assert got["checkpoint"]["id"] == cp["id"]
    renamed = json.loads((await cli(api, "checkpoint", "rename", cp["id"], "before-three", "-o", "json")).output)
    assert renamed["checkpoint"]["name"] == "before-three"

    forked = await cli(api, "session", "fork", cp["id"], "-o", "json")
    assert forked.exit_code == 0, forked.output
    fork = json.loads(forked.output)["session"]
    assert fork["name"] == "before-three" and fork["contextId"] == fork["id"] != sid
    answer = await cli(api, "agent", "invoke", "--session", fork["id"], "--task", "What did I ask you first?")
    assert "What is 2+2?" in answer.output

    pinned = await cli(api, "checkpoint", "delete", cp["id"])
    assert pinned.exit_code == 1 and "FAILED_PRECONDITION" in pinned.output and len(pinned.output.strip().splitlines()) == 1
    await cli(api, "session", "delete", fork["id"])
    deleted = await cli(api, "checkpoint", "delete", cp["id"])
    assert deleted.exit_code == 0 and "deleted" in deleted.output
    missing = await cli(api, "checkpoint", "get", cp["id"])
    assert missing.exit_code == 1 and "NOT_FOUND" in missing.output
    bad = await cli(api, "checkpoint", "create", "--session", sid)
    assert bad.exit_code == 2
