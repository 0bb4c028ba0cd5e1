"""Usage per Session on the process runtime: each snapshot counted with its archive's size on disk,
as the runtime reports it (Snapshot.size_bytes), for a scripted sequence of turns (FLEET-5)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from uuid import UUID

import pytest

from sessionq._pb.sessionq.v1 import fleet_pb2, fleet_pb2_grpc
from tests.process.test_first_agent import ProcessApi, actor_of, answer, new_session, papi, send

__all__ = ["papi"]  # the fixture, shared with test_first_agent.py


async def _quiesced(api: ProcessApi, sid: str, after: int | None) -> int:
    """Wait until the Session's quiescence recorded a snapshot generation newer than `after`."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        s = await api.store.session_by_id(UUID(sid))
        assert s is not None
        if (s.snapshot_generation is not None and s.snapshot_generation != after and s.idle_boundary_id is None
                and s.active_task_id is None and s.dispatch_id is None):
            return s.snapshot_generation
        await asyncio.sleep(0.05)
    raise AssertionError("the Session was not quiesced")


async def _usage(api: ProcessApi, sid: str) -> fleet_pb2.SessionUsage:
    stub = fleet_pb2_grpc.FleetServiceStub(api.channel)
    response = await stub.GetSessionUsage(fleet_pb2.GetSessionUsageRequest(session_id=sid), metadata=api.md(),
                                          timeout=10)
    return response.usage


@pytest.mark.clause("FLEET-5")
@pytest.mark.timeout(240)
async def test_usage_counts_each_snapshot_with_its_archives_size(papi: ProcessApi) -> None:
    sid = await new_session(papi, "usage-1", agent="echo")
    before = await _usage(papi, sid)
    assert before.snapshot_bytes == 0 and before.snapshots_sized == before.snapshots
    generation = (await papi.store.session_by_id(UUID(sid))).snapshot_generation
    sizes = []
    for n, text in enumerate(("one", "two " * 200, "three " * 2000), start=1):
        assert answer(await send(papi, text, sid, agent="echo")) == f"noted {n}"
        generation = await _quiesced(papi, sid, generation)
        actor = await actor_of(papi, sid)
        snap = next(s for s in actor.snapshots if s.generation == generation)
        on_disk = (await asyncio.to_thread(Path(snap.uri.removeprefix("file://")).stat)).st_size
        assert snap.size_bytes == on_disk > 0  # the archive's size, as the runtime reports it
        sizes.append(on_disk)
    assert len(set(sizes)) == len(sizes)  # the memory file grew with every turn: so did the archive
    usage = await _usage(papi, sid)
    assert usage.snapshots - before.snapshots == len(sizes)
    assert usage.snapshots_sized == usage.snapshots  # the process runtime knows every size
    assert usage.snapshot_bytes == sum(sizes)
