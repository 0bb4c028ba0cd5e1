"""`sessionq agent apply|list|get` against the in-process API (the `worker` fixture prepares revisions).

The in-process server runs on the test's event loop, so the CLI runs in a thread.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import yaml
from click.testing import CliRunner, Result
from sessionq.cli.client import CliError, boxed_table, plain_table, printable
from sessionq.cli.main import main

from sessionq.runtime.base import Code

SPEC = """\
name: my-first-agent
namespace: kagent
template: example.com/agents/helper:1.0
egress:
  - url: https://api.openai.example.com
    credentialHeaders:
      Authorization: Bearer sk-test
"""


# what a terminal would act on: C0 controls, DEL, C1 controls, bidirectional overrides
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


class Cli:
    def __init__(self, address: str, home: Path) -> None:
        self.address = address
        self.home = home
        empty = home / "empty-client.yaml"
        empty.write_text("{}\n")
        self.env = {"XDG_CONFIG_HOME": str(home / "xdg"), "SESSIONQ_CLIENT_CONFIG": str(empty),
                    "SESSIONQ_SERVER": None, "SESSIONQ_TOKEN": None}

    def spec(self, text: str, name: str = "agent.yaml") -> str:
        path = self.home / name
        path.write_text(text)
        return str(path)

    async def __call__(self, *args: str, token: str | None = "alice-token") -> Result:
        argv = ["--server", self.address, "--timeout", "10"]
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


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def one_error_line(result: Result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def table_rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


@pytest.fixture
def cli(api: Any, tmp_path: Path) -> Cli:
    return Cli(api.address, tmp_path)


async def test_apply_waits_for_the_revision_then_sessions_can_be_created(cli):
    path = cli.spec(SPEC)
    applied = ok(await cli("agent", "apply", "-f", path))
    assert applied.stdout.strip() == "agent kagent/my-first-agent applied (revision 1 created; READY)"

    again = json.loads(ok(await cli("agent", "apply", "-f", path, "-o", "json")).stdout)
    assert "revisionCreated" not in again  # unchanged spec: no new revision (false is omitted)
    assert again["agent"]["ref"] == {"namespace": "kagent", "name": "my-first-agent"}
    resource = again["agent"]["resource"]
    assert (resource["apiVersion"], resource["kind"]) == ("api.kagent.dev/v1alpha3", "Agent")
    ready = next(c for c in resource["value"]["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert resource["value"]["spec"]["egress"] == [
        {"url": "https://api.openai.example.com", "credentialHeaders": {"Authorization": "<redacted>"}}
    ]  # write-only: the value is never shown back

    created = json.loads(ok(await cli("session", "create", "--agent", "my-first-agent", "-o", "json")).stdout)
    assert created["session"]["state"] == "RUNTIME_STATE_READY"

    # a changed spec makes revision 2, and apply waits for that one, not for the serving revision 1
    changed = json.loads(ok(await cli("agent", "apply", "-f", cli.spec(SPEC.replace(":1.0", ":2.0")),
                                      "-o", "json")).stdout)
    assert changed["revisionCreated"] is True
    status = changed["agent"]["resource"]["value"]["status"]
    desired = next(r for r in status["revisions"] if r["id"] == status["desiredRevision"])
    assert desired["number"] == 2 and desired["state"] == "READY"


async def test_apply_no_wait_returns_at_once_and_defaults_the_namespace(cli):
    result = ok(await cli("agent", "apply", "--no-wait", "-f", cli.spec("name: quick\n"), "-o", "json"))
    body = json.loads(result.stdout)
    assert body["agent"]["ref"] == {"namespace": "kagent", "name": "quick"}
    assert body["revisionCreated"] is True


async def test_apply_reports_a_failed_revision(cli, sim):
    await sim.inject("create_actor_template", "fail_before", code=Code.INVALID_ARGUMENT, times=None)
    line = one_error_line(await cli("agent", "apply", "-f", cli.spec("name: broken\n")))
    assert line.startswith("error: agent kagent/broken revision 1 failed: ")
    assert "injected failure" in line


async def test_apply_times_out_naming_the_pending_revision(cli, sim):
    fault = await sim.inject("get_actor_template", "block", times=None)
    try:
        result = await cli("agent", "apply", "--wait-timeout", "0.5", "-f", cli.spec("name: slow\n"))
        line = one_error_line(result)
        assert "agent kagent/slow is not ready after 0.5s (revision 1 is PENDING)" in line
    finally:
        await sim.release(fault)


async def test_apply_rejects_bad_specs(cli):
    bad_yaml = one_error_line(await cli("agent", "apply", "-f", cli.spec("name: [x\n")))
    assert "is not valid YAML" in bad_yaml
    unknown = one_error_line(await cli("agent", "apply", "-f", cli.spec("name: a\nimage: x\n")))
    assert "unknown keys: image" in unknown
    assert "has no name" in one_error_line(await cli("agent", "apply", "-f", cli.spec("template: x\n")))
    egress = "name: a\negress:\n  - url: https://10.0.0.1\n"
    assert one_error_line(await cli("agent", "apply", "-f", cli.spec(egress))).startswith(
        "error: INVALID_ARGUMENT: egress[0] (https://10.0.0.1): literal IP addresses are not supported"
    )
    assert one_error_line(await cli("agent", "apply", "-f", cli.spec("name: Not_A_Name\n"))).startswith(
        "error: INVALID_ARGUMENT: "
    )
    missing = await cli("agent", "apply", "-f", str(cli.home / "missing.yaml"))
    assert missing.exit_code == 2 and "Usage:" in missing.stderr
    assert (await cli("agent", "apply")).exit_code == 2  # -f is required


async def test_list_and_get(cli, store, sim, monkeypatch):

    await prepared_agent(store)
    await prepared_agent(store, name="other", namespace="team-a")
    await prepared_agent(store, name="third", namespace="team-a")
    rows = table_rows(ok(await cli("agent", "list")).stdout)  # one namespace, kagent by default
    assert rows[0][:4] == ["NAMESPACE", "NAME", "TEMPLATE", "READY"]
    assert sorted((r[0], r[1], r[3]) for r in rows[1:]) == [("kagent", "my-first-agent", "True")]
    rows = table_rows(ok(await cli("agent", "list", "--namespace", "team-a")).stdout)
    assert sorted((r[0], r[1], r[3]) for r in rows[1:]) == [("team-a", "other", "True"), ("team-a", "third", "True")]
    body = json.loads(ok(await cli("agent", "list", "--namespace", "team-a", "-o", "json")).stdout)
    assert sorted(a["ref"]["name"] for a in body["agents"]) == ["other", "third"]
    nobody = ok(await cli("agent", "list", "--namespace", "empty"))
    assert nobody.stdout == "" and "No agents found" in nobody.stderr

    detail = ok(await cli("agent", "get", "my-first-agent")).stdout
    assert detail.startswith("Agent:     kagent/my-first-agent\n")
    tables = detail.split("Revisions:\n")
    conditions = {r[0]: r[1] for r in table_rows(tables[0].split("Conditions:\n")[1])[1:]}
    assert conditions == {"Accepted": "True", "ResolvedRefs": "True", "Compatible": "True", "Ready": "True"}
    revisions = table_rows(tables[-1])
    assert revisions[0][:3] == ["NUMBER", "ID", "STATE"]
    assert revisions[1][0] == "1" and revisions[1][2] == "READY"
    got = json.loads(ok(await cli("agent", "get", "other", "--namespace", "team-a", "-o", "json")).stdout)
    assert got["agent"]["ref"] == {"namespace": "team-a", "name": "other"}

    assert one_error_line(await cli("agent", "get", "ghost")).startswith("error: NOT_FOUND: ")


def test_agent_group_is_importable_and_mounts_session():
    from sessionq.cli.agent import agent
    from sessionq.cli.session import session

    assert agent.commands["session"] is session


# -- credentials are write-only in every output (issue 15, item 2) -----------------------------------


async def stored_authorization(store: Any, name: str = "my-first-agent") -> list[str]:
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT egress FROM sessionq.revisions WHERE agent_name = %s ORDER BY number", (name,))
        return [r["egress"][0]["credential_headers"]["Authorization"] for r in await cur.fetchall()]


@pytest.mark.parametrize("token", ["bob-token", "alice-token", "admin-token"])
async def test_no_output_shows_credential_values(cli, token):
    applied = ok(await cli("agent", "apply", "-f", cli.spec(SPEC), "-o", "json"))
    assert "sk-test" not in applied.stdout + applied.stderr
    outputs = []
    for command in (["agent", "get", "my-first-agent"], ["agent", "list"]):
        for output in ("table", "json", "yaml"):
            result = ok(await cli(*command, "-o", output, token=token))
            assert "sk-test" not in result.stdout + result.stderr, (command, output)
            outputs.append(result.stdout)
    detail, as_json, as_yaml = outputs[:3]
    assert "https://api.openai.example.com (credential headers: Authorization)" in detail
    egress = json.loads(as_json)["agent"]["resource"]["value"]["spec"]["egress"]
    assert egress == [{"url": "https://api.openai.example.com", "credentialHeaders": {"Authorization": "<redacted>"}}]
    assert yaml.safe_load(as_yaml)["agent"]["resource"]["value"]["spec"]["egress"] == egress
    assert yaml.safe_load(outputs[5])["agents"][0]["resource"]["value"]["spec"]["egress"] == egress


async def test_get_yaml_then_apply_keeps_the_stored_values(cli, store):
    ok(await cli("agent", "apply", "-f", cli.spec(SPEC)))
    dumped = ok(await cli("agent", "get", "my-first-agent", "-o", "yaml")).stdout
    path = cli.spec(dumped, "got.yaml")
    again = ok(await cli("agent", "apply", "-f", path))
    assert again.stdout.strip() == "agent kagent/my-first-agent applied (unchanged, revision 1; READY)"
    # an edit of the dumped spec makes a new revision that keeps the secret
    edited = ok(await cli("agent", "apply", "-f", cli.spec(dumped.replace(":1.0", ":2.0"), "edited.yaml")))
    assert "revision 2 created" in edited.stdout
    # the JSON dump applies the same way
    as_json = ok(await cli("agent", "get", "my-first-agent", "-o", "json")).stdout
    assert "unchanged, revision 2" in ok(await cli("agent", "apply", "-f", cli.spec(as_json, "got.json"))).stdout
    assert await stored_authorization(store) == ["Bearer sk-test", "Bearer sk-test"]
    # a marker for a URL the server has no value for is refused, naming the header
    moved = dumped.replace("https://api.openai.example.com", "https://elsewhere.example.com")
    line = one_error_line(await cli("agent", "apply", "-f", cli.spec(moved, "moved.yaml")))
    assert line.startswith("error: INVALID_ARGUMENT: egress[0].credentialHeaders: 'Authorization' is <redacted>")
    assert await stored_authorization(store) == ["Bearer sk-test", "Bearer sk-test"]


async def test_the_runtime_gets_the_kept_value(cli, store, sim):
    ok(await cli("agent", "apply", "-f", cli.spec(SPEC)))
    dumped = ok(await cli("agent", "get", "my-first-agent", "-o", "yaml")).stdout
    ok(await cli("agent", "apply", "-f", cli.spec(dumped.replace(":1.0", ":3.0"), "edited.yaml")))
    created = json.loads(ok(await cli("session", "create", "--agent", "my-first-agent", "-o", "json")).stdout)
    session = await store.get_session(UUID(created["session"]["id"]), "alice")
    policy = await sim.get_egress_policy(session.actor_atespace, session.actor_name)
    assert [r.credential_headers for r in policy.rules] == [{"Authorization": "Bearer sk-test"}]


# -- control sequences never reach the terminal (issue 15, item 4) -----------------------------------

NASTY = "a\x1b]0;pwned\x07b\x1b[2J\x1b[31mc\rd\x9b1m\u202ee\nf\tg\x08h"


def test_printable_shows_control_characters_as_escapes():
    shown = printable(NASTY)
    assert shown == "a\\x1b]0;pwned\\x07b\\x1b[2J\\x1b[31mc\\rd\\x9b1m\\u202ee\\nf\\tg\\x08h"
    assert printable(NASTY, multiline=True) == shown.replace("\\n", "\n").replace("\\t", "\t")
    assert printable("plain ünïcode") == "plain ünïcode"
    for table in (boxed_table(["NAME", NASTY], [[NASTY, 1]]), plain_table([NASTY, "X"], [[NASTY, 2]])):
        assert not CONTROL.search(table.replace("\n", ""))
        assert "\\x1b]0;pwned\\x07" in table
    err = io.StringIO()
    CliError(f"NOT_FOUND: {NASTY}").show(file=err)  # a server's message is text from afar too
    assert not CONTROL.search(err.getvalue().rstrip("\n")) and "\\x1b]0;pwned\\x07" in err.getvalue()
    boxed = boxed_table(["NAME"], [[NASTY], ["x"]])
    assert len({len(line) for line in boxed.splitlines()}) == 1  # the escapes are counted: rows stay aligned


async def test_agent_tables_neutralise_control_sequences(cli, store):
    ok(await cli("agent", "apply", "-f", cli.spec(SPEC)))
    # text stored before the input checks existed (or from a runtime's failure message)
    async with store.pool.connection() as conn:
        await conn.execute(
            "UPDATE sessionq.agents SET spec = jsonb_set(spec, '{template}', to_jsonb(%s::text)),"
            " conditions = jsonb_set(conditions, '{0,message}', to_jsonb(%s::text))", (NASTY, NASTY))
        await conn.execute("UPDATE sessionq.revisions SET failure_message = %s", (NASTY,))
    for args in (["agent", "list"], ["agent", "get", "my-first-agent"]):
        result = ok(await cli(*args))
        assert not CONTROL.search(result.stdout.replace("\n", "")), (args, result.stdout)
        assert "\\x1b]0;pwned\\x07" in result.stdout
    for output in ("json", "yaml"):
        result = ok(await cli("agent", "get", "my-first-agent", "-o", output))
        assert not CONTROL.search(result.stdout.replace("\n", "")), (output, result.stdout)


OLD_GET_OUTPUT = """\
agent:
  ref: {namespace: kagent, name: old-style}
  spec:
    ref: {namespace: kagent, name: old-style}
    template: example.com/agents/helper:1.0
  conditions: []
  desiredRevision: 0190b2c4-8f5e-7a10-9b2d-3c4d5e6f7a8b
"""

MANIFEST = """\
apiVersion: api.kagent.dev/v1alpha3
kind: Agent
metadata: {name: manifest, namespace: team-b}
spec:
  template: example.com/agents/helper:1.0
status: {conditions: []}
"""


async def test_older_documents_and_resources_apply(cli):
    """The output of earlier versions' `agent get -o yaml` and an Agent resource both apply."""
    assert "agent kagent/old-style applied (revision 1 created; READY)" in ok(
        await cli("agent", "apply", "-f", cli.spec(OLD_GET_OUTPUT))).stdout
    assert "agent team-b/manifest applied (revision 1 created; READY)" in ok(
        await cli("agent", "apply", "-f", cli.spec(MANIFEST, "manifest.yaml"))).stdout
    assert "unchanged, revision 1" in ok(await cli("agent", "apply", "-f", cli.spec(MANIFEST, "again.yaml"))).stdout
    wrong = one_error_line(await cli("agent", "apply", "-f", cli.spec(MANIFEST.replace("kind: Agent", "kind: Pod"),
                                                                       "pod.yaml")))
    assert "kind must be Agent" in wrong
