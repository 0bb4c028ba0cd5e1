"""Egress policy (EGR-1..EGR-5): compiled at apply, persisted with the revision, applied from
PostgreSQL when the Actor is created and before it ever runs."""

from __future__ import annotations

import grpc
import pytest
from agentapi import resource, status_of
from conftest import apply_agent, make_settings
from lifecycle import AGENT, count
from psycopg.types.json import Jsonb

from sessionq._pb.kagent.api.v1alpha1 import agents_pb2, agents_pb2_grpc, common_pb2
from sessionq.api.server import ApiServer
from sessionq.domain.agents import compile_egress, parse_spec
from sessionq.domain.operations import OperationExecutor
from sessionq.errors import SessionqError
from sessionq.runtime.base import ActorState, Code, EgressRule, SubstrateError

EGRESS = [
    {"url": "https://api.openai.com/v1", "credentialHeaders": {"Authorization": "Bearer sk-model"}},
    {"url": "http://mcp.tools.svc.cluster.local:8080/mcp", "credentialHeaders": {"X-Api-Key": "mcp-key"}},
    {"url": "https://otel.observability.svc.cluster.local:4318"},
]


def compile_urls(*urls: str, cluster_domain: str = "cluster.local") -> list[dict]:
    spec = parse_spec({"name": "a", "egress": [{"url": u} for u in urls]})
    return compile_egress(spec, cluster_domain)


def rejected(*urls: str, cluster_domain: str = "cluster.local") -> str:
    with pytest.raises(SessionqError) as e:
        compile_urls(*urls, cluster_domain=cluster_domain)
    assert e.value.sqlstate == "SQ400"
    return e.value.message


async def revision_of(store):
    agent = await store.get_agent("kagent", AGENT)
    return agent.latest_successful_revision_id


async def create_session(store, sim, request_id: str = "r1"):
    adm = await store.admit_create("alice", request_id, "kagent", AGENT, "")
    return adm.session


# -- EGR-1: from the persisted policy, applied before the Actor runs ------------------------------


@pytest.mark.clause("EGR-1")
async def test_policy_comes_from_postgresql_and_is_applied_before_the_actor_runs(store, sim):
    await apply_agent(store, sim, egress=EGRESS)
    rev = await revision_of(store)
    # the persisted intended policy is what counts, not a recompilation of the spec
    persisted = [
        {"protocol": "https", "hostname": "only-in-postgres.example.com", "port": 8443,
         "credential_headers": {"X-Token": "t"}},
        *compile_egress(parse_spec({"name": AGENT, "egress": EGRESS})),
    ]
    async with store.pool.connection() as conn:
        await conn.execute("UPDATE sessionq.revisions SET egress = %s WHERE id = %s", (Jsonb(persisted), rev))
    session = await create_session(store, sim)
    out = await OperationExecutor(store, sim, 30).run(session.id)
    assert out.status == "completed" and out.session.state == "READY"
    policy = await sim.get_egress_policy(session.actor_atespace, session.actor_name)
    want = {EgressRule(r["protocol"], r["hostname"], r["port"], r["credential_headers"]) for r in persisted}
    assert set(policy.rules) == want
    # the policy exists right after creation, and the Actor never ran before it (nor after)
    methods = [c["method"] for c in await sim.calls(actor=session.actor_name)]
    assert methods == ["create_actor", "create_egress_policy"]
    actor = await sim.get_actor(session.actor_atespace, session.actor_name)
    assert actor.state == ActorState.SUSPENDED


