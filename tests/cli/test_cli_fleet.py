"""`sessionq session` for a fleet: create with labels and a TTL, label, list by selector, count,
bulk actions with a dry run, usage (FleetService, through the CLI against the in-process API)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_cli_sessions import Cli, ok, prepared_agent


@pytest.fixture
def cli(api: Any, tmp_path: Path) -> Cli:
    return Cli(api.address, tmp_path)


@pytest.mark.clause("FLEET-1")
async def test_fleet_commands(cli, store):
    await prepared_agent(store)
    ids = {}
    for name, labels in (("b1", ["team=billing", "tier=a"]), ("b2", ["team=billing", "tier=c"]), ("s1", ["team=search"])):
        args = ["session", "create", "--agent", "my-first-agent", "-o", "json", "--ttl", "2d"]
        for label in labels:
            args += ["--label", label]
        out = json.loads(ok(await cli(*args)).stdout)
        ids[name] = out["session"]["session"]["id"]
        assert out["session"]["idleTtl"] == "172800s"
    plain = json.loads(ok(await cli("session", "create", "--agent", "my-first-agent", "-o", "json")).stdout)
    assert "labels" not in plain["session"]  # kagent's CreateSession, unchanged
    listed = json.loads(ok(await cli("session", "list", "--selector", "team=billing,tier in (a,b)", "-o", "json")).stdout)
    assert [s["session"]["id"] for s in listed["sessions"]] == [ids["b1"]]
    assert ok(await cli("session", "count", "--selector", "team=billing")).stdout.strip() == "2"
    assert ok(await cli("session", "count", "--selector", "!team")).stdout.strip() == "1"
    table = ok(await cli("session", "label", ids["s1"], "team=billing", "env=prod")).stdout
    assert "LABEL env" in table and "prod" in table
    assert ok(await cli("session", "count", "--selector", "team=billing")).stdout.strip() == "3"
    ok(await cli("session", "label", ids["s1"], "env-"))
    bad = await cli("session", "label", ids["s1"], "Bad.Prefix/k=1")
    assert bad.exit_code == 1 and "not valid" in bad.stderr
    bad = await cli("session", "list", "--selector", "team in (a,b")
    assert bad.exit_code == 1 and "parentheses" in bad.stderr
    dry = ok(await cli("session", "bulk", "suspend", "--selector", "team=billing", "--dry-run")).stdout
    assert "3 session(s) match" in dry
    assert ok(await cli("session", "count", "--state", "suspended")).stdout.strip() == "0"  # a dry run did nothing
    nofilter = await cli("session", "bulk", "delete")
    assert nofilter.exit_code == 1 and "needs a filter" in nofilter.stderr
    done = json.loads(ok(await cli("session", "bulk", "delete", "--selector", "team=search", "-o", "json")).stdout)
    assert done["action"]["state"] == "BULK_ACTION_STATE_DONE" and "matched" not in done["action"]  # zero: none left
    done = json.loads(ok(await cli("session", "bulk", "ttl", "1d", "--selector", "team=billing", "-o", "json")).stdout)
    assert done["action"]["admitted"] == "3"
    status = ok(await cli("session", "bulk", "status", done["action"]["id"])).stdout
    assert "SET_IDLE_TTL" in status and "DONE" in status
    usage = ok(await cli("session", "usage", ids["b1"])).stdout
    assert "TURNS" in usage and "RESUMES" in usage
    figures = json.loads(ok(await cli("session", "usage", ids["b1"], "-o", "json")).stdout)["usage"]
    # no snapshot yet: 0 bytes of 0 (with snapshots of unknown size it would say "unknown")
    assert int(figures.get("snapshots", 0)) == 0 and re.search(r"SNAPSHOT BYTES\s*\S\s*0\b", usage), usage
    denied = await cli("session", "count", "--all-creators", "--selector", "team=billing")
    assert denied.exit_code == 1 and "administrator" in denied.stderr
