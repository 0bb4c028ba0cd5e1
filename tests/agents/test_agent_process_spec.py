"""The Agent spec says what the Actor runs: command, args and env next to the template (issue 18).
Validated with a clear message and nothing written; stored, shown back, and handed to the runtime
as the actor template's command, args and env."""

from __future__ import annotations

import grpc
import pytest
from agentapi import ref, resource, spec_of
from lifecycle import count

from sessionq._pb.kagent.api.v1alpha1 import agents_pb2, agents_pb2_grpc
from sessionq.domain.agents import parse_spec, process_of

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)


@pytest.fixture
def stub(api):
    return agents_pb2_grpc.AgentServiceStub(api.channel)


async def test_command_args_env_are_stored_and_shown(api, stub, store):
    spec = {
        "template": "example.com/agents/helper:1.0",
        "command": ["python3", "-m", "my_agent"],
        "args": ["--verbose"],
        "env": {"MODEL": "small", "LOG_LEVEL": "debug"},
    }
    created = (await stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref("runner"), resource=resource(spec, "runner")),
                                      metadata=api.md("alice"), timeout=10)).agent
    shown = spec_of(created)
    assert shown["command"] == spec["command"] and shown["args"] == spec["args"] and shown["env"] == spec["env"]
    [rev] = await store.agent_revisions("kagent", "runner")
    assert process_of(rev.spec) == {"command": spec["command"], "args": spec["args"], "env": spec["env"]}


def test_a_spec_without_them_hashes_as_before():
    plain = parse_spec({"name": "a", "template": "x.io/a:1"})
    assert set(plain.to_json()) == {"namespace", "name", "template", "egress"}
    full = parse_spec({"name": "a", "template": "x.io/a:1", "command": ["run"], "env": {"A": "1"}})
    assert full.to_json()["command"] == ["run"] and full.spec_hash() != plain.spec_hash()
    assert process_of(full.to_json()) == {"command": ["run"], "env": {"A": "1"}}


@pytest.mark.parametrize(("spec", "says"), [
    ({"command": "python agent.py"}, "command must be a list of strings"),
    ({"command": ["python", 3]}, "command must be a list of strings"),
    ({"command": [""]}, "command[0] (the program) must not be empty"),
    ({"command": ["x"] * 65}, "command has 65 items; at most 64"),
    ({"args": ["a" * 4097]}, "args[0] is longer than 4096 characters"),
    ({"args": ["a\x00b"]}, "NUL"),
    ({"env": ["A=1"]}, "env must map variable names to string values"),
    ({"env": {"A=B": "1"}}, "is not a variable name"),
    ({"env": {"A": 1}}, "the value of 'A' must be a string"),
    ({"env": {"SESSIONQ_WORKLOAD_TOKEN": "x"}}, "names starting with SESSIONQ_ are set by sessionq"),
    ({"env": {f"V{i}": "x" for i in range(33)}}, "env has 33 variables; at most 32"),
])
async def test_bad_command_args_env_are_refused_and_nothing_is_written(api, stub, store, spec, says):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.CreateAgent(agents_pb2.CreateAgentRequest(ref=ref("bad"), resource=resource(spec, "bad")),
                               metadata=api.md("alice"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert says in (e.value.details() or "")
    assert await count(store, "SELECT count(*) FROM sessionq.agents") == 0
