"""`sessionq events`: the caller's lifecycle events as a table or JSON lines, one Session's with
--session, resumed with --after; bad input is one clear line."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from click.testing import CliRunner
from lifecycle import ready_session
from sessionq.cli.main import main

# events are readable once no older transaction runs on the server (schema/45_events.sql)
pytestmark = pytest.mark.quiet_horizon


async def cli(api, *args: str, token: str = "alice-token"):
    return await asyncio.to_thread(CliRunner().invoke, main, ["--server", api.address, "--token", token, *args])


async def test_events_lists_as_a_table_and_json_lines(api, store, sim):
    a = await ready_session(store, sim, "a")
    await ready_session(store, sim, "b", user="bob")
    table = await cli(api, "events")
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split()[:3] == ["TIME", "SESSION", "TYPE"] and len(lines) == 3
    assert str(a.id) in lines[1] and "created" in lines[1] and "ready" in lines[2]
    out = await cli(api, "events", "--session", str(a.id), "-o", "json")
    assert out.exit_code == 0, out.output
    events = [json.loads(line) for line in out.output.splitlines()]
    assert [e["type"] for e in events] == ["created", "ready"] and events[0]["sessionId"] == str(a.id)
    after = await cli(api, "events", "--after", events[0]["id"], "-o", "json")
    assert [json.loads(line)["type"] for line in after.output.splitlines()] == ["ready"]
    only = await cli(api, "events", "--type", "ready", "-o", "json", token="bob-token")
    assert [json.loads(line)["type"] for line in only.output.splitlines()] == ["ready"]
    nothing = await cli(api, "events", "--session", str(a.id), token="bob-token")
    assert nothing.exit_code == 0 and "No events." in nothing.output


async def test_events_bad_input_is_one_line(api, store, sim):
    await ready_session(store, sim)
    for args in (["--type", "bogus"], ["--session", "nope"], ["--after", "123-999999999"]):
        result = await cli(api, "events", *args)
        assert result.exit_code != 0 and "Traceback" not in result.output, result.output
        assert len(result.output.strip().splitlines()) <= 4


async def test_events_follow_prints_new_events_as_they_happen(api, store, sim):
    await ready_session(store, sim, "before")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sessionq.cli.main", "--server", api.address, "--token", "alice-token", "events",
        "--follow", "-o", "json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        later = await ready_session(store, sim, "after")
        assert proc.stdout is not None
        lines = [json.loads(await asyncio.wait_for(proc.stdout.readline(), 30)) for _ in range(4)]
        assert [e["type"] for e in lines] == ["created", "ready", "created", "ready"]
        assert lines[-1]["sessionId"] == str(later.id)
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
