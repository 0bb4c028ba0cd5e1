"""`sessionq actors list` (InventoryService/ListActors) and its kubectl-style table."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from google.protobuf.timestamp_pb2 import Timestamp
from sessionq.cli.actors import actors_table
from sessionq.cli.client import fmt_age
from sessionq.cli.main import main

from sessionq._pb.sessionq.v1 import inventory_pb2


def _inventory_served() -> bool:
    if importlib.util.find_spec("sessionq.api.inventory") is None:
        return False
    from sessionq.api import server

    names = getattr(server, "SERVICE_NAMES", [])
    registered = any(n.endswith(".InventoryService") for n in names)
    return registered or "InventoryService" in inspect.getsource(server)


needs_inventory = pytest.mark.skipif(
    not _inventory_served(),
    reason="the InventoryService servicer (sessionq.api.inventory) is not written or not registered in "
           "sessionq.api.server yet",
)


def _ts(when: datetime) -> Timestamp:
    t = Timestamp()
    t.FromDatetime(when)
    return t


def test_age_is_kubectl_style():
    now = datetime(2026, 8, 31, 15, 30, tzinfo=UTC)
    assert fmt_age(_ts(now - timedelta(seconds=45)), now) == "45s"
    assert fmt_age(_ts(now - timedelta(minutes=11, seconds=20)), now) == "11m"
    assert fmt_age(_ts(now - timedelta(hours=2, minutes=59)), now) == "2h"
    assert fmt_age(_ts(now - timedelta(days=3, hours=5)), now) == "3d"
    assert fmt_age(Timestamp(), now) == "<unknown>"


def test_actor_table_columns_are_space_aligned():
    recent = _ts(datetime.now(UTC) - timedelta(minutes=11, seconds=5))
    table = actors_table([
        inventory_pb2.Actor(atespace="kagent", name="session-0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10",
                            template="kagent/my-first-agent-5f2b3c1a9e8d", state="ACTOR_STATE_SUSPENDED",
                            version=4, created_at=recent),
        inventory_pb2.Actor(atespace="kagent", name="session-x", template="kagent/t",
                            state="ACTOR_STATE_RUNNING", worker="kagent/kagent-default-7c9f8b6d54-x2n4p",
                            worker_ip="10.244.1.37", version=6, created_at=recent),
    ])
    lines = table.splitlines()
    assert lines[0].split() == ["ATESPACE", "NAME", "TEMPLATE", "STATE", "WORKER", "VERSION", "AGE"]
    assert lines[1].split() == [
        "kagent", "session-0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10", "kagent/my-first-agent-5f2b3c1a9e8d",
        "ACTOR_STATE_SUSPENDED", "<none>", "4", "11m",
    ]
    assert lines[2].split()[4] == "kagent/kagent-default-7c9f8b6d54-x2n4p"
    # columns start at the same offsets on every line, three spaces apart
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    for line in lines[1:]:
        assert [m.start() for m in re.finditer(r"\S+", line)] == starts
    assert "   NAME" in lines[0]


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


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


async def _cli(api: Any, tmp_path: Path, *args: str) -> Result:
    empty = tmp_path / "empty-client.yaml"
    empty.write_text("{}\n")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "SESSIONQ_CLIENT_CONFIG": str(empty)}
    argv = ["--server", api.address, "--token", "alice-token", "--timeout", "10", *args]
    return await asyncio.to_thread(CliRunner().invoke, main, argv, env=env)


@needs_inventory
async def test_actors_list_shows_the_session_actor_suspended_without_a_worker(api, store, sim, tmp_path):
    await prepared_agent(store)
    ids = []
    for _ in range(3):
        created = ok(await _cli(api, tmp_path, "session", "create", "--agent", "my-first-agent",
                                "-o", "json"))
        ids.append(json.loads(created.stdout)["session"]["id"])

    lines = ok(await _cli(api, tmp_path, "actors", "list", "--atespace", "kagent")).stdout.splitlines()
    assert lines[0].split() == ["ATESPACE", "NAME", "TEMPLATE", "STATE", "WORKER", "VERSION", "AGE"]
    rows = {line.split()[1]: line.split() for line in lines[1:]}
    for sid in ids:
        row = rows[f"session-{sid}"]
        assert row[0] == "kagent" and row[2].startswith("kagent/my-first-agent-")
        assert row[3] == "ACTOR_STATE_SUSPENDED" and row[4] == "<none>"
        assert int(row[5]) > 0 and re.fullmatch(r"\d+[smhd]", row[6])

    # one page at a time, then --all
    first = json.loads(ok(await _cli(api, tmp_path, "actors", "list", "--atespace", "kagent", "--limit", "2",
                                     "-o", "json")).stdout)
    assert len(first["actors"]) == 2 and first["page"]["nextPageToken"]
    rest = json.loads(ok(await _cli(api, tmp_path, "actors", "list", "--atespace", "kagent", "--limit", "2",
                                    "--page-token", first["page"]["nextPageToken"], "-o", "json")).stdout)
    every = json.loads(ok(await _cli(api, tmp_path, "actors", "list", "--atespace", "kagent", "--limit", "2",
                                     "--all", "-o", "json")).stdout)
    names = {a["name"] for a in every["actors"]}
    assert {f"session-{sid}" for sid in ids} <= names
    assert {a["name"] for a in first["actors"] + rest["actors"]} <= names
    assert not every.get("page", {}).get("nextPageToken")


async def test_actors_list_bad_arguments(tmp_path):
    result = await asyncio.to_thread(CliRunner().invoke, main, ["actors", "list", "--limit", "500"])
    assert result.exit_code == 2 and "Usage:" in result.stderr
