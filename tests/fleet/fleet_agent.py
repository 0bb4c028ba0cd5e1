"""An Agent prepared by the running worker, for the fleet's tests that run the `api` fixture (its
worker would race conftest's in-line preparation)."""

from __future__ import annotations

import asyncio
from typing import Any


async def prepared_agent(store: Any, name: str = "my-first-agent", namespace: str = "kagent") -> Any:
    from sessionq.domain.agents import compile_egress, parse_spec

    spec = parse_spec({"name": name, "namespace": namespace})
    await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                            compile_egress(spec), "alice")
    for _ in range(400):
        agent = await store.get_agent(namespace, name)
        if agent.latest_successful_revision_id:
            return agent
        await asyncio.sleep(0.05)
    raise AssertionError(f"agent {namespace}/{name} was not prepared within 20 s")
