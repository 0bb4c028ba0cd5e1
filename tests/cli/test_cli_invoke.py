"""`sessionq agent invoke` (TUT-1) against the in-process API and workers."""

import asyncio
import json

import pytest
from click.testing import CliRunner
from conftest import apply_agent
from sessionq.cli.main import main


async def cli(api, *args, user="alice"):
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, main, ["--server", api.address, "--token", f"{user}-token", *args])


@pytest.mark.clause("TUT-1")
async def test_session_create_and_invoke_print_ids_as_the_tutorial_reads_them(api, store, sim):
    await apply_agent(store, sim)
    created = await cli(api, "agent", "session", "create", "--agent", "my-first-agent", "-o", "json")
    assert created.exit_code == 0, created.output
    session_id = json.loads(created.output)["session"]["id"]
    invoked = await cli(api, "agent", "invoke", "--session", session_id, "--task", "What is 2+2?", "-o", "json")
    assert invoked.exit_code == 0, invoked.output
    task = json.loads(invoked.output)["task"]
    assert task["id"] and task["contextId"] == session_id and task["status"]["state"] == "TASK_STATE_COMPLETED"
    plain = await cli(api, "agent", "invoke", "--session", session_id, "--task", "What did I ask you first?")
    assert plain.exit_code == 0 and "What is 2+2?" in plain.output


async def test_invoke_errors_are_one_line(api, store, sim):
    await apply_agent(store, sim)
    missing = await cli(api, "agent", "invoke", "--session", "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10", "--task", "hi")
    assert missing.exit_code == 1 and "NOT_FOUND" in missing.output and len(missing.output.strip().splitlines()) == 1
    usage = await cli(api, "agent", "invoke", "--task", "hi")
    assert usage.exit_code == 2


async def test_the_answer_reaches_the_terminal_without_control_sequences(api, store, sim):
    """The agent's answer is free text: lines are kept, control sequences shown as escapes (issue 15)."""
    import re

    await apply_agent(store, sim)
    created = await cli(api, "agent", "session", "create", "--agent", "my-first-agent", "-o", "json")
    session_id = json.loads(created.output)["session"]["id"]
    await cli(api, "agent", "invoke", "--session", session_id, "--task", "first\x1b]0;pwned\x07\x1b[2J\rline")
    plain = await cli(api, "agent", "invoke", "--session", session_id, "--task", "What did I ask you first?")
    assert plain.exit_code == 0, plain.output
    assert "first\\x1b]0;pwned\\x07\\x1b[2J" in plain.output
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", plain.output)
