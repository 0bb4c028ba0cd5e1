"""Time travel over sessionq.v1.TurnService on the simulator (in process and over the ateapi
adapter): list a Session's turns, checkpoint and fork any retained one (TT-*)."""

import asyncio
import time
from uuid import UUID

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent, make_settings

from sessionq._pb.kagent.api.v1alpha1 import (
    checkpoints_pb2,
    checkpoints_pb2_grpc,
    common_pb2,
    runtime_pb2,
    sessions_pb2,
    sessions_pb2_grpc,
)
from sessionq._pb.sessionq.v1 import turns_pb2, turns_pb2_grpc

KEEP = 3
TENANT = "kagent/my-first-agent"
RETAINED = turns_pb2.TURN_CHECKPOINTABILITY_RETAINED
RELEASED = turns_pb2.TURN_CHECKPOINTABILITY_RELEASED


@pytest.fixture
def settings():
    return make_settings(**{"sessions.turnSnapshots": KEEP})


def turns(api):
    return turns_pb2_grpc.TurnServiceStub(api.channel)


def sessions(api):
    return sessions_pb2_grpc.SessionServiceStub(api.channel)


async def new_session(api, rid="s-1", user="alice"):
    r = await sessions(api).CreateSession(
        sessions_pb2.CreateSessionRequest(request_id=rid, agent=common_pb2.ResourceReference(
            namespace="kagent", name="my-first-agent")), metadata=api.md(user), timeout=10)
    return r.session.id


async def send(api, text, sid, user="alice", timeout=15):
    msg = a2a_pb2.Message(message_id=f"m-{time.monotonic_ns()}", role=a2a_pb2.ROLE_USER, context_id=sid,
                          parts=[a2a_pb2.Part(text=text)])
    r = await a2a_pb2_grpc.A2AServiceStub(api.channel).SendMessage(
        a2a_pb2.SendMessageRequest(tenant=TENANT, message=msg), metadata=api.md(user), timeout=timeout)
    return r.task


def answer(task):
    return " ".join(p.text for p in task.status.message.parts)


async def list_turns(api, sid, user="alice"):
    r = await turns(api).ListTurns(turns_pb2.ListTurnsRequest(session_id=sid), metadata=api.md(user), timeout=10)
    return list(r.turns)


async def fork_at(api, sid, task_id, rid, user="alice"):
    return await turns(api).ForkAtTurn(turns_pb2.ForkAtTurnRequest(session_id=sid, task_id=task_id, request_id=rid),
                                       metadata=api.md(user), timeout=20)


async def checkpoint_at(api, sid, task_id, rid, user="alice"):
    r = await turns(api).CreateTurnCheckpoint(
        turns_pb2.CreateTurnCheckpointRequest(session_id=sid, task_id=task_id, request_id=rid),
        metadata=api.md(user), timeout=10)
    return r.checkpoint


async def failure(call):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value.code(), e.value.details()


async def pins(store, sid):
    """The Session's turn pins: {task id: state}."""
    async with store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT task_id, state FROM sessionq.turn_snapshots WHERE session_id = %s", (sid,))).fetchall()
    return {r["task_id"]: r["state"] for r in rows}


async def runtime_tags(store, prefix="turn-"):
    """The tags the runtime (the simulator's own schema) holds, by name prefix."""
    async with store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT name FROM substrate_sim.tags WHERE name LIKE %s", (prefix + "%",))).fetchall()
    return {r["name"] for r in rows}


async def pin_tags(store, sid):
    async with store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT tag_name FROM sessionq.turn_snapshots WHERE session_id = %s AND state = 'PINNED'", (sid,)
        )).fetchall()
    return {r["tag_name"] for r in rows}


async def eventually(check, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.05)