@pytest.mark.clause("EGR-1")
async def test_creation_retry_finishes_the_egress_step_without_repeating_creation(store, sim):
    await apply_agent(store, sim, egress=EGRESS)
    session = await create_session(store, sim)
    await sim.inject("create_egress_policy", "fail_before", actor=session.actor_name)
    with pytest.raises(SubstrateError):
        await OperationExecutor(store, sim, 30).run(session.id)
    with pytest.raises(SubstrateError) as e:
        await sim.get_egress_policy(session.actor_atespace, session.actor_name)
    assert e.value.code == Code.NOT_FOUND  # the Actor exists, its policy does not (yet)
    out = await OperationExecutor(store, sim, 30).run(session.id)
    assert out.status == "completed"
    assert await sim.mutation_count(actor=session.actor_name, method="create_actor") == 1
    assert await sim.mutation_count(actor=session.actor_name, method="create_egress_policy") == 1
    assert await sim.mutation_count(actor=session.actor_name, method="resume_actor") == 0
    # a policy lost after creation took effect is found and kept, not created twice
    s2 = await create_session(store, sim, "r2")
    await sim.inject("create_egress_policy", "lose_after", actor=s2.actor_name)
    with pytest.raises(SubstrateError):
        await OperationExecutor(store, sim, 30).run(s2.id)
    assert (await OperationExecutor(store, sim, 30).run(s2.id)).status == "completed"
    assert await sim.mutation_count(actor=s2.actor_name) == 2  # create_actor + create_egress_policy


# -- EGR-2: protocol-specific rules; scheme, name, port kept; headers on their own rule --------------


@pytest.mark.clause("EGR-2")
def test_rules_keep_scheme_name_port_and_their_own_headers():
    spec = parse_spec({"name": "a", "egress": [
        *EGRESS,
        {"url": "https://api.openai.com:8443/other", "credentialHeaders": {"Authorization": "Bearer other"}},
        {"url": "HTTPS://Models.Example.COM"},
    ]})
    rules = {(r["protocol"], r["hostname"], r["port"]): r["credential_headers"] for r in compile_egress(spec)}
    assert rules == {
        ("https", "api.openai.com", 443): {"Authorization": "Bearer sk-model"},
        ("https", "api.openai.com", 8443): {"Authorization": "Bearer other"},
        ("http", "mcp.tools.svc.cluster.local", 8080): {"X-Api-Key": "mcp-key"},
        ("https", "otel.observability.svc.cluster.local", 4318): {},
        ("https", "models.example.com", 443): {},
    }
    # http keeps port 80 and its scheme; https defaults to 443
    assert compile_urls("http://plain.example.com") == [
        {"protocol": "http", "hostname": "plain.example.com", "port": 80, "credential_headers": {}}
    ]


@pytest.mark.clause("EGR-2")
async def test_runtime_policy_has_headers_on_the_deciding_rule(store, sim):
    await apply_agent(store, sim, egress=EGRESS)
    session = await create_session(store, sim)
    await OperationExecutor(store, sim, 30).run(session.id)
    policy = await sim.get_egress_policy(session.actor_atespace, session.actor_name)
    by_host = {(r.hostname, r.port): r for r in policy.rules}
    assert by_host[("api.openai.com", 443)].protocol == "https"
    assert by_host[("api.openai.com", 443)].credential_headers == {"Authorization": "Bearer sk-model"}
    assert by_host[("mcp.tools.svc.cluster.local", 8080)].protocol == "http"
    assert by_host[("mcp.tools.svc.cluster.local", 8080)].credential_headers == {"X-Api-Key": "mcp-key"}
    assert by_host[("otel.observability.svc.cluster.local", 4318)].credential_headers == {}


# -- EGR-3: two protocols on one host and port: rejected before any Actor exists ---------------------


@pytest.mark.clause("EGR-3")
def test_two_protocols_on_one_host_and_port_are_rejected_naming_the_entry():
    message = rejected("https://api.example.com", "http://api.example.com:443/x")
    assert "egress[1]" in message and "http://api.example.com:443/x" in message
    assert "api.example.com:443" in message
    # same protocol twice is fine; different ports are fine
    assert len(compile_urls("https://api.example.com/a", "https://api.example.com:443/b")) == 1
    assert len(compile_urls("https://api.example.com", "http://api.example.com")) == 2


@pytest.mark.clause("EGR-3")
async def test_store_path_rejects_before_any_agent_revision_or_actor(store, sim):
    with pytest.raises(SessionqError) as e:
        await apply_agent(store, sim, egress=[{"url": "https://x.example.com"}, {"url": "http://x.example.com:443"}])
    assert e.value.sqlstate == "SQ400" and "egress[1]" in e.value.message
    assert await count(store, "SELECT count(*) FROM sessionq.agents") == 0
    assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 0
    assert await sim.mutation_count() == 0


