"""Agent credentials are write-only (issue 15, item 2) and Agent input is checked (item 4).

Credential header values are never returned by the API, to anyone (another user, the owner, an
administrator), nor shown by a psql view or a log line; they read `<redacted>` (empty when the value
is empty). The runtime still gets the real values. Applying a spec that holds the marker keeps the
stored value of that header on the same URL, so `get` then `apply` of the same spec changes nothing.
URLs with user info are refused without echoing the password; templates must be image references;
URLs and header values hold no control characters.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any
from uuid import UUID

import grpc
import pytest
from agentapi import Applied, spec_of, status_of
from agentapi import apply as apply_agent
from lifecycle import count

from sessionq._pb.kagent.api.v1alpha1 import agents_pb2, agents_pb2_grpc, common_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.domain.agents import REDACTED, check_template, parse_spec
from sessionq.errors import SessionqError

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)

SECRET = "Bearer sk-alice-0123456789"
MCP_SECRET = "mcp-key-9876543210"
URL = "https://api.openai.example.com/v1"
MCP_URL = "http://mcp.tools.svc.cluster.local:8080/mcp"
REF = common_pb2.ResourceReference(namespace="kagent", name="secret-agent")


def spec_msg(template: str = "example.com/agents/helper:1.0", secret: str = SECRET, mcp: str = MCP_SECRET
             ) -> dict[str, Any]:
    return {
        "template": template,
        "egress": [
            {"url": URL, "credentialHeaders": {"Authorization": secret}},
            {"url": MCP_URL, "credentialHeaders": {"X-Api-Key": mcp, "X-Empty": ""}},
            {"url": "https://otel.observability.svc.cluster.local:4318", "credentialHeaders": {}},
        ],
    }


def md(user: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {user}-token")]


async def apply(stub: Any, spec: dict[str, Any], user: str = "alice") -> Applied:
    return await apply_agent(stub, spec, name=REF.name, metadata=md(user))


async def refused(call: Any, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    assert e.value.code() == code, e.value.details()
    return e.value.details() or ""


def no_secret(data: bytes | str) -> None:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    for secret in (SECRET, MCP_SECRET, "sk-alice", "mcp-key"):
        assert secret not in text


def shows_redacted(agent: agents_pb2.Agent) -> None:
    no_secret(agent.SerializeToString())
    headers = {e["url"]: e.get("credentialHeaders") or {} for e in spec_of(agent)["egress"]}
    assert headers == {
        URL: {"Authorization": REDACTED},
        MCP_URL: {"X-Api-Key": REDACTED, "X-Empty": ""},  # empty: no value is set
        "https://otel.observability.svc.cluster.local:4318": {},
    }


async def stored_values(store: Any) -> list[dict[str, str]]:
    """The credential header values of every revision's compiled egress, newest last."""
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT r.egress FROM sessionq.revisions r WHERE agent_name = %s ORDER BY number", (REF.name,))
        return [{h: v for rule in row["egress"] for h, v in rule["credential_headers"].items()}
                for row in await cur.fetchall()]


@pytest.fixture
def stub(api: Any) -> agents_pb2_grpc.AgentServiceStub:
    return agents_pb2_grpc.AgentServiceStub(api.channel)


# -- every read path, as another user, the owner and an administrator --------------------------------


@pytest.mark.parametrize("reader", ["bob", "alice", "admin"])
async def test_no_read_path_returns_credential_values(api, stub, reader):
    applied = await apply(stub, spec_msg())
    shows_redacted(applied.agent)  # not even the apply's own answer echoes them
    got = await stub.GetAgent(agents_pb2.GetAgentRequest(ref=REF), metadata=md(reader), timeout=10)
    shows_redacted(got.agent)
    listed = await stub.ListAgents(agents_pb2.ListAgentsRequest(namespace="kagent"), metadata=md(reader), timeout=10)
    assert [a.ref.name for a in listed.agents] == [REF.name]
    shows_redacted(listed.agents[0])
    one_ns = await stub.ListAgents(agents_pb2.ListAgentsRequest(namespace="kagent"), metadata=md(reader), timeout=10)
    shows_redacted(one_ns.agents[0])


async def test_the_runtime_gets_the_real_values(api, stub, store, sim):
    await apply(stub, spec_msg())
    await wait_ready(stub)
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)
    created = await sessions.CreateSession(
        sessions_pb2.CreateSessionRequest(request_id="s1", agent=REF), metadata=md("alice"), timeout=20)
    row = await store.get_session(UUID(created.session.id), "alice")
    policy = await sim.get_egress_policy(row.actor_atespace, row.actor_name)
    by_host = {r.hostname: r.credential_headers for r in policy.rules}
    assert by_host["api.openai.example.com"] == {"Authorization": SECRET}
    assert by_host["mcp.tools.svc.cluster.local"] == {"X-Api-Key": MCP_SECRET, "X-Empty": ""}
    no_secret(created.SerializeToString())