async def settled_turns(api, sid, n):
    """Wait until the newest of the Session's n turns is retained (quiescence pinned it). A turn sent
    before the previous one was quiesced skips that quiescence: the previous turn then has no
    snapshot of its own (NOT_RETAINED), so the tests wait for each pin as a person pauses."""
    async def ready():
        ts = await list_turns(api, sid)
        return ts if ts and ts[-1].checkpointability == RETAINED else None
    got = await eventually(ready)
    assert got, "the newest turn was not pinned"
    return got


@pytest.fixture
async def three_turns(api, store, sim):
    await apply_agent(store, sim)
    sid = await new_session(api)
    tasks = []
    for n in (11, 22, 33):
        t = await send(api, f"Remember the number {n}.", sid)
        assert f"remember the number {n}" in answer(t)
        tasks.append(t)
        await settled_turns(api, sid, len(tasks))
    return sid, tasks


@pytest.mark.clause("TT-1")
@pytest.mark.clause("TT-4")
async def test_fork_at_a_past_turn_remembers_what_the_agent_knew_then(api, store, sim, three_turns):
    sid, (t1, t2, t3) = three_turns
    listed = await list_turns(api, sid)
    assert [t.task_id for t in listed] == [t1.id, t2.id, t3.id]
    assert [t.sequence for t in listed] == [1, 2, 3]
    assert all(t.state == "TASK_STATE_COMPLETED" and t.checkpointable and t.checkpointability == RETAINED
               for t in listed)
    assert all(t.created_at.seconds > 0 for t in listed)

    r = await fork_at(api, sid, t1.id, "fork-at-1")
    fork = r.session
    assert fork.state == runtime_pb2.RUNTIME_STATE_READY and fork.id != sid and r.checkpoint_id
    again = await fork_at(api, sid, t1.id, "fork-at-1")
    assert again.session.id == fork.id and again.checkpoint_id == r.checkpoint_id  # idempotent
    # the fork replays the history through turn 1 only, under its own task ids
    replayed = await list_turns(api, fork.id)
    assert len(replayed) == 1 and replayed[0].task_id != t1.id
    # its Actor starts from turn 1's snapshot: it remembers 11, not 22 or 33
    assert "remember the number 11" in answer(await send(api, "What number did I ask you to remember?", fork.id))
    # a fork at turn 2 remembers 22; the source still remembers 33
    two = (await fork_at(api, sid, t2.id, "fork-at-2")).session
    assert "remember the number 22" in answer(await send(api, "What number did I ask you to remember?", two.id))
    assert "remember the number 33" in answer(await send(api, "What number did I ask you to remember?", sid))
    # the turn taken by the fork's checkpoint says so
    by_task = {t.task_id: t for t in await list_turns(api, sid)}
    assert by_task[t1.id].checkpointability == turns_pb2.TURN_CHECKPOINTABILITY_CHECKPOINTED
    assert by_task[t1.id].checkpoint_id == r.checkpoint_id and not by_task[t1.id].checkpointable
    # a second fork at turn 1 (another request id) forks from that checkpoint
    other = (await fork_at(api, sid, t1.id, "fork-at-1-again")).session
    assert other.id != fork.id
    assert "remember the number 11" in answer(await send(api, "What number did I ask you to remember?", other.id))


