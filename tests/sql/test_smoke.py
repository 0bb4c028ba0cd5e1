from uuid import uuid4

from conftest import apply_agent
from sessionq.operations import OperationExecutor


async def test_create_runs_through_executor(store, sim):
    await apply_agent(store, sim)
    adm = await store.admit_create("alice", "r1", "kagent", "my-first-agent", "")
    assert adm.outcome == "admitted"
    ex = OperationExecutor(store, sim, 120)
    out = await ex.run(adm.session.id)
    assert out.status == "completed", out
    assert out.session.state == "READY"
    actor = await sim.get_actor("kagent", f"session-{adm.session.id}")
    assert actor.state.value == "ACTOR_STATE_SUSPENDED"
    assert uuid4()
