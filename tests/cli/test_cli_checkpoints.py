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


async def test_session_turns_and_fork_at_a_turn(api, store, sim):
    """`sessionq session turns ID` and `sessionq session fork ID --at TASK_ID` (TurnService)."""

    await apply_agent(store, sim)
    sid = json.loads((await cli(api, "session", "create", "--agent", "my-first-agent", "-o", "json")).output)["session"]["id"]
    tasks = []
    for n in (11, 22):
        out = await cli(api, "agent", "invoke", "--session", sid, "--task", f"Remember the number {n}.", "-o", "json")
        tasks.append(json.loads(out.output)["task"]["id"])
        for _ in range(200):  # the turn's snapshot is pinned once the Actor is quiesced
            listed = json.loads((await cli(api, "session", "turns", sid, "-o", "json")).output)
            if listed["turns"][-1].get("checkpointable"):
                break
            await asyncio.sleep(0.05)
    table = await cli(api, "session", "turns", sid)
    assert table.exit_code == 0 and tasks[0] in table.output and "COMPLETED" in table.output and "yes" in table.output
    forked = await cli(api, "session", "fork", sid, "--at", tasks[0], "--request-id", "at-1", "-o", "json")
    assert forked.exit_code == 0, forked.output
    fork = json.loads(forked.output)["session"]
    assert fork["id"] != sid
    said = await cli(api, "agent", "invoke", "--session", fork["id"], "--task", "What number did I ask you to remember?")
    assert "remember the number 11" in said.output
    again = await cli(api, "session", "fork", sid, "--at", tasks[0], "--request-id", "at-1", "-o", "json")
    assert json.loads(again.output)["session"]["id"] == fork["id"]
    bad = await cli(api, "session", "fork", sid, "--at", "no-such-task")
    assert bad.exit_code == 1 and "NOT_FOUND" in bad.output and len(bad.output.strip().splitlines()) == 1
    foreign = await cli(api, "session", "turns", sid, user="bob")
    assert foreign.exit_code == 1 and "NOT_FOUND" in foreign.output


async def test_tags_list_shows_checkpoint_tags_and_turn_pins(api, store, sim):
    """`sessionq tags list --atespace NS`: the tutorial's `kubectl ate get tags --atespace kagent`."""
    await apply_agent(store, sim)
    sid = json.loads((await cli(api, "session", "create", "--agent", "my-first-agent", "-o", "json")).output)["session"]["id"]
    task = json.loads((await cli(api, "agent", "invoke", "--session", sid, "--task", "What is 2+2?", "-o", "json")).output)
    made = await cli(api, "checkpoint", "create", "--session", sid, "--head", task["task"]["id"], "-o", "json")
    cp = json.loads(made.output)["checkpoint"]
    for _ in range(200):
        out = await cli(api, "tags", "list", "--atespace", "kagent")
        if "turn pin (pinned)" in out.output:
            break
        await asyncio.sleep(0.05)
    assert out.exit_code == 0 and f"checkpoint-{cp['id']}" in out.output and f"checkpoint {cp['id']}" in out.output
    assert "turn pin (pinned)" in out.output and "ATESPACE" in out.output
    as_json = json.loads((await cli(api, "tags", "list", "--atespace", "kagent", "-o", "json")).output)
    assert {t["kind"] for t in as_json["tags"]} == {"TAG_KIND_CHECKPOINT", "TAG_KIND_TURN_PIN"}
    nothing = await cli(api, "tags", "list", "--atespace", "kagent", user="bob")
    assert nothing.exit_code == 0 and "No tags found" in nothing.output
