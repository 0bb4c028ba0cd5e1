"""Between turns on the process runtime, with my-first-agent as a real process: a turn inside the
keep-warm window runs in the same process (no resume, pid unchanged), which stops after the window;
a turn that ends waiting for input stops (SIGSTOP) the process without archiving it
(sessions.pausedRuntimeTtl), and unanswered it is suspended with its snapshot when the TTL passes.
The answer to a task waiting for input reaches the live process that asked (inside the window, or
paused) and completes there: the agent kit's a2a-sdk handler still holds that task."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from a2a.types import a2a_pb2

from sessionq.api.server import ApiServer
from sessionq.db.store import Store
from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
from sessionq.runtime.base import ActorState
from sessionq.runtime.process import ProcessConfig, ProcessSubstrate
from tests.conftest import make_settings, running_worker
from tests.process.conftest import alive, proc_state
from tests.process.test_first_agent import (
    FIRST_AGENT,
    NS,
    ProcessApi,
    actor_of,
    answer,
    answered_once,
    new_session,
    reply,
    send,
    suspended,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def warm_api(store: Store, database_url: str, tmp_path: Path) -> AsyncIterator[ProcessApi]:
    settings = make_settings(**{"sessions.pausedRuntimeTtl": 3.0})
    runtime = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "runtime", slots=4, stop_grace=3.0))
    await runtime.open()
    try:
        async with running_worker(settings, database_url, store, runtime):
            server = ApiServer(settings, store, address="127.0.0.1:0", runtime=runtime)
            await server.start()
            runtime.taskstore_address = f"127.0.0.1:{server.port}"
            channel = grpc.aio.insecure_channel(runtime.taskstore_address)
            spec = parse_spec({"name": "my-first-agent", "command": [sys.executable, str(FIRST_AGENT)],
                               "keepWarm": "4s"})
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


async def test_inside_the_window_the_same_process_answers(warm_api: ProcessApi) -> None:
    sid = await new_session(warm_api)
    t1 = await send(warm_api, "What is 2+2?", sid)
    assert answer(t1) == "2+2 = 4"
    actor = await actor_of(warm_api, sid)
    assert actor.state == ActorState.RUNNING  # kept warm
    pid = warm_api.runtime.pid_of(actor.uid)
    assert pid is not None
    t2 = await send(warm_api, "What is 3+3?", sid)  # inside the window
    assert answer(t2) == "3+3 = 6"
    assert warm_api.runtime.pid_of(actor.uid) == pid and alive(pid)  # no resume: the same process
    after = await suspended(warm_api, sid)  # the window ended
    assert warm_api.runtime.pid_of(after.uid) is None
    t3 = await send(warm_api, "What is 4+4?", sid)  # a resume: a new process
    assert answer(t3) == "4+4 = 8"


@pytest.mark.slow
async def test_waiting_for_input_stops_the_process_then_suspends_it_after_the_ttl(warm_api: ProcessApi) -> None:
    sid = await new_session(warm_api)
    asked = await send(warm_api, "Book a flight [input-required]", sid)
    assert asked.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    actor = await actor_of(warm_api, sid)
    pid = warm_api.runtime.pid_of(actor.uid)
    assert pid is not None
    snapshots = len(actor.snapshots)
    deadline = time.monotonic() + 20  # paused after the 4 s keep-warm window
    while (await actor_of(warm_api, sid)).state != ActorState.PAUSED:
        assert time.monotonic() < deadline, "the actor did not pause"
        await asyncio.sleep(0.05)
    assert proc_state(pid) == "T"  # stopped (SIGSTOP), not archived
    assert len((await actor_of(warm_api, sid)).snapshots) == snapshots
    # unanswered: when the TTL (3 s) and the keep-warm window pass, it is suspended with its snapshot
    after = await suspended(warm_api, sid)
    assert len(after.snapshots) == snapshots + 1 and warm_api.runtime.pid_of(after.uid) is None
    assert not alive(pid)



async def test_an_answer_inside_the_window_completes_in_the_process_that_asked(warm_api: ProcessApi) -> None:
    sid = await new_session(warm_api)
    asked = await send(warm_api, "Book a flight [input-required]", sid)
    assert asked.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    actor = await actor_of(warm_api, sid)
    assert actor.state == ActorState.RUNNING
    pid = warm_api.runtime.pid_of(actor.uid)
    done = await reply(warm_api, asked, "to Paris")  # inside the keep-warm window
    assert done.status.state == a2a_pb2.TASK_STATE_COMPLETED, done.status
    assert answer(done) == "Thanks, got: to Paris" and done.id == asked.id
    assert answered_once(done, "to Paris")  # the answer recorded with the turn's first write, once
    assert warm_api.runtime.pid_of(actor.uid) == pid and alive(pid)  # no resume
    assert len((await actor_of(warm_api, sid)).snapshots) == len(actor.snapshots)
    # the Session goes on: a new turn, then the suspend after the window
    assert answer(await send(warm_api, "What is 2+2?", sid)) == "2+2 = 4"
    await suspended(warm_api, sid)


async def test_an_answer_to_a_paused_actor_resumes_it_and_completes(warm_api: ProcessApi) -> None:
    sid = await new_session(warm_api)
    asked = await send(warm_api, "Book a flight [auth-required]", sid)
    assert asked.status.state == a2a_pb2.TASK_STATE_AUTH_REQUIRED
    actor = await actor_of(warm_api, sid)
    pid = warm_api.runtime.pid_of(actor.uid)
    deadline = time.monotonic() + 20
    while (await actor_of(warm_api, sid)).state != ActorState.PAUSED:  # after the 4 s window
        assert time.monotonic() < deadline, "the actor did not pause"
        await asyncio.sleep(0.05)
    assert proc_state(pid) == "T"
    done = await reply(warm_api, asked, "signed in")  # within the 3 s TTL
    assert done.status.state == a2a_pb2.TASK_STATE_COMPLETED, done.status
    assert answer(done) == "Thanks, got: signed in" and answered_once(done, "signed in")
    resumed = await actor_of(warm_api, sid)
    assert warm_api.runtime.pid_of(resumed.uid) == pid and proc_state(pid) != "T"  # continued, not restored
    assert len(resumed.snapshots) == len(actor.snapshots)