async def wait_ready(stub: Any) -> agents_pb2.Agent:
    for _ in range(200):
        agent = (await stub.GetAgent(agents_pb2.GetAgentRequest(ref=REF), metadata=md("alice"), timeout=10)).agent
        if status_of(agent)["latestSuccessfulRevision"] == status_of(agent)["desiredRevision"]:
            return agent
        await asyncio.sleep(0.05)
    raise AssertionError("the revision was not prepared in 10 s")


# -- the redacted marker round-trips ------------------------------------------------------------------


async def test_applying_what_get_returned_keeps_the_stored_values(api, stub, store):
    first = await apply(stub, spec_msg())
    assert first.revision_created
    seen = (await stub.GetAgent(agents_pb2.GetAgentRequest(ref=REF), metadata=md("alice"), timeout=10)).agent
    # the spec as read (markers included) applied again: unchanged, no new revision (same spec hash)
    again = await apply(stub, spec_of(seen))
    assert not again.revision_created
    assert await stored_values(store) == [{"Authorization": SECRET, "X-Api-Key": MCP_SECRET, "X-Empty": ""}]
    # an administrator changes the template of Alice's Agent from what it read: the secrets stay
    edited = copy.deepcopy(spec_of(seen))
    edited["template"] = "example.com/agents/helper:2.0"
    assert (await apply(stub, edited, user="admin")).revision_created
    assert (await stored_values(store))[-1] == {"Authorization": SECRET, "X-Api-Key": MCP_SECRET, "X-Empty": ""}
    # the marker is matched by header name case-insensitively, on the same URL
    lower = copy.deepcopy(edited)
    lower["egress"][0]["credentialHeaders"].clear()
    lower["egress"][0]["credentialHeaders"]["authorization"] = REDACTED
    assert (await apply(stub, lower)).revision_created  # the header's spelling changed
    assert (await stored_values(store))[-1]["authorization"] == SECRET
    # a new value replaces the stored one
    assert (await apply(stub, spec_msg(secret="Bearer rotated"))).revision_created
    assert (await stored_values(store))[-1]["Authorization"] == "Bearer rotated"
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM sessionq.revisions WHERE spec::text LIKE %s OR egress::text LIKE %s",
                                 (f"%{REDACTED}%", f"%{REDACTED}%"))
        assert (await cur.fetchone())["count"] == 0  # the marker itself is never stored


async def test_a_marker_without_a_stored_value_is_refused(api, stub, store):
    # no Agent yet: nothing to keep
    details = await refused(apply(stub, spec_msg(secret=REDACTED)))
    assert "egress[0].credentialHeaders" in details and "Authorization" in details and "no stored value" in details
    assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 0
    await apply(stub, spec_msg())
    # another URL: a secret is kept only for the URL it was given for (it cannot be sent elsewhere)
    moved = spec_msg()
    moved["egress"][0]["url"] = "https://attacker.example.com/v1"
    moved["egress"][0]["credentialHeaders"]["Authorization"] = REDACTED
    details = await refused(apply(stub, moved, user="admin"))
    assert "no stored value" in details
    # another header name on the same URL
    other = spec_msg()
    other["egress"][0]["credentialHeaders"]["X-Other"] = REDACTED
    await refused(apply(stub, other))
    assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 1
    # another user may not apply it at all, markers or not
    await refused(apply(stub, spec_msg(secret=REDACTED), user="bob"), grpc.StatusCode.PERMISSION_DENIED)


async def test_a_stale_base_revision_is_refused(store):
    """The procedure refuses an apply whose kept credentials came from a revision that is no longer
    the desired one (another apply came in between): the caller reads again."""
    spec = parse_spec({"name": REF.name, "egress": [{"url": URL, "credentialHeaders": {"Authorization": SECRET}}]})
    from sessionq.domain.agents import compile_egress

    async def raw_apply(s: Any, base: Any = None) -> bool:
        return await store.apply_agent(s.namespace, s.name, s.to_json(), s.spec_hash(), s.image, compile_egress(s),
                                       "alice", False, base)

    await raw_apply(spec)
    base = (await store.get_agent("kagent", REF.name)).desired_revision_id
    await raw_apply(parse_spec({**spec.to_json(), "template": "image:2"}))
    with pytest.raises(SessionqError) as e:
        await raw_apply(parse_spec({**spec.to_json(), "template": "image:3"}), base)
    assert e.value.sqlstate == "SQ409" and "apply again" in e.value.message
    await store.delete_agent("kagent", REF.name, "alice")
    with pytest.raises(SessionqError) as e:
        await raw_apply(spec, base)
    assert e.value.sqlstate == "SQ409"


