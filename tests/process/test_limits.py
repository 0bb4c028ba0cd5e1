"""Resource limits of a sandboxed Actor (limits.py): a real agent (hog_agent.py) served through the API
and the worker, at each sandboxed isolation level this machine has. A turn that takes more memory
than its sandbox may have fails with the reason in the Actor's crash message, and the host and the
other Actors go on; a busy turn gets no more CPU than its sandbox's limit."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2

from sessionq.db.store import Store
from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
from sessionq.runtime.base import ActorState
from sessionq.runtime.process import ProcessSubstrate
from sessionq.runtime.process.limits import ActorGroup, ControlGroups, Limits
from sessionq.runtime.process.sandbox import Isolation, Sandbox
from tests.conftest import running_worker
from tests.process.conftest import LEVELS, config, processes_with
from tests.process.test_first_agent import NS, ProcessApi, actor_of, answer, new_session, send

HOG = str(Path(__file__).with_name("hog_agent.py"))
SANDBOXED = [p for p in LEVELS if p.values[0] != Isolation.NONE]  # type: ignore[attr-defined]
MEMORY = 256 << 20
CPUS = 0.5


@contextlib.asynccontextmanager
async def _served(level: Isolation, settings: Any, store: Store, database_url: str, root: Path, memory: int,
                  cgroups: bool = True) -> AsyncIterator[ProcessApi]:
    """The API and a worker over a process runtime whose sandboxes may have `memory` bytes and half a
    core, with the hog agent (`cgroups` False: as on a machine without a writable cgroup hierarchy)."""
    from sessionq.api.server import ApiServer

    runtime = ProcessSubstrate(database_url, config(root, level, slots=4, stop_grace=2.0,
                                                    warm_interpreters=1 if cgroups else 0,
                                                    memory_limit=memory, cpu_limit=CPUS))
    await runtime.open()
    if not cgroups:
        assert runtime.cgroups is not None
        await asyncio.to_thread(runtime.cgroups.close)
        runtime.cgroups = None
    try:
        async with running_worker(settings, database_url, store, runtime):
            server = ApiServer(settings, store, address="127.0.0.1:0", runtime=runtime)
            await server.start()
            runtime.taskstore_address = f"127.0.0.1:{server.port}"
            channel = grpc.aio.insecure_channel(runtime.taskstore_address)
            spec = parse_spec({"name": "hog", "command": [sys.executable, HOG]})
            await store.apply_agent(NS, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                                    compile_egress(spec), "alice")
            await prepare_revision(store, runtime, (await store.get_agent(NS, spec.name)).desired_revision_id)
            try:
                yield ProcessApi(channel, runtime, store)
            finally:
                await channel.close()
                await server.stop(0)
    finally:
        await runtime.close()
    assert processes_with(str(root)) == [], "no agent process outlives the runtime"


@pytest.fixture(params=SANDBOXED)
async def limited(request: pytest.FixtureRequest, settings: Any, store: Store, database_url: str,
                  tmp_path: Path) -> AsyncIterator[ProcessApi]:
    """`_served` with 256 MiB at each sandboxed level."""
    async with _served(request.param, settings, store, database_url, tmp_path / "runtime", MEMORY) as api:
        yield api


def test_this_machine_gives_the_sandboxes_control_groups() -> None:
    """What the limits below rely on (skipped where the machine has no writable cgroup hierarchy:
    limits.py says what applies then)."""
    groups, how = ControlGroups.detect("probe")
    if groups is None:
        pytest.skip(how)
    assert groups.cpu and groups.pids, how
    limits = Limits(memory=MEMORY, cpus=CPUS, processes=64)
    plain, gvisor = groups.create("plain", limits), groups.create("gvisor", limits, gvisor=True)
    try:
        pids = [next(d for d in g.dirs if (d / "pids.max").exists()) / "pids.max" for g in (plain, gvisor)]
        # under gVisor the group holds gVisor's own host tasks: no pids.max (RLIMIT_NPROC inside instead)
        assert [p.read_text().strip() for p in pids] == ["64", "max"]
    finally:
        plain.remove()
        gvisor.remove()
        groups.close()


@pytest.mark.clause("RT-9")
async def test_a_memory_hog_is_stopped_and_the_other_actors_keep_working(limited: ProcessApi) -> None:
    api = limited
    if api.runtime.cgroups is None:
        pytest.skip("no writable cgroup hierarchy here: the memory limit is RLIMIT_AS (limits.py)")
    hog = await new_session(api, "hog-1", agent="hog")
    other = await new_session(api, "other-1", agent="hog")
    assert answer(await send(api, "memory 50", hog, agent="hog")) == "holding 50 MiB", "below the limit: served"
    # the turn fails: as a FAILED task once the agent had stored it, else the call itself (retryable)
    try:
        failed = await send(api, "memory 600", hog, agent="hog")
    except grpc.aio.AioRpcError as e:
        assert e.code() == grpc.StatusCode.UNAVAILABLE, e
        assert "the agent failed while running the turn" in (e.details() or ""), e
    else:
        assert failed.status.state == a2a_pb2.TASK_STATE_FAILED, failed
        assert "the agent failed while running the turn" in answer(failed)
    actor = await actor_of(api, hog)
    assert actor.state == ActorState.CRASHED, actor
    assert (actor.crash_message or "").startswith(
        f"the Actor's sandbox reached its memory limit of {MEMORY} bytes (runtime.process.memoryLimit)"
    ), actor.crash_message
    # the other Actor is served meanwhile and after; the hog's Session recovers from its last snapshot
    assert answer(await send(api, "hello", other, agent="hog")) == "ok"
    assert answer(await send(api, "hello", hog, agent="hog")) == "ok"


async def test_a_busy_turn_gets_no_more_cpu_than_its_limit(limited: ProcessApi) -> None:
    api = limited
    if api.runtime.cgroups is None:
        pytest.skip("no writable cgroup hierarchy here: no CPU limit (limits.py)")
    sid = await new_session(api, "cpu-1", agent="hog")
    # four spinning processes: more than the limit asks for even when the machine is busy
    turn = asyncio.create_task(send(api, "cpu 2 4", sid, agent="hog"))
    throttled = 0
    samples: list[tuple[float, float]] = []  # (wall clock, CPU seconds the sandbox's group used)
    group: ActorGroup | None = None
    while not turn.done():
        actor = await actor_of(api, sid)
        group = api.runtime.control_group(actor.uid) or group
        if group is not None:
            used = group.cpu_seconds()
            if used is not None:
                samples.append((time.monotonic(), used))
            throttled = max(throttled, group.cpu_throttled())
        await asyncio.sleep(0.1)
    assert answer(await turn).startswith("cpu share ")
    # seen from the host: over any second of the turn the sandbox used at most its half core
    rates = [(u2 - u1) / (t2 - t1) for t1, u1 in samples for t2, u2 in samples if t2 - t1 >= 1.0]
    assert rates, "the turn was sampled"
    assert max(rates) <= CPUS * 1.25, f"the sandbox used {max(rates):.2f} of a core, over the limit of {CPUS}"
    # the kernel held it back for its limit, unless the machine was too busy to give it even that
    assert throttled > 0 or max(rates) < CPUS * 0.8, f"not throttled at {max(rates):.2f} of a core"


@pytest.mark.parametrize("level", SANDBOXED)
async def test_without_control_groups_the_memory_limit_is_the_address_space(
    level: Isolation, settings: Any, store: Store, database_url: str, tmp_path: Path
) -> None:
    """The fallback where no cgroup hierarchy can be written: RLIMIT_AS. An allocation past it fails
    inside the agent (its turn fails), the agent's process lives on and serves the next turn."""
    probe, _ = ControlGroups.detect("probe")
    if probe is None:
        pytest.skip("no control groups here: every test above runs the fallback already")
    probe.close()
    async with _served(level, settings, store, database_url, tmp_path / "runtime", 1 << 30, cgroups=False) as api:
        sid = await new_session(api, "as-1", agent="hog")
        assert answer(await send(api, "memory 50", sid, agent="hog")) == "holding 50 MiB"
        try:
            failed = await send(api, "memory 1500", sid, agent="hog")
        except grpc.aio.AioRpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e
        else:
            assert failed.status.state == a2a_pb2.TASK_STATE_FAILED, failed
        assert (await actor_of(api, sid)).state != ActorState.CRASHED, "the allocation failed, not the process"
        assert answer(await send(api, "hello", sid, agent="hog")) == "ok"