# -- EGR-4: literal IP addresses --------------------------------------------------------------------


@pytest.mark.clause("EGR-4")
@pytest.mark.parametrize("url", [
    "http://10.0.0.7:8080/v1",
    "https://192.168.1.1",
    "http://[::1]:8080/",
    "https://[2001:db8::1]/mcp",
    "http://[::ffff:10.0.0.1]:80",
])
def test_literal_ip_addresses_are_rejected(url):
    message = rejected("https://ok.example.com", url)
    assert f"egress[1] ({url})" in message and "IP" in message


# -- EGR-5: fully qualified names; configurable cluster domain ----------------------------------------


@pytest.mark.clause("EGR-5")
@pytest.mark.parametrize("url", [
    "http://kagent-controller:8083",
    "http://kagent-controller.kagent.svc:8083",
    "http://kagent-controller.kagent.svc.cluster:8083",
])
def test_short_names_are_rejected(url):
    message = rejected(url)
    assert f"egress[0] ({url})" in message and "fully qualified" in message
    assert "svc.cluster.local" in message


@pytest.mark.clause("EGR-5")
def test_full_names_are_accepted_and_the_cluster_domain_is_configurable():
    full = "http://kagent-controller.kagent.svc.cluster.local:8083"
    assert compile_urls(full)[0]["hostname"] == "kagent-controller.kagent.svc.cluster.local"
    custom = "http://kagent-controller.kagent.svc.corp.example:8083"
    assert compile_urls(custom, cluster_domain="corp.example")[0]["hostname"] == (
        "kagent-controller.kagent.svc.corp.example"
    )
    message = rejected("http://kagent-controller.kagent.svc:8083", cluster_domain="corp.example")
    assert "svc.corp.example" in message  # the suggested full name uses the configured domain


# -- the API path: ApplyAgent answers INVALID_ARGUMENT naming the entry and writes nothing --------------


@pytest.mark.clause("EGR-3")
@pytest.mark.clause("EGR-4")
@pytest.mark.clause("EGR-5")
async def test_apply_agent_rejects_bad_egress_and_writes_nothing(store, sim):
    settings = make_settings(**{"global.clusterDomain": "corp.example"})
    server = ApiServer(settings, store, address="127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        stub = agents_pb2_grpc.AgentServiceStub(channel)
        md = [("authorization", "Bearer alice-token")]
        ref = common_pb2.ResourceReference(namespace="kagent", name="my-agent")
        cases = {
            "https://api.example.com|http://api.example.com:443": "egress[1] (http://api.example.com:443)",
            "http://10.1.2.3:8080": "egress[0] (http://10.1.2.3:8080)",
            "https://[fd00::1]": "egress[0] (https://[fd00::1])",
            "http://kagent-controller:8083": "egress[0] (http://kagent-controller:8083)",
        }
        for urls, named in cases.items():
            egress = [{"url": u} for u in urls.split("|")]
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.CreateAgent(
                    agents_pb2.CreateAgentRequest(ref=ref, resource=resource({"egress": egress})), metadata=md, timeout=10
                )
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert named in e.value.details()
        assert await count(store, "SELECT count(*) FROM sessionq.agents") == 0
        assert await count(store, "SELECT count(*) FROM sessionq.revisions") == 0
        assert await count(store, "SELECT count(*) FROM procrastinate_jobs") == 0
        # with the configured domain, its full names are accepted
        good = resource({"egress": [{"url": "http://tools.kagent.svc.corp.example:8080"}]})
        r = await stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref, resource=good), metadata=md, timeout=10)
        assert status_of(r.agent)["revisions"][0]["number"] == 1
    finally:
        await channel.close()
        await server.stop(0)
    assert await sim.mutation_count() == 0


# -- known gaps of compile_egress (src/sessionq/agents.py), reported to the lead -----------------------


@pytest.mark.clause("EGR-4")
@pytest.mark.parametrize("url", ["http://127.1:8080", "http://0x7f.0.0.1", "http://0177.0.0.1"])
def test_shorthand_ipv4_literals_are_rejected(url):
    rejected(url)


@pytest.mark.clause("EGR-2")
def test_port_zero_is_not_silently_the_default_port():
    rejected("http://api.example.com:0")