async def test_racing_appliers_never_keep_a_stale_or_marker_value(api, stub, store):
    """Alice rotates her secret while administrators apply template changes from specs holding the
    marker. Applies are serialized per Agent, so a kept value must be the one of the revision just
    before: never an older value (read before another apply came in) and never the marker."""
    await apply(stub, spec_msg(secret="Bearer v0"))
    marked = spec_msg(secret=REDACTED, mcp=REDACTED)

    async def rotate(i: int) -> None:
        await apply(stub, spec_msg(template=f"example.com/agents/helper:alice-{i}", secret=f"Bearer v{i + 1}"))

    async def keep(i: int) -> None:
        edited = copy.deepcopy(marked)
        edited["template"] = f"example.com/agents/helper:admin-{i}"
        try:
            await apply(stub, edited, user="admin")
        except grpc.aio.AioRpcError as e:  # three reads in a row overtaken: told to apply again
            assert e.code() == grpc.StatusCode.ABORTED and "apply again" in (e.details() or "")

    await asyncio.gather(*(f(i) for i in range(12) for f in (rotate, keep)))
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT spec ->> 'template' AS template, spec FROM sessionq.revisions WHERE agent_name = %s ORDER BY number",
            (REF.name,))
        revisions = await cur.fetchall()
    values = [{e["url"]: e["credentialHeaders"] for e in r["spec"]["egress"]}[URL]["Authorization"]
              for r in revisions]
    assert REDACTED not in values
    kept = 0
    for n in range(1, len(revisions)):
        if ":admin-" in revisions[n]["template"]:
            assert values[n] == values[n - 1], (n, values)
            kept += 1
        else:
            assert values[n] == f"Bearer v{int(revisions[n]['template'].rsplit('-', 1)[1]) + 1}"
    assert kept >= 1
    assert await stored_values(store) and all(v["X-Api-Key"] == MCP_SECRET for v in await stored_values(store))


# -- psql views and log lines -----------------------------------------------------------------------


async def test_no_view_shows_credential_values(api, stub, store, aconn):
    await apply(stub, spec_msg())
    await wait_ready(stub)
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)
    await sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id="v1", agent=REF), metadata=md("alice"),
                                 timeout=20)
    cur = await aconn.execute(
        "SELECT table_schema, table_name FROM information_schema.views"
        " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')")
    views = await cur.fetchall()
    assert ("sessionq", "agent_overview") in views and ("sessionq", "job_overview") in views
    for schema, name in views:
        cur = await aconn.execute(f"SELECT coalesce(string_agg(v::text, ' '), '') FROM \"{schema}\".\"{name}\" v")
        text = (await cur.fetchone())[0]
        no_secret(text)
    cur = await aconn.execute("SELECT spec, live_sessions FROM sessionq.agent_overview")
    spec, live = await cur.fetchone()
    assert live == 1
    assert {e["url"]: e["credentialHeaders"] for e in spec["egress"]}[MCP_URL] == {"X-Api-Key": REDACTED, "X-Empty": ""}


@pytest.mark.parametrize("spec, shown", [
    ({"name": "a"}, {"name": "a"}),
    ({"name": "a", "egress": []}, {"name": "a", "egress": []}),
    ({"egress": [{"url": "u"}, {"url": "v", "credentialHeaders": {}}]},
     {"egress": [{"url": "u"}, {"url": "v", "credentialHeaders": {}}]}),
    ({"egress": [{"url": "u", "credentialHeaders": {"A": "s1", "B": "", "C": REDACTED}}, {"url": "w",
      "credentialHeaders": {"D": "s2"}}]},
     {"egress": [{"url": "u", "credentialHeaders": {"A": REDACTED, "B": "", "C": REDACTED}}, {"url": "w",
      "credentialHeaders": {"D": REDACTED}}]}),
])
async def test_sql_and_python_redact_alike(aconn, spec, shown):
    from psycopg.types.json import Jsonb

    from sessionq.domain.agents import redact_spec

    cur = await aconn.execute("SELECT sessionq.redact_agent_spec(%s)", (Jsonb(spec),))
    assert (await cur.fetchone())[0] == shown
    if "egress" in spec:
        assert redact_spec(spec) == shown


async def test_no_log_line_shows_credential_values(api, stub, caplog):
    caplog.set_level(logging.DEBUG)
    await apply(stub, spec_msg())
    await wait_ready(stub)
    await refused(apply(stub, spec_msg(template="Not An Image")))
    await refused(apply(stub, spec_msg(secret="Bearer x\r\nX-Injected: 1")))
    bad_url = spec_msg()
    bad_url["egress"][0]["url"] = f"https://user:{MCP_SECRET}@api.example.com"
    await refused(apply(stub, bad_url))
    await stub.ListAgents(agents_pb2.ListAgentsRequest(namespace="kagent"), metadata=md("bob"), timeout=10)
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)
    await sessions.CreateSession(sessions_pb2.CreateSessionRequest(request_id="l1", agent=REF), metadata=md("alice"),
                                 timeout=20)
    assert caplog.records
    for record in caplog.records:
        no_secret(record.getMessage())
        no_secret(logging.Formatter().format(record))