@pytest.mark.clause("TT-2")
@pytest.mark.clause("TT-5")
async def test_retention_releases_exactly_the_older_pins_in_the_runtime_too(api, store, sim, three_turns):
    sid, (t1, t2, t3) = three_turns
    assert set(await pins(store, sid)) == {t1.id, t2.id, t3.id}
    assert await runtime_tags(store) >= await pin_tags(store, sid)
    t4 = await send(api, "Remember the number 44.", sid)
    await settled_turns(api, sid, 4)
    # exactly turn 1's pin goes: its row and the runtime's tag
    assert await eventually(lambda: _only(store, sid, {t2.id, t3.id, t4.id}))
    kept = await pin_tags(store, sid)
    assert await eventually(lambda: _tags_are(store, kept))
    listed = {t.task_id: t for t in await list_turns(api, sid)}
    assert listed[t1.id].checkpointability == RELEASED and "outside the retained window" in listed[t1.id].message
    code, details = await failure(fork_at(api, sid, t1.id, "too-old"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "outside the retained window" in details
    code, details = await failure(checkpoint_at(api, sid, t1.id, "too-old"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "outside the retained window" in details
    # nothing was written by the refusals
    async with store.pool.connection() as conn:
        n = await (await conn.execute("SELECT count(*) AS n FROM sessionq.checkpoints")).fetchone()
        view = await (await conn.execute(
            "SELECT turn_pins, snapshots_held FROM sessionq.session_snapshots WHERE session_id = %s", (sid,)
        )).fetchone()
    assert n["n"] == 0
    assert view == {"turn_pins": KEEP, "snapshots_held": KEEP}


async def _only(store, sid, expected):
    return set(await pins(store, sid)) == expected


async def _tags_are(store, expected):
    return await runtime_tags(store) == expected


@pytest.mark.clause("TT-3")
@pytest.mark.clause("TT-2")
async def test_checkpoint_at_a_past_turn_survives_deletion_and_forks_later(api, store, sim, three_turns):
    sid, (t1, t2, _t3) = three_turns
    cp = await checkpoint_at(api, sid, t1.id, "cp-1")
    assert cp.state == checkpoints_pb2.CHECKPOINT_STATE_READY and cp.head_task_id == t1.id
    assert (await checkpoint_at(api, sid, t1.id, "cp-1")).id == cp.id  # idempotent
    code, _ = await failure(checkpoint_at(api, sid, t2.id, "cp-1"))
    assert code == grpc.StatusCode.ALREADY_EXISTS  # the request id names another checkpoint
    await sessions(api).DeleteSession(sessions_pb2.DeleteSessionRequest(session_id=sid), metadata=api.md(),
                                      timeout=15)
    # every turn pin of the deleted Session is released, in the runtime too; the checkpoint's tag stays
    assert await eventually(lambda: _only(store, sid, set()))
    held = {await _checkpoint_tag(store, cp.id)}
    assert held == {next(iter(held))} and next(iter(held)).startswith("turn-")  # the pin's tag, taken over
    assert await eventually(lambda: _tags_are(store, held))
    stub = checkpoints_pb2_grpc.CheckpointServiceStub(api.channel)
    fork = (await stub.ForkSession(checkpoints_pb2.ForkSessionRequest(checkpoint_id=cp.id, request_id="later"),
                                   metadata=api.md(), timeout=20)).session
    assert "remember the number 11" in answer(await send(api, "What number did I ask you to remember?", fork.id))


async def _checkpoint_tag(store, cid):
    async with store.pool.connection() as conn:
        row = await (await conn.execute("SELECT tag_name FROM sessionq.checkpoints WHERE id = %s", (cid,))).fetchone()
    return row["tag_name"]


@pytest.mark.clause("TT-2")
async def test_pins_are_released_on_idle_expiry(api, store, sim, three_turns):
    sid, _tasks = three_turns
    assert len(await pins(store, sid)) == KEEP
    assert (await store.expire_session(UUID(sid), 0.001)).outcome.value == "admitted"
    assert await eventually(lambda: _only(store, sid, set()))
    assert await eventually(lambda: _tags_are(store, set()))


@pytest.mark.clause("TT-5")
async def test_bad_turns_are_refused_and_write_nothing(api, store, sim, three_turns):
    sid, (t1, _t2, _t3) = three_turns
    other = await new_session(api, "s-2")
    o1 = await send(api, "What is 2+2?", other)
    for call in (fork_at(api, sid, "no-such-task", "bad-1"), checkpoint_at(api, sid, "no-such-task", "bad-2"),
                 fork_at(api, sid, o1.id, "bad-3"), checkpoint_at(api, sid, o1.id, "bad-4"),
                 fork_at(api, sid, t1.id, "bad-5", user="bob"), checkpoint_at(api, sid, t1.id, "bad-6", user="bob"),
                 list_turns(api, sid, user="bob"),
                 fork_at(api, "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10", t1.id, "bad-7")):
        code, details = await failure(call)
        assert code == grpc.StatusCode.NOT_FOUND, details
    for call in (fork_at(api, sid, t1.id, ""), fork_at(api, sid, "", "r"), fork_at(api, "nope", t1.id, "r"),
                 checkpoint_at(api, sid, "x" * 200, "r"), fork_at(api, sid, "a\x01b", "r")):
        code, details = await failure(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and len(details) < 200, details
    # a turn still running
    slow = asyncio.create_task(send(api, "What is 3+3? [slow:1.5]", sid))
    running = await eventually(lambda: _running_turn(api, sid))
    assert running is not None
    code, details = await failure(fork_at(api, sid, running.task_id, "bad-8"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "settled" in details
    await slow
    async with store.pool.connection() as conn:
        n = await (await conn.execute("SELECT count(*) AS n FROM sessionq.checkpoints")).fetchone()
        forks = await (await conn.execute(
            "SELECT count(*) AS n FROM sessionq.sessions WHERE request_kind = 'fork'")).fetchone()
    assert n["n"] == 0 and forks["n"] == 0


async def _running_turn(api, sid):
    ts = await list_turns(api, sid)
    return next((t for t in ts if t.checkpointability == turns_pb2.TURN_CHECKPOINTABILITY_NOT_SETTLED), None)


@pytest.mark.clause("TT-4")
@pytest.mark.clause("TT-6")
async def test_racing_forks_with_one_request_id_make_one_session(api, store, sim, three_turns):
    sid, (t1, _t2, _t3) = three_turns
    results = await asyncio.gather(*(fork_at(api, sid, t1.id, "same") for _ in range(8)), return_exceptions=True)
    ids = {r.session.id for r in results if not isinstance(r, BaseException)}
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(ids) == 1, errors
    assert all(isinstance(e, grpc.aio.AioRpcError) and e.code() in (grpc.StatusCode.ABORTED,
                                                                       grpc.StatusCode.UNAVAILABLE) for e in errors)
    async with store.pool.connection() as conn:
        forks = await (await conn.execute(
            "SELECT count(*) AS n FROM sessionq.sessions WHERE request_kind = 'fork'")).fetchone()
        cps = await (await conn.execute("SELECT count(*) AS n FROM sessionq.checkpoints")).fetchone()
    assert forks["n"] == 1 and cps["n"] == 1


@pytest.mark.clause("TT-6")
@pytest.mark.parametrize("end", ["delete", "expire"])
async def test_a_fork_racing_a_new_turn_and_the_end_of_the_source_keeps_every_invariant(
        api, store, sim, three_turns, end):
    sid, (t1, t2, _t3) = three_turns

    async def finish():
        if end == "delete":
            for _ in range(100):
                try:
                    await sessions(api).DeleteSession(sessions_pb2.DeleteSessionRequest(session_id=sid),
                                                      metadata=api.md(), timeout=15)
                    return
                except grpc.aio.AioRpcError as e:
                    if e.code() != grpc.StatusCode.ABORTED:
                        raise
                    await asyncio.sleep(0.05)
        else:
            for _ in range(100):
                if (await store.expire_session(UUID(sid), 0.001)).outcome.value in ("admitted", "resumed", "gone"):
                    return
                await asyncio.sleep(0.05)

    outcomes = await asyncio.gather(
        fork_at(api, sid, t1.id, "race-1"), fork_at(api, sid, t2.id, "race-2"),
        send(api, "Remember the number 44.", sid), finish(), return_exceptions=True)
    for o in outcomes[:3]:
        if isinstance(o, BaseException):
            assert isinstance(o, grpc.aio.AioRpcError), o
            assert o.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED,
                                grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE), o
    assert not isinstance(outcomes[3], BaseException), outcomes[3]
    # no pin leaked: the source's pins and their tags all go; only checkpoints keep tags
    assert await eventually(lambda: _only(store, sid, set()))
    async with store.pool.connection() as conn:
        held = {r["tag_name"] for r in await (await conn.execute(
            "SELECT tag_name FROM sessionq.checkpoints")).fetchall()}
    assert await eventually(lambda: _all_tags_are(store, held))
    # every fork made remembers its turn's number
    for o, n in zip(outcomes[:2], (11, 22), strict=True):
        if not isinstance(o, BaseException):
            said = answer(await send(api, "What number did I ask you to remember?", o.session.id))
            assert f"remember the number {n}" in said


async def _all_tags_are(store, expected):
    async with store.pool.connection() as conn:
        rows = await (await conn.execute("SELECT name FROM substrate_sim.tags")).fetchall()
    return {r["name"] for r in rows} == expected


@pytest.mark.clause("TT-7")
async def test_list_tags_shows_the_runtimes_tags_with_what_each_pins(api, store, sim, three_turns):
    sid, (t1, t2, t3) = three_turns
    cp = await checkpoint_at(api, sid, t1.id, "cp-tags")
    stub = turns_pb2_grpc.TagServiceStub(api.channel)

    async def listed(user, atespace="kagent", limit=0):
        got, token = [], ""
        while True:
            r = await stub.ListTags(turns_pb2.ListTagsRequest(atespace=atespace, page=common_pb2.PageRequest(
                limit=limit, page_token=token)), metadata=api.md(user), timeout=10)
            got.extend(r.tags)
            token = r.page.next_page_token
            if not token:
                return got

    mine = await listed("alice", limit=1)
    assert {t.name for t in mine} == await runtime_tags(store)  # every tag is alice's here
    by_turn = {t.task_id: t for t in mine}
    assert by_turn[t1.id].kind == turns_pb2.TAG_KIND_CHECKPOINT and by_turn[t1.id].checkpoint_id == cp.id
    assert {by_turn[t.id].kind for t in (t2, t3)} == {turns_pb2.TAG_KIND_TURN_PIN}
    assert {by_turn[t.id].state for t in (t2, t3)} == {"PINNED"} and {t.session_id for t in mine} == {sid}
    assert all(t.snapshot_generation > 0 and t.actor == f"session-{sid}" for t in mine)
    assert await listed("bob") == []  # another user's pins and checkpoints are not shown
    assert {t.name for t in await listed("admin", atespace="")} == {t.name for t in mine}
    code, _ = await failure(stub.ListTags(turns_pb2.ListTagsRequest(atespace="Not A Label"), metadata=api.md(),
                                          timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.clause("TT-6")
async def test_a_checkpoint_never_takes_a_pin_being_released(api, store, sim, three_turns, database_url):
    """Many racers on their own connections take turn pins over while another releases every pin of
    the Session (as a retention or a deletion does): each pin ends either taken over by exactly one
    checkpoint (its row gone, its tag the checkpoint's) or RELEASING with no checkpoint on its tag."""
    import psycopg

    sid, tasks = three_turns

    async def take(i: int, task_id: str) -> str:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            try:
                await conn.execute("SELECT sessionq.admit_turn_checkpoint(%s, 'alice', %s, %s)",
                                   (sid, f"race-{i}", task_id))
                return "taken"
            except psycopg.Error as e:
                return e.sqlstate or "?"

    async def release() -> str:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            async with conn.transaction():
                await conn.execute("SELECT 1 FROM sessionq.sessions WHERE id = %s FOR UPDATE", (sid,))
                await conn.execute("SELECT sessionq.release_turn_pins(%s, NULL)", (sid,))
        return "released"

    racers = [take(i, tasks[i % 3].id) for i in range(12)]
    outcomes = await asyncio.gather(*racers[:6], release(), *racers[6:])
    assert set(outcomes) <= {"taken", "released", "SQ412"}, outcomes
    async with store.pool.connection() as conn:
        cps = await (await conn.execute(
            "SELECT head_task_id, tag_name FROM sessionq.checkpoints WHERE session_id = %s", (sid,))).fetchall()
        left = await (await conn.execute(
            "SELECT task_id, tag_name, state FROM sessionq.turn_snapshots WHERE session_id = %s", (sid,))).fetchall()
    taken = {c["head_task_id"] for c in cps}
    assert len(taken) == len(cps), "one checkpoint per pin"
    assert outcomes.count("taken") == len(cps)
    assert {r["tag_name"] for r in left}.isdisjoint({c["tag_name"] for c in cps})
    assert all(r["state"] == "RELEASING" for r in left)
    assert taken.isdisjoint({r["task_id"] for r in left})  # the rest were released (rows go once the tag is)
    # the released tags go from the runtime; the checkpoints' stay
    assert await eventually(lambda: _tags_are(store, {c["tag_name"] for c in cps}))


@pytest.mark.clause("TT-2")
async def test_the_revision_gc_sees_turn_pins(api, store, sim, three_turns, database_url):
    """A revision only turn pins still reference (their Session gone, the Agent moved on) is not
    collected until they are released."""
    import psycopg

    from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision

    sid, _tasks = three_turns
    source = await store.session_by_id(UUID(sid))
    spec = parse_spec({"name": "my-first-agent", "template": "image:v2"})
    await store.apply_agent("kagent", spec.name, spec.to_json(), spec.spec_hash(), spec.image, compile_egress(spec),
                            "alice")
    await prepare_revision(store, sim, (await store.get_agent("kagent", spec.name)).desired_revision_id)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        async with conn.transaction(force_rollback=True):  # as if the Session were gone, its pins not yet released
            await conn.execute("UPDATE sessionq.sessions SET state = 'DELETED', revision_id = NULL, actor_uid = NULL"
                               " WHERE id = %s", (sid,))
            referenced = "SELECT sessionq.revision_referenced(%s)"
            assert (await (await conn.execute(referenced, (source.revision_id,))).fetchone())[0] is True
            await conn.execute("UPDATE sessionq.turn_snapshots SET revision_id = NULL WHERE session_id = %s", (sid,))
            assert (await (await conn.execute(referenced, (source.revision_id,))).fetchone())[0] is False


@pytest.mark.clause("TT-1")
@pytest.mark.clause("TT-2")
async def test_turns_without_a_suspend_between_them_share_one_snapshot(api, store, sim):
    """Turns inside a keep-warm window are not suspended between them: only the last has a snapshot
    (pinned at the suspend), the earlier ones are NOT_RETAINED (never pinned), not RELEASED."""
    from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision

    spec = parse_spec({"name": "my-first-agent", "namespace": "kagent", "keepWarm": "2s"})
    await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                            compile_egress(spec), "alice")
    await prepare_revision(store, sim, (await store.get_agent("kagent", spec.name)).desired_revision_id)
    sid = await new_session(api)
    first = await send(api, "Remember the number 11.", sid)
    second = await send(api, "Remember the number 22.", sid)  # inside the window: no suspend between
    ts = await settled_turns(api, sid, 2)
    assert [t.task_id for t in ts] == [first.id, second.id]
    assert ts[0].checkpointability == turns_pb2.TURN_CHECKPOINTABILITY_NOT_RETAINED, ts[0]
    assert "no snapshot of its own" in ts[0].message and "keep-warm" in ts[0].message
    assert ts[1].checkpointability == RETAINED
    code, details = await failure(fork_at(api, sid, first.id, "f-warm"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "no snapshot of its own" in details
    assert await pins(store, sid) == {second.id: "PINNED"}