def test_the_limits_reach_the_sandbox(tmp_path: Path) -> None:
    """Where they land: with a control group the sandbox's command joins it first; without one, the
    memory limit becomes RLIMIT_AS (bwrap's prlimit, gVisor's OCI rlimits) and RLIMIT_NPROC stays."""
    limits = Limits(memory=MEMORY, cpus=CPUS, processes=64)
    group = ActorGroup(1, (tmp_path / "memory" / "g", tmp_path / "cpu" / "g"))
    base: dict[str, Any] = dict(uid=200_001, data=tmp_path / "data", read_only=("/usr",), netns="/proc/1/ns/net",
                                bundle=tmp_path / "bundle", runsc_root=tmp_path / "runsc", limits=limits)
    joined = Sandbox(level=Isolation.NAMESPACES, group=group, **base).command(["/bin/true"], {})
    assert joined[:2] == ["/bin/sh", "-c"] and str(tmp_path / "cpu" / "g" / "cgroup.procs") in joined[2]
    assert "--nproc=64:64" in joined and not any(a.startswith("--as=") for a in joined)
    plain = Sandbox(level=Isolation.NAMESPACES, **base).command(["/bin/true"], {})
    assert plain[0] != "/bin/sh" and f"--as={MEMORY}:{MEMORY}" in plain
    Sandbox(level=Isolation.GVISOR, **base).command(["/bin/true"], {})
    spec = (tmp_path / "bundle" / "config.json").read_text()
    assert '"RLIMIT_AS", "hard": 268435456' in spec and '"RLIMIT_NPROC", "hard": 64' in spec


async def test_the_control_groups_go_with_the_sandboxes(limited: ProcessApi) -> None:
    """A sandbox's group is made with it and removed with it (a warm sandbox's too); none is left
    once the runtime closed."""
    api = limited
    if api.runtime.cgroups is None:
        pytest.skip("no writable cgroup hierarchy here")
    sid = await new_session(api, "groups-1", agent="hog")
    assert answer(await send(api, "hello", sid, agent="hog")) == "ok"
    actor = await actor_of(api, sid)
    group = api.runtime.control_group(actor.uid)
    if group is not None:  # (unless the quiescence worker already suspended it)
        assert all(d.is_dir() for d in group.dirs)
    deadline = time.monotonic() + 30
    while (await actor_of(api, sid)).state != ActorState.SUSPENDED:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    if group is not None:
        assert not any(d.exists() for d in group.dirs), "removed with the sandbox"
    parents = list(api.runtime.cgroups.parents.values())
    await api.runtime.warm_ready(120)
    assert all(sum(1 for e in p.iterdir() if e.is_dir()) <= 1 for p in parents), "only the warm sandbox's group is left"