# -- URLs: no user info, no control characters ---------------------------------------------------------


@pytest.mark.parametrize("url", [
    f"https://user:{MCP_SECRET}@api.example.com/v1",
    f"https://{MCP_SECRET}@api.example.com",
    f"https://:{MCP_SECRET}@api.example.com",
    f"https://api.example.com:{MCP_SECRET}@evil.example.com",
    f"https://user:{MCP_SECRET}@api.example.com@evil.example.com",
])
async def test_urls_with_user_info_are_refused_without_echoing_them(api, stub, store, url):
    spec = spec_msg()
    spec["egress"][1]["url"] = url
    details = await refused(apply(stub, spec))
    assert details.startswith("egress[1].url must not contain a user name or password")
    no_secret(details)
    assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 0


@pytest.mark.parametrize("url", [
    "https://api.example.com/v1\r\nX-Injected: 1",
    "https://api.example.com/\n",
    "https://api.example.com/\r",
    "https://api.exa\tmple.com/",
    "https://api.example.com/\x1b]0;pwned\x07",
    "https://api.example.com/\x7f",
    "https://api.example.com/\x9b31m",
    "https://api.example.com/a b",
])
async def test_urls_with_control_characters_are_refused(api, stub, store, url):
    spec = spec_msg()
    spec["egress"][0]["url"] = url
    details = await refused(apply(stub, spec))
    assert details == "egress[0].url must not contain spaces or control characters"
    assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 0


async def test_header_values_with_control_characters_are_refused_without_echo(api, stub, store):
    for value in (f"{SECRET}\r\nX-Injected: 1", f"{SECRET}\n", f"{SECRET}\x1b[2J", f"{SECRET}\x85"):
        details = await refused(apply(stub, spec_msg(secret=value)))
        assert "egress[0].credentialHeaders" in details and "'Authorization'" in details
        assert "control characters" in details
        no_secret(details)
    assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 0
    assert (await apply(stub, spec_msg(secret="Bearer a\tb"))).revision_created  # a tab is allowed in a value


async def test_an_invalid_url_is_invalid_argument_not_internal(api, stub):
    spec = spec_msg()
    spec["egress"][0]["url"] = "http://[not-an-address"
    assert "is not a valid URL" in await refused(apply(stub, spec))


# -- templates: OCI image references -------------------------------------------------------------------

GOOD_TEMPLATES = [
    "image:v2", "bad:image", "never-prepared", "example.com/agents/helper:1.0", "localhost:5000/team/agent:latest",
    "registry.example.com/team/agent@sha256:" + "0" * 64, "registry.example.com/a/b:1.0@sha256:" + "a" * 64,
    "[::1]:5000/agent", "a__b/c-d--e.f_g:V1.2-rc_1", "Registry.Example.com/agent", "x@sha512:" + "f" * 128,
    "x@multihash+base58:" + "1" * 32,
]
BAD_TEMPLATES = [
    "image\n", "image:v1\nINJECTED", "\x1b]0;pwned\x07", "\x1b[31mred", "ima\rge", "Image:v1", "a b", "",
    "x:" + "t" * 129, "x:-tag", "x@sha256:" + "0" * 63, "x@sha256:abc", "foo//bar", "/x", "x/", "x:", "x@",
    "https://example.com/x", "a" * 256, "x/" + "y" * 254, "ïmage", "image:v1 ", "x" * 513, "-x", "x--",
]


@pytest.mark.parametrize("template", GOOD_TEMPLATES)
def test_image_references_are_accepted(template):
    assert check_template(template) == template
    assert parse_spec({"name": "a", "template": template}).template == template


@pytest.mark.parametrize("template", [t for t in BAD_TEMPLATES if t])
def test_other_templates_are_refused(template):
    with pytest.raises(SessionqError) as e:
        parse_spec({"name": "a", "template": template})
    assert e.value.sqlstate == "SQ400" and e.value.message.startswith("template")
    assert template not in e.value.message  # the value is never echoed (it may hold anything)


async def test_apply_agent_refuses_a_template_that_is_no_image_reference(api, stub, store):
    for template in ("image:v1\nINJECTED", "\x1b]0;pwned\x07", "x" * 512):
        details = await refused(apply(stub, spec_msg(template=template)))
        assert details.startswith("template must be an image reference such as registry.example.com/team/agent:1.0")
        assert template not in details
    assert await count(store, "SELECT count(*) FROM sessionq.agents") == 0
    assert (await apply(stub, spec_msg(template=""))).revision_created  # empty: the runtime's default
