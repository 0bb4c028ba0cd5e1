"""The runtime simulator (sessionq.runtime.simulator) against a real PostgreSQL database."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections.abc import AsyncIterator

import psycopg
import pytest

from sessionq.db.store import Store
from sessionq.runtime.base import (
    Actor,
    ActorState,
    Code,
    EgressPolicy,
    EgressRule,
    SnapshotFidelity,
    SnapshotStatus,
    Substrate,
    SubstrateError,
)
from sessionq.runtime.simulator import (
    PROTOCOL_METHODS,
    SimulatedSubstrate,
    decode_actor_token,
    encode_actor_token,
    install_schema,
    worker_identity,
)

NS = "team-a"
TEMPLATE = f"{NS}/rev-1"


@pytest.fixture
async def sim(database_url: str) -> AsyncIterator[SimulatedSubstrate]:
    async with SimulatedSubstrate(database_url) as s:
        await s.create_actor_template(NS, "rev-1", "registry.local/agent:1")
        yield s


async def _running(sim: SimulatedSubstrate, name: str, atespace: str = NS) -> str:
    actor = await sim.create_actor(atespace, name, TEMPLATE)
    await sim.resume_actor(atespace, name, actor.uid)
    return actor.uid


def _code(exc: pytest.ExceptionInfo[SubstrateError]) -> Code:
    return exc.value.code


# ---------------------------------------------------------------------------------------------
# basics


async def test_protocol_surface(sim: SimulatedSubstrate) -> None:
    typed: Substrate = sim  # mypy-style structural check, and at run time:
    for method in PROTOCOL_METHODS:
        assert callable(getattr(typed, method))
    assert "resume_actor" in PROTOCOL_METHODS and "list_workers" in PROTOCOL_METHODS


async def test_templates(sim: SimulatedSubstrate) -> None:
    tpl = await sim.get_actor_template(NS, "rev-1")
    assert tpl.image == "registry.local/agent:1" and tpl.version == 1 and tpl.uid
    with pytest.raises(SubstrateError) as exc:
        await sim.create_actor_template(NS, "rev-1", "other")
    assert _code(exc) == Code.ALREADY_EXISTS
    with pytest.raises(SubstrateError) as exc:
        await sim.delete_actor_template(NS, "rev-1", "not-the-uid")
    assert _code(exc) == Code.FAILED_PRECONDITION
    await sim.delete_actor_template(NS, "rev-1", tpl.uid)
    for call in (sim.get_actor_template(NS, "rev-1"), sim.delete_actor_template(NS, "rev-1", tpl.uid)):
        with pytest.raises(SubstrateError) as exc:
            await call
        assert _code(exc) == Code.NOT_FOUND


async def test_create_get_and_uid_checks(sim: SimulatedSubstrate) -> None:
    actor = await sim.create_actor(NS, "s1", TEMPLATE, env={"TOKEN": "secret"})
    assert actor.state == ActorState.SUSPENDED and actor.worker is None and actor.version == 1
    assert actor.template == TEMPLATE and actor.snapshots == () and len(actor.uid) == 36
    assert await sim.get_actor(NS, "s1") == actor
    assert await sim.read_env(NS, "s1") == {"TOKEN": "secret"}

    with pytest.raises(SubstrateError) as exc:
        await sim.create_actor(NS, "s1", TEMPLATE)
    assert _code(exc) == Code.ALREADY_EXISTS
    with pytest.raises(SubstrateError) as exc:
        await sim.create_actor(NS, "s2", f"{NS}/missing")
    assert _code(exc) == Code.NOT_FOUND
    with pytest.raises(SubstrateError) as exc:
        await sim.get_actor(NS, "nope")
    assert _code(exc) == Code.NOT_FOUND and "team-a/nope" in exc.value.message
    with pytest.raises(SubstrateError) as exc:
        await sim.resume_actor(NS, "nope", actor.uid)
    assert _code(exc) == Code.NOT_FOUND

    # a same-name replacement is never adopted
    await sim.delete_actor(NS, "s1", actor.uid)
    replacement = await sim.create_actor(NS, "s1", TEMPLATE)
    assert replacement.uid != actor.uid
    for call in (
        sim.resume_actor(NS, "s1", actor.uid),
        sim.suspend_actor(NS, "s1", actor.uid),
        sim.pause_actor(NS, "s1", actor.uid),
        sim.delete_actor(NS, "s1", actor.uid),
        sim.create_egress_policy(NS, "s1", actor.uid, []),
        sim.create_tag(NS, "t", "s1", actor.uid),
    ):
        with pytest.raises(SubstrateError) as exc:
            await call
        assert _code(exc) == Code.FAILED_PRECONDITION and "actor uid mismatch" in exc.value.message
    assert (await sim.get_actor(NS, "s1")).version == 1


async def test_resume_suspend_workers_and_snapshots(sim: SimulatedSubstrate) -> None:
    uid = (await sim.create_actor(NS, "s1", TEMPLATE)).uid
    actor, resumed = await sim.resume_actor(NS, "s1", uid)
    assert resumed and actor.state == ActorState.RUNNING and actor.version == 2
    assert actor.worker is not None and actor.worker.startswith("kagent-default-7c9f8b6d54-")
    assert actor.worker_ip is not None and actor.worker_ip.startswith("10.244.")
    held = [w for w in (await sim.list_workers(1000, "")).items if w.actor == f"{NS}/s1"]
    assert [w.name for w in held] == [actor.worker]

    again, resumed = await sim.resume_actor(NS, "s1", uid)
    assert not resumed and again.version == 2 and again.worker == actor.worker

    await sim.write_durable(NS, "s1", uid, {"workspace/a.txt": "one"})
    suspended = await sim.suspend_actor(NS, "s1", uid)
    assert suspended.state == ActorState.SUSPENDED and suspended.worker is None and suspended.version == 3
    (snap,) = suspended.snapshots
    assert snap.generation == 1 and snap.status == SnapshotStatus.COMPLETED
    assert snap.fidelity == SnapshotFidelity.VOLUMES and snap.uri == f"sim://snapshots/{uid}/1"
    assert all(w.actor is None for w in (await sim.list_workers(1000, "")).items)

    # suspending a suspended actor changes nothing
    assert await sim.suspend_actor(NS, "s1", uid) == suspended
    with pytest.raises(SubstrateError) as exc:
        await sim.write_durable(NS, "s1", uid, {})
    assert _code(exc) == Code.FAILED_PRECONDITION

    await sim.resume_actor(NS, "s1", uid)
    assert await sim.read_durable(NS, "s1") == {"workspace/a.txt": "one"}
    second = await sim.suspend_actor(NS, "s1", uid, SnapshotFidelity.MEMORY)
    assert [s.generation for s in second.snapshots] == [1, 2] and second.version == 5
    assert second.snapshots[1].fidelity == SnapshotFidelity.MEMORY
    with pytest.raises(SubstrateError) as exc:
        await sim.suspend_actor(NS, "s1", uid, SnapshotFidelity.ROOTFS)
    assert _code(exc) == Code.INVALID_ARGUMENT


async def test_pause_keeps_worker(sim: SimulatedSubstrate) -> None:
    uid = await _running(sim, "s1")
    worker = (await sim.get_actor(NS, "s1")).worker
    paused = await sim.pause_actor(NS, "s1", uid)
    assert paused.state == ActorState.PAUSED and paused.worker == worker and paused.version == 3
    resumed, did = await sim.resume_actor(NS, "s1", uid)
    assert did and resumed.worker == worker and resumed.version == 4
    with pytest.raises(SubstrateError) as exc:
        await sim.pause_actor(NS, "s1", "x")
    assert _code(exc) == Code.FAILED_PRECONDITION


async def test_worker_pool_exhaustion(database_url: str) -> None:
    async with SimulatedSubstrate(database_url, worker_pool_size=1) as small:
        await small.create_actor_template(NS, "rev-1", "img")
        await _running(small, "a")
        b = await small.create_actor(NS, "b", TEMPLATE)
        with pytest.raises(SubstrateError) as exc:
            await small.resume_actor(NS, "b", b.uid)
        assert _code(exc) == Code.RESOURCE_EXHAUSTED and "team-a/b" in exc.value.message
        assert (await small.get_actor(NS, "b")).version == 1
        assert [w.name for w in (await small.list_workers(0, "")).items] == [worker_identity(0)[0]]


async def test_snapshot_pending_until_completed(sim: SimulatedSubstrate) -> None:
    uid = await _running(sim, "s1")
    await sim.set_option("snapshot_pending", True)
    assert await sim.get_option("snapshot_pending") is True
    assert await sim.get_option("unset") is None
    actor = await sim.suspend_actor(NS, "s1", uid)
    assert actor.snapshots[-1].status == SnapshotStatus.IN_PROGRESS
    with pytest.raises(SubstrateError) as exc:
        await sim.create_tag(NS, "t1", "s1", uid)
    assert _code(exc) == Code.FAILED_PRECONDITION
    assert await sim.complete_snapshots(NS, "s1") == 1
    actor = await sim.get_actor(NS, "s1")
    assert actor.snapshots[-1].status == SnapshotStatus.COMPLETED and actor.version == 3


async def test_tag_and_fork_copy_durable_data(sim: SimulatedSubstrate) -> None:
    uid = await _running(sim, "src")
    await sim.write_durable(NS, "src", uid, {"workspace/notes.md": "hello"})
    with pytest.raises(SubstrateError) as exc:
        await sim.create_tag(NS, "cp1", "src", uid)  # running: not taggable
    assert _code(exc) == Code.FAILED_PRECONDITION
    idle = await sim.create_actor(NS, "idle", TEMPLATE)
    with pytest.raises(SubstrateError) as exc:
        await sim.create_tag(NS, "cp0", "idle", idle.uid)  # no snapshot yet
    assert _code(exc) == Code.FAILED_PRECONDITION

    await sim.suspend_actor(NS, "src", uid)
    tag = await sim.create_tag(NS, "cp1", "src", uid)
    assert (tag.actor_name, tag.actor_uid, tag.snapshot_generation) == ("src", uid, 1)
    assert tag.snapshot_uri == f"sim://snapshots/{uid}/1"
    assert await sim.get_tag(NS, "cp1") == tag
    with pytest.raises(SubstrateError) as exc:
        await sim.create_tag(NS, "cp1", "src", uid)
    assert _code(exc) == Code.ALREADY_EXISTS

    # the source keeps working; the fork sees the tagged data only
    await sim.resume_actor(NS, "src", uid)
    await sim.write_durable(NS, "src", uid, {"workspace/notes.md": "changed"})
    fork = await sim.create_actor(NS, "fork", TEMPLATE, from_tag="cp1")
    assert fork.state == ActorState.SUSPENDED and fork.uid != uid
    (snap,) = fork.snapshots
    assert snap.generation == 1 and snap.status == SnapshotStatus.COMPLETED
    assert snap.uri == f"sim://snapshots/{fork.uid}/1"
    assert await sim.read_durable(NS, "fork") == {"workspace/notes.md": "hello"}
    await sim.resume_actor(NS, "fork", fork.uid)
    assert await sim.read_durable(NS, "fork") == {"workspace/notes.md": "hello"}
    fork2 = await sim.suspend_actor(NS, "fork", fork.uid)
    assert [s.generation for s in fork2.snapshots] == [1, 2]

    with pytest.raises(SubstrateError) as exc:
        await sim.create_actor(NS, "fork2", TEMPLATE, from_tag="missing")
    assert _code(exc) == Code.NOT_FOUND
    with pytest.raises(SubstrateError) as exc:
        await sim.create_actor("team-b", "fork3", TEMPLATE, from_tag="cp1")  # tags are per atespace
    assert _code(exc) == Code.NOT_FOUND

    await sim.delete_tag(NS, "cp1")
    for call in (sim.get_tag(NS, "cp1"), sim.delete_tag(NS, "cp1")):
        with pytest.raises(SubstrateError) as exc:
            await call
        assert _code(exc) == Code.NOT_FOUND


async def test_tagged_snapshot_survives_actor_deletion(sim: SimulatedSubstrate, database_url: str) -> None:
    uid = await _running(sim, "s1")
    await sim.suspend_actor(NS, "s1", uid)
    await sim.resume_actor(NS, "s1", uid)
    await sim.suspend_actor(NS, "s1", uid)
    await sim.create_tag(NS, "keep", "s1", uid)  # pins generation 2
    await sim.delete_actor(NS, "s1", uid)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT generation FROM substrate_sim.snapshots WHERE actor_uid = %s", (uid,)
        )
        assert await cur.fetchall() == [(2,)]
    fork = await sim.create_actor(NS, "s2", TEMPLATE, from_tag="keep")
    assert fork.snapshots[0].status == SnapshotStatus.COMPLETED
    await sim.delete_tag(NS, "keep")
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute("SELECT count(*) FROM substrate_sim.snapshots WHERE actor_uid = %s", (uid,))
        assert await cur.fetchone() == (0,)


async def test_delete_rules(sim: SimulatedSubstrate) -> None:
    uid = await _running(sim, "s1")
    await sim.create_egress_policy(NS, "s1", uid, [EgressRule("https", "api.example.com", 443)])
    with pytest.raises(SubstrateError) as exc:
        await sim.delete_actor(NS, "s1", uid)
    assert _code(exc) == Code.FAILED_PRECONDITION and "team-a/s1" in exc.value.message
    await sim.pause_actor(NS, "s1", uid)
    with pytest.raises(SubstrateError) as exc:
        await sim.delete_actor(NS, "s1", uid)
    assert _code(exc) == Code.FAILED_PRECONDITION

    await sim.delete_actor(NS, "s1", uid, any_state=True)  # releases the worker
    assert all(w.actor is None for w in (await sim.list_workers(1000, "")).items)
    for call in (
        sim.get_actor(NS, "s1"),
        sim.get_egress_policy(NS, "s1"),
        sim.delete_actor(NS, "s1", uid),
    ):
        with pytest.raises(SubstrateError) as exc:
            await call
        assert _code(exc) == Code.NOT_FOUND

    s2 = await sim.create_actor(NS, "s2", TEMPLATE)
    await sim.delete_actor(NS, "s2", s2.uid)  # suspended
    s3 = await sim.create_actor(NS, "s3", TEMPLATE)
    await sim.resume_actor(NS, "s3", s3.uid)
    crashed = await sim.crash_actor(NS, "s3")
    assert crashed.state == ActorState.CRASHED and crashed.worker is None
    await sim.delete_actor(NS, "s3", s3.uid)
    assert (await sim.list_actors(NS, 0, "")).items == []


async def test_egress_policy(sim: SimulatedSubstrate) -> None:
    uid = (await sim.create_actor(NS, "s1", TEMPLATE)).uid
    with pytest.raises(SubstrateError) as exc:
        await sim.get_egress_policy(NS, "s1")
    assert _code(exc) == Code.NOT_FOUND
    with pytest.raises(SubstrateError) as exc:
        await sim.update_egress_policy(NS, "s1", uid, [])
    assert _code(exc) == Code.NOT_FOUND

    rules = [
        EgressRule("https", "api.example.com", 443, {"Authorization": "Bearer x"}),
        EgressRule("http", "model.svc.cluster.local", 8080),
        EgressRule("http", "model.svc.cluster.local", 8080),  # duplicates collapse
    ]
    policy = await sim.create_egress_policy(NS, "s1", uid, rules)
    assert policy.actor_uid == uid and policy.version == 1
    assert sorted(policy.rules, key=repr) == sorted(rules[:2], key=repr)
    assert await sim.get_egress_policy(NS, "s1") == policy
    with pytest.raises(SubstrateError) as exc:
        await sim.create_egress_policy(NS, "s1", uid, rules)
    assert _code(exc) == Code.ALREADY_EXISTS

    updated = await sim.update_egress_policy(
        NS, "s1", uid, [EgressRule("tls_passthrough", "db.example", 5432)]
    )
    assert updated.version == 2 and list(updated.rules) == [EgressRule("tls_passthrough", "db.example", 5432)]
    assert await sim.get_egress_policy(NS, "s1") == updated

    for bad in (
        [EgressRule("ftp", "x.example", 21)],
        [EgressRule("https", "x.example", 0)],
        [EgressRule("https", "x.example", 443), EgressRule("tls_passthrough", "x.example", 443)],
    ):
        with pytest.raises(SubstrateError) as exc:
            await sim.update_egress_policy(NS, "s1", uid, bad)
        assert _code(exc) == Code.INVALID_ARGUMENT
    assert (await sim.get_egress_policy(NS, "s1")).version == 2


# ---------------------------------------------------------------------------------------------
# listing


def test_token_format() -> None:
    token = encode_actor_token("team-a", "s1")
    assert "=" not in token
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    assert raw == b'{"v":1,"atespace":"team-a","name":"s1"}'
    assert decode_actor_token(token, global_listing=True) == ("team-a", "s1")
    scoped = encode_actor_token(None, "s1")
    assert base64.urlsafe_b64decode(scoped + "==") == b'{"v":1,"name":"s1"}'
    assert decode_actor_token(scoped, global_listing=False) == (None, "s1")
    bad_tokens = [
        "!!!",
        "bm90IGpzb24",
        scoped,
        base64.urlsafe_b64encode(json.dumps({"v": 2, "atespace": "a", "name": "b"}).encode()).decode(),
    ]
    for bad in bad_tokens:
        with pytest.raises(SubstrateError) as exc:
            decode_actor_token(bad, global_listing=True)
        assert _code(exc) == Code.INVALID_ARGUMENT
    with pytest.raises(SubstrateError) as exc:
        decode_actor_token(token, global_listing=False)
    assert _code(exc) == Code.INVALID_ARGUMENT


async def test_list_actors_pagination(sim: SimulatedSubstrate) -> None:
    names = {"team-a": ["a1", "a2", "a3"], "team-b": ["b1", "b2"], "team-c": ["c1"]}
    for atespace, actors in names.items():
        for name in actors:
            await sim.create_actor(atespace, name, TEMPLATE)
    expected = [(a, n) for a, ns in sorted(names.items()) for n in ns]

    seen: list[tuple[str, str]] = []
    token = ""
    pages = 0
    while True:
        page = await sim.list_actors(None, 2, token)
        pages += 1
        seen += [(a.atespace, a.name) for a in page.items]
        token = page.next_page_token
        if not token:
            break
    assert seen == expected and pages == 3

    # a token resumes strictly after its boundary, even when the boundary row is gone
    first = await sim.list_actors(None, 3, "")
    assert [a.name for a in first.items] == ["a1", "a2", "a3"]
    boundary = await sim.get_actor("team-a", "a3")
    await sim.delete_actor("team-a", "a3", boundary.uid)
    rest = await sim.list_actors(None, 10, first.next_page_token)
    assert [a.name for a in rest.items] == ["b1", "b2", "c1"] and rest.next_page_token == ""
    made_up = await sim.list_actors(None, 10, encode_actor_token("team-b", "b1x"))
    assert [a.name for a in made_up.items] == ["b2", "c1"]

    within = await sim.list_actors("team-b", 1, "")
    assert [a.name for a in within.items] == ["b1"]
    assert decode_actor_token(within.next_page_token, global_listing=False) == (None, "b1")
    within = await sim.list_actors("team-b", 1, within.next_page_token)
    assert [a.name for a in within.items] == ["b2"] and within.next_page_token == ""

    for bad_size in (-1,):
        with pytest.raises(SubstrateError) as exc:
            await sim.list_actors(None, bad_size, "")
        assert _code(exc) == Code.INVALID_ARGUMENT
    with pytest.raises(SubstrateError) as exc:
        await sim.list_actors(None, 10, "garbage")
    assert _code(exc) == Code.INVALID_ARGUMENT


async def test_list_workers_pagination(sim: SimulatedSubstrate) -> None:
    first = await sim.list_workers(0, "")  # 0 -> 100
    assert len(first.items) == 100
    second = await sim.list_workers(5000, first.next_page_token)  # coerced to 1000
    assert len(second.items) == 156 and second.next_page_token == ""
    workers = first.items + second.items
    names = [w.name for w in workers]
    assert names == sorted(names) and len(set(names)) == 256
    w = next(w for w in workers if w.name == worker_identity(3)[0])
    assert (w.atespace, w.ip, w.state, w.actor) == ("kagent", "10.244.0.5", "WORKER_STATE_READY", None)
    assert worker_identity(251)[1] == "10.244.1.3"
    suffix = w.name.removeprefix("kagent-default-7c9f8b6d54-")
    assert len(suffix) == 5 and suffix.isalnum() and suffix.islower()


# ---------------------------------------------------------------------------------------------
# faults


async def test_fail_before_leaves_no_effect(sim: SimulatedSubstrate) -> None:
    uid = (await sim.create_actor(NS, "s1", TEMPLATE)).uid
    await sim.inject("resume_actor", "fail_before", code=Code.DEADLINE_EXCEEDED)
    with pytest.raises(SubstrateError) as exc:
        await sim.resume_actor(NS, "s1", uid)
    assert _code(exc) == Code.DEADLINE_EXCEEDED
    actor = await sim.get_actor(NS, "s1")
    assert actor.state == ActorState.SUSPENDED and actor.version == 1
    assert await sim.mutation_count(actor="s1", method="resume_actor") == 0
    _, resumed = await sim.resume_actor(NS, "s1", uid)  # times=1: the next call goes through
    assert resumed


async def test_lose_after_applies_effect_and_raises(sim: SimulatedSubstrate) -> None:
    await sim.inject("create_actor", "lose_after")
    with pytest.raises(SubstrateError) as exc:
        await sim.create_actor(NS, "s1", TEMPLATE)
    assert _code(exc) == Code.UNAVAILABLE and "response lost" in exc.value.message
    actor = await sim.get_actor(NS, "s1")
    assert actor.state == ActorState.SUSPENDED
    with pytest.raises(SubstrateError) as exc:  # the retry finds it
        await sim.create_actor(NS, "s1", TEMPLATE)
    assert _code(exc) == Code.ALREADY_EXISTS

    await sim.inject("resume_actor", "lose_after")
    with pytest.raises(SubstrateError):
        await sim.resume_actor(NS, "s1", actor.uid)
    _, resumed = await sim.resume_actor(NS, "s1", actor.uid)
    assert not resumed and (await sim.get_actor(NS, "s1")).version == 2


HOT_METHODS = ["create_actor", "get_actor", "resume_actor", "suspend_actor", "delete_actor", "create_egress_policy"]
RULE = EgressRule("https", "api.example.com", 443)


async def _observable(sim: SimulatedSubstrate) -> tuple[object, ...]:
    """What a call can change: the mutation log, the actor s1 (or its absence) and its egress policy."""
    log = [(c["method"], c["detail"]) for c in await sim.calls(actor="s1")]
    try:
        actor: object = await sim.get_actor(NS, "s1")
    except SubstrateError as exc:
        actor = exc.code
    try:
        policy: object = await sim.get_egress_policy(NS, "s1")
    except SubstrateError as exc:
        policy = exc.code
    return log, actor, policy


@pytest.mark.parametrize("method", HOT_METHODS)
async def test_outcome_faults_on_each_single_statement_call(sim: SimulatedSubstrate, method: str) -> None:
    uid = ""
    if method == "suspend_actor":
        uid = await _running(sim, "s1")
    elif method != "create_actor":
        uid = (await sim.create_actor(NS, "s1", TEMPLATE)).uid
    call = {
        "create_actor": lambda: sim.create_actor(NS, "s1", TEMPLATE),
        "get_actor": lambda: sim.get_actor(NS, "s1"),
        "resume_actor": lambda: sim.resume_actor(NS, "s1", uid),
        "suspend_actor": lambda: sim.suspend_actor(NS, "s1", uid, SnapshotFidelity.MEMORY),
        "delete_actor": lambda: sim.delete_actor(NS, "s1", uid),
        "create_egress_policy": lambda: sim.create_egress_policy(NS, "s1", uid, [RULE]),
    }[method]
    before = await _observable(sim)

    # fail_before (behind a delay fault, which is consumed by the same call): no effect at all
    fail = await sim.inject(method, "fail_before", code=Code.DEADLINE_EXCEEDED)
    wait = await sim.inject(method, "delay", delay=0.01)
    with pytest.raises(SubstrateError) as exc:
        await call()
    assert _code(exc) == Code.DEADLINE_EXCEEDED and exc.value.message == f"injected failure before {method}(s1)"
    assert (await sim.fault_hits(fail), await sim.fault_hits(wait)) == (1, 1)
    assert await _observable(sim) == before

    # lose_after: the effect happened, logged as without faults, and the call raises
    lost = await sim.inject(method, "lose_after", code=Code.INTERNAL)
    with pytest.raises(SubstrateError) as exc:
        await call()
    assert _code(exc) == Code.INTERNAL and exc.value.message == f"response lost: {method}(s1) took effect"
    assert await sim.fault_hits(lost) == 1
    log, actor, policy = await _observable(sim)
    if method == "get_actor":
        assert (log, actor, policy) == before
        return
    assert log[:-1] == before[0]
    last_method, detail = log[-1]
    assert last_method == method
    if method == "create_actor":
        assert isinstance(actor, Actor) and actor.state == ActorState.SUSPENDED
        assert detail == {"template": TEMPLATE, "from_tag": None}
    elif method == "resume_actor":
        assert isinstance(actor, Actor) and actor.state == ActorState.RUNNING and actor.version == 2
        assert detail == {"from": ActorState.SUSPENDED.value, "worker": actor.worker}
    elif method == "suspend_actor":
        assert isinstance(actor, Actor) and actor.state == ActorState.SUSPENDED and actor.version == 3
        assert [(s.generation, s.fidelity) for s in actor.snapshots] == [(1, SnapshotFidelity.MEMORY)]
        # size_bytes: the snapshot's size, the length of the empty durable state kept ('{}')
        assert detail == {"from": ActorState.RUNNING.value, "generation": 1, "fidelity": SnapshotFidelity.MEMORY.value,
                          "size_bytes": 2}
    elif method == "delete_actor":
        assert actor == Code.NOT_FOUND
        assert detail == {"from": ActorState.SUSPENDED.value}
    else:
        assert isinstance(policy, EgressPolicy) and list(policy.rules) == [RULE] and policy.version == 1
        rule = {"protocol": "https", "hostname": "api.example.com", "port": 443, "credential_headers": {}}
        assert detail == {"rules": [rule]}

    # the retry (no fault left) sees the effect
    retry_codes = {
        "create_actor": Code.ALREADY_EXISTS,
        "delete_actor": Code.NOT_FOUND,
        "create_egress_policy": Code.ALREADY_EXISTS,
    }
    if method in retry_codes:
        with pytest.raises(SubstrateError) as exc:
            await call()
        assert _code(exc) == retry_codes[method]
    else:
        await call()  # resume/suspend: no-ops now
    assert await sim.mutation_count(actor="s1", method=method) == 1


async def test_invalid_arguments_still_take_faults(sim: SimulatedSubstrate) -> None:
    fid = await sim.inject("create_actor", "fail_before", code=Code.ABORTED)
    with pytest.raises(SubstrateError) as exc:
        await sim.create_actor(NS, "a/b", TEMPLATE)
    assert _code(exc) == Code.ABORTED and await sim.fault_hits(fid) == 1
    with pytest.raises(SubstrateError) as exc:
        await sim.create_actor(NS, "a/b", TEMPLATE)
    assert _code(exc) == Code.INVALID_ARGUMENT

    uid = await _running(sim, "s1")
    fid = await sim.inject("suspend_actor", "lose_after")
    with pytest.raises(SubstrateError) as exc:
        await sim.suspend_actor(NS, "s1", uid, SnapshotFidelity.ROOTFS)
    assert _code(exc) == Code.INVALID_ARGUMENT and await sim.fault_hits(fid) == 1
    assert (await sim.get_actor(NS, "s1")).state == ActorState.RUNNING

    fid = await sim.inject("create_egress_policy", "fail_before")
    with pytest.raises(SubstrateError) as exc:
        await sim.create_egress_policy(NS, "s1", uid, [EgressRule("ftp", "x.example", 21)])
    assert _code(exc) == Code.UNAVAILABLE and await sim.fault_hits(fid) == 1


async def test_only_the_simulator_commits_asynchronously(sim: SimulatedSubstrate, database_url: str) -> None:
    # The runtime stand-in skips waiting for its WAL flush; the control plane's own commits
    # (every other connection, the store's included) keep waiting for theirs.
    assert sim._pool is not None
    async with sim._pool.connection() as conn:
        cur = await conn.execute("SELECT current_setting('synchronous_commit')")
        assert (await cur.fetchone()) == ("off",)
    store = await Store.open(database_url, pool_size=1, listen=False)
    try:
        assert await store._value("SELECT current_setting('synchronous_commit')") == "on"
    finally:
        await store.close()


async def test_open_installs_missing_functions(database_url: str) -> None:
    # a database installed before the simulator's functions existed
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'substrate_sim'"
        )
        functions = [r[0] for r in await cur.fetchall()]
        assert "substrate_sim.actor_json(text,text)" in functions
        for fn in functions:
            await conn.execute(f"DROP FUNCTION {fn}")
    async with SimulatedSubstrate(database_url) as sim:
        await sim.create_actor_template(NS, "rev-1", "img")
        actor = await sim.create_actor(NS, "s1", TEMPLATE)
        assert await sim.get_actor(NS, "s1") == actor


async def test_block_wait_release(sim: SimulatedSubstrate) -> None:
    uid = await _running(sim, "s1")
    fid = await sim.inject("suspend_actor", "block", actor="s1")
    task = asyncio.create_task(sim.suspend_actor(NS, "s1", uid))
    await sim.wait_blocked(fid, timeout=5.0)
    assert not task.done()
    assert (await sim.get_actor(NS, "s1")).state == ActorState.RUNNING  # nothing happened yet
    await sim.release(fid)
    actor = await asyncio.wait_for(task, 5.0)
    assert actor.state == ActorState.SUSPENDED
    with pytest.raises(TimeoutError):
        await sim.wait_blocked(fid, timeout=0.05)


async def test_block_released_from_another_instance(sim: SimulatedSubstrate, database_url: str) -> None:
    uid = (await sim.create_actor(NS, "s1", TEMPLATE)).uid
    async with SimulatedSubstrate(database_url) as other:
        fid = await other.inject("resume_actor", "block", times=None)
        tasks = [asyncio.create_task(sim.resume_actor(NS, "s1", uid)) for _ in range(2)]
        await other.wait_blocked(fid, count=2)
        await other.release(fid)
        results = await asyncio.wait_for(asyncio.gather(*tasks), 5.0)
    assert sorted(r for _, r in results) == [False, True]
    assert await sim.fault_hits(fid) == 2


async def test_clear_faults_unblocks(sim: SimulatedSubstrate) -> None:
    fid = await sim.inject("get_actor_template", "block")
    task = asyncio.create_task(sim.get_actor_template(NS, "rev-1"))
    await sim.wait_blocked(fid)
    await sim.clear_faults()
    assert (await asyncio.wait_for(task, 5.0)).name == "rev-1"


async def test_delay_and_actor_filter(sim: SimulatedSubstrate) -> None:
    await sim.create_actor(NS, "s1", TEMPLATE)
    await sim.create_actor(NS, "s2", TEMPLATE)
    await sim.inject("get_actor", "delay", actor="s1", delay=0.3)
    started = time.monotonic()
    await sim.get_actor(NS, "s2")  # not affected
    assert time.monotonic() - started < 0.25
    started = time.monotonic()
    await sim.get_actor(NS, "s1")
    assert time.monotonic() - started >= 0.3


async def test_times_and_fault_sequence(sim: SimulatedSubstrate) -> None:
    await sim.create_actor(NS, "s1", TEMPLATE)
    await sim.inject("get_actor", "fail_before", times=2, code=Code.INTERNAL)
    await sim.inject("get_actor", "fail_before", times=1, code=Code.ABORTED)
    codes: list[Code | None] = []
    for _ in range(4):
        try:
            await sim.get_actor(NS, "s1")
            codes.append(None)
        except SubstrateError as exc:
            codes.append(exc.code)
    assert codes == [Code.INTERNAL, Code.INTERNAL, Code.ABORTED, None]

    fid = await sim.inject("get_actor", "fail_before", times=None)
    for _ in range(3):
        with pytest.raises(SubstrateError):
            await sim.get_actor(NS, "s1")
    assert await sim.fault_hits(fid) == 3
    await sim.clear_faults()
    await sim.get_actor(NS, "s1")

    with pytest.raises(ValueError):
        await sim.inject("no_such_method", "delay")
    with pytest.raises(ValueError):
        await sim.inject("get_actor", "empty_page")


async def test_list_faults(sim: SimulatedSubstrate) -> None:
    for name in ("a", "b", "c"):
        await sim.create_actor(NS, name, TEMPLATE)
    await sim.inject("list_actors", "empty_page")
    page = await sim.list_actors(None, 2, "")
    assert page.items == [] and page.next_page_token != ""
    page = await sim.list_actors(None, 2, page.next_page_token)  # proceeds normally from the start
    assert [a.name for a in page.items] == ["a", "b"]
    token = page.next_page_token

    await sim.inject("list_actors", "stuck_token", times=2)
    for _ in range(2):
        stuck = await sim.list_actors(None, 2, token)
        assert stuck.items == [] and stuck.next_page_token == token
    page = await sim.list_actors(None, 2, token)
    assert [a.name for a in page.items] == ["c"] and page.next_page_token == ""

    await sim.inject("list_workers", "empty_page")
    first = await sim.list_workers(10, "")
    assert first.items == [] and first.next_page_token
    assert len((await sim.list_workers(10, first.next_page_token)).items) == 10


async def test_mutation_count_and_calls(sim: SimulatedSubstrate) -> None:
    uid = await _running(sim, "s1")
    await sim.resume_actor(NS, "s1", uid)  # no-op: not counted
    await sim.get_actor(NS, "s1")  # reads are not counted
    await sim.suspend_actor(NS, "s1", uid)
    await sim.suspend_actor(NS, "s1", uid)  # no-op
    assert await sim.mutation_count(actor="s1") == 3
    assert await sim.mutation_count(method="resume_actor") == 1
    assert await sim.mutation_count() == 4  # + create_actor_template
    log = await sim.calls(actor="s1")
    assert [c["method"] for c in log] == ["create_actor", "resume_actor", "suspend_actor"]
    assert all(c["pid"] == os.getpid() and c["uid"] == uid and c["atespace"] == NS for c in log)


# ---------------------------------------------------------------------------------------------
# concurrency across processes


async def test_two_instances_race_resume(sim: SimulatedSubstrate, database_url: str) -> None:
    uid = (await sim.create_actor(NS, "s1", TEMPLATE)).uid
    async with SimulatedSubstrate(database_url) as other:
        calls = [(sim if i % 2 else other).resume_actor(NS, "s1", uid) for i in range(20)]
        results = await asyncio.gather(*calls)
    assert sum(1 for _, resumed in results if resumed) == 1
    actor = await sim.get_actor(NS, "s1")
    assert actor.state == ActorState.RUNNING and actor.version == 2
    assert await sim.mutation_count(actor="s1", method="resume_actor") == 1
    held = [w for w in (await sim.list_workers(1000, "")).items if w.actor is not None]
    assert [w.name for w in held] == [actor.worker]


async def test_concurrent_resumes_of_many_actors_take_distinct_workers(sim: SimulatedSubstrate) -> None:
    uids = {f"s{i}": (await sim.create_actor(NS, f"s{i}", TEMPLATE)).uid for i in range(12)}
    results = await asyncio.gather(*(sim.resume_actor(NS, n, u) for n, u in uids.items()))
    workers = [a.worker for a, _ in results]
    assert len(set(workers)) == 12 and None not in workers


async def test_install_schema_is_idempotent_and_concurrent(database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("DROP SCHEMA substrate_sim CASCADE")
    await asyncio.gather(*(install_schema(database_url) for _ in range(3)))
    await install_schema(database_url)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute("SELECT count(*), min(idx), max(idx) FROM substrate_sim.workers")
        assert await cur.fetchone() == (256, 0, 255)
        cur = await conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'substrate_sim' AND c.relkind = 'r' AND obj_description(c.oid) IS NOT NULL"
        )
        assert await cur.fetchone() == (10,)  # turn_cancels too


async def test_resume_takes_the_lowest_free_worker_without_scanning_the_pool(database_url: str) -> None:
    """A resume reads one free worker through workers_free_idx, not every free worker of the pool
    (4,096 here), also under a generic plan made before the pool had statistics."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("DROP SCHEMA substrate_sim CASCADE")  # a pool that was never analyzed
    await install_schema(database_url, worker_pool_size=4096)
    async with SimulatedSubstrate(database_url, worker_pool_size=4096) as sim:
        await sim.create_actor_template(NS, "rev-1", "registry.local/agent:1")
        uid = (await sim.create_actor(NS, "s1", TEMPLATE)).uid
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            await conn.commit()
            cur = await conn.execute(
                "SELECT substrate_sim.resume_actor(%s, %s, %s, 4096, 0) -> 'actor' ->> 'worker'", (NS, "s1", uid)
            )
            row = await cur.fetchone()
            assert row is not None and row[0] == worker_identity(0)[0]
            cur = await conn.execute(
                "SELECT pg_stat_get_xact_tuples_fetched('substrate_sim.workers'::regclass)"
                " + pg_stat_get_xact_tuples_returned('substrate_sim.workers'::regclass)"
            )
            row = await cur.fetchone()
            assert row is not None and row[0] <= 3  # the free worker, then its update by name
            await conn.commit()
        actor = await sim.get_actor(NS, "s1")
        assert actor.state == ActorState.RUNNING and actor.worker == worker_identity(0)[0]
