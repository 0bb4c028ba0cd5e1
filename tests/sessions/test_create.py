"""Creating Sessions and preparing Agent revisions (CRE-*, AGT-*)."""

import pytest
from conftest import apply_agent
from lifecycle import AGENT, count, ready_session

from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
from sessionq.domain.operations import OperationExecutor
from sessionq.errors import SessionqError


async def apply_spec(store, sim, template: str, prepare: bool = True):
    spec = parse_spec({"name": AGENT, "template": template})
    await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                            compile_egress(spec), "alice")
    agent = await store.get_agent("kagent", AGENT)
    if prepare:
        await prepare_revision(store, sim, agent.desired_revision_id)
    return await store.get_agent("kagent", AGENT)


@pytest.mark.clause("CRE-1")
async def test_creation_pins_latest_successful_revision(store, sim):
    a1 = await apply_agent(store, sim)
    a2 = await apply_spec(store, sim, "image:v2")
    assert a2.latest_successful_revision_id != a1.latest_successful_revision_id
    s = await ready_session(store, sim)
    assert s.revision_id == a2.latest_successful_revision_id


@pytest.mark.clause("CRE-2")
async def test_pending_or_failed_revision_leaves_latest_successful_in_use(store, sim):
    a1 = await apply_agent(store, sim)
    pending = await apply_spec(store, sim, "image:pending", prepare=False)
    assert pending.desired_revision_id != a1.latest_successful_revision_id
    s = await ready_session(store, sim, "r-pending")
    assert s.revision_id == a1.latest_successful_revision_id
    await store.finish_revision(pending.desired_revision_id, None, "image pull failed")
    s2 = await ready_session(store, sim, "r-failed")
    assert s2.revision_id == a1.latest_successful_revision_id
    agent = await store.get_agent("kagent", AGENT)
    assert agent.latest_successful_revision_id == a1.latest_successful_revision_id


@pytest.mark.clause("CRE-3")
async def test_agent_without_successful_revision_cannot_create(store, sim):
    await apply_spec(store, sim, "never-prepared", prepare=False)
    with pytest.raises(SessionqError) as e:
        await store.admit_create("alice", "r1", "kagent", AGENT, "")
    assert e.value.sqlstate == "SQ412" and "no successfully prepared revision" in e.value.message
    assert await count(store, "SELECT count(*) FROM sessionq.sessions") == 0


@pytest.mark.clause("CRE-4")
async def test_creation_retry_keeps_original_revision(store, sim):
    a1 = await apply_agent(store, sim)
    s = await ready_session(store, sim, "same")
    await apply_spec(store, sim, "image:newer")
    again = await store.admit_create("alice", "same", "kagent", AGENT, "")
    assert again.outcome == "existing"
    assert again.session.id == s.id
    assert again.session.revision_id == a1.latest_successful_revision_id


@pytest.mark.clause("CRE-5")
async def test_deterministic_actor_created_suspended_then_ready(store, sim):
    await apply_agent(store, sim)
    adm = await store.admit_create("alice", "r", "kagent", AGENT, "")
    assert adm.session.state == "CREATING"
    assert adm.session.actor_name == f"session-{adm.session.id}"
    out = await OperationExecutor(store, sim, 120).run(adm.session.id)
    assert out.session.state == "READY"
    actor = await sim.get_actor("kagent", f"session-{adm.session.id}")
    assert actor.state.value == "ACTOR_STATE_SUSPENDED"
    assert actor.worker is None
    assert out.session.actor_uid == actor.uid


@pytest.mark.clause("CRE-6")
@pytest.mark.clause("AGT-2")
async def test_creation_never_resumes_to_probe(store, sim):
    agent = await apply_agent(store, sim)
    # preparing again establishes nothing new: one template, made once
    await prepare_revision(store, sim, agent.desired_revision_id)
    assert await sim.mutation_count(method="create_actor_template") == 1
    await ready_session(store, sim)
    assert await sim.mutation_count(method="resume_actor") == 0
    assert await sim.mutation_count(method="get_actor_template") == 0


@pytest.mark.clause("CRE-7")
async def test_creation_uses_template_namespace_and_provisions_nothing_else(store, sim):
    agent = await apply_agent(store, sim, namespace="team-a")
    rev = await store.get_revision(agent.latest_successful_revision_id)
    adm = await store.admit_create("alice", "r", "team-a", AGENT, "")
    out = await OperationExecutor(store, sim, 120).run(adm.session.id)
    assert out.session.actor_atespace == rev.template_atespace == "team-a"
    assert out.session.actor_template == f"team-a/{rev.template_name}"
    methods = sorted(c["method"] for c in await sim.calls() if c["method"] != "create_actor_template")
    assert methods == ["create_actor", "create_egress_policy"]


@pytest.mark.clause("CRE-8")
@pytest.mark.parametrize("request_id", ["", "x" * 129])
async def test_request_id_bounds(store, sim, request_id):
    await apply_agent(store, sim)
    with pytest.raises(SessionqError) as e:
        await store.admit_create("alice", request_id, "kagent", AGENT, "")
    assert e.value.sqlstate == "SQ400"
    assert await count(store, "SELECT count(*) FROM sessionq.sessions") == 0
    ok = await store.admit_create("alice", "x" * 128, "kagent", AGENT, "n" * 200)
    assert ok.outcome == "admitted"


@pytest.mark.clause("CRE-9")
async def test_request_id_reuse_with_other_parameters_conflicts(store, sim):
    await apply_agent(store, sim)
    await apply_agent(store, sim, name="other-agent")
    await store.admit_create("alice", "dup", "kagent", AGENT, "first")
    for agent, name in (("other-agent", "first"), (AGENT, "second")):
        with pytest.raises(SessionqError) as e:
            await store.admit_create("alice", "dup", "kagent", agent, name)
        assert e.value.sqlstate == "SQ422"
    # another user may use the same request id
    bob = await store.admit_create("bob", "dup", "kagent", AGENT, "first")
    assert bob.outcome == "admitted"
    assert await count(store, "SELECT count(*) FROM sessionq.sessions") == 2


@pytest.mark.clause("AGT-1")
async def test_agent_conditions_and_revisions(store, sim):
    spec = parse_spec({"name": AGENT})
    await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image, [], "alice")
    a = await store.get_agent("kagent", AGENT)
    cond = {c["type"]: c["status"] for c in a.conditions}
    assert cond == {"Accepted": "True", "ResolvedRefs": "True", "Compatible": "True", "Ready": "Unknown"}
    assert a.latest_successful_revision_id is None
    await prepare_revision(store, sim, a.desired_revision_id)
    a = await store.get_agent("kagent", AGENT)
    assert {c["type"]: c["status"] for c in a.conditions}["Ready"] == "True"
    assert a.latest_successful_revision_id == a.desired_revision_id
    # the same spec again makes no revision; a failed newer one keeps Ready but marks Compatible False
    assert not await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image, [], "alice")
    bad = await apply_spec(store, sim, "bad:image", prepare=False)
    await store.finish_revision(bad.desired_revision_id, None, "image not found")
    a = await store.get_agent("kagent", AGENT)
    cond = {c["type"]: c["status"] for c in a.conditions}
    assert cond["Ready"] == "True" and cond["Compatible"] == "False"
    assert a.desired_revision_id == bad.desired_revision_id != a.latest_successful_revision_id
