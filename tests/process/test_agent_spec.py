"""An Agent's command, args and env become its process runtime template (prepare_revision)."""

from __future__ import annotations

from pathlib import Path

from sessionq.db.store import Store
from sessionq.domain.agents import apply_spec, parse_spec, prepare_revision
from sessionq.models import RevisionState
from sessionq.runtime.process import ProcessConfig, ProcessSubstrate


async def test_a_revision_prepares_a_template_with_the_agents_command(store: Store, runtime: ProcessSubstrate) -> None:
    spec = parse_spec({"name": "runner", "command": ["python3"], "args": ["-m", "agent"], "env": {"MODEL": "small"}})
    await apply_spec(store, spec, "alice", False, "cluster.local")
    [rev] = await store.agent_revisions("kagent", "runner")
    assert await prepare_revision(store, runtime, rev.id) == RevisionState.READY
    template = await runtime.get_actor_template(rev.template_atespace, rev.template_name)
    assert template.command == ("python3",) and template.args == ("-m", "agent") and template.env == {"MODEL": "small"}


async def test_an_agent_without_a_command_fails_its_revision_with_a_clear_reason(
    store: Store, database_url: str, tmp_path: Path
) -> None:
    strict = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "strict", default_command=()))
    await strict.open()
    try:
        spec = parse_spec({"name": "imageonly", "template": "x.io/agent:1"})
        await apply_spec(store, spec, "alice", False, "cluster.local")
        [rev] = await store.agent_revisions("kagent", "imageonly")
        assert await prepare_revision(store, strict, rev.id) == RevisionState.FAILED
        [rev] = await store.agent_revisions("kagent", "imageonly")
        assert "needs a command" in (rev.failure_message or "")
    finally:
        await strict.close()
