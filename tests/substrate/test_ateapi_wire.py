"""The adapter (runtime.kind: substrate) against the simulator served as ateapi.Control: every
Substrate method through the wire, status codes one to one, lost responses and deadlines as
uncertain outcomes, unexpected shapes as clear failures (issue 17)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from sessionq._pb.ateapi import ateapi_pb2 as pb
from sessionq._pb.ateapi import ateapi_pb2_grpc as pb_grpc
from sessionq.runtime.ateapi import codec
from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from sessionq.runtime.base import ActorState, Code, EgressRule, SnapshotFidelity, SubstrateError
from sessionq.runtime.simulator import SimulatedSubstrate

NS = "team-a"
TEMPLATE = f"{NS}/rev-1"


@pytest.fixture
async def sim(database_url: str) -> AsyncIterator[SimulatedSubstrate]:
    """The test's own handle on the simulator's database: hooks and fault injection."""
    async with SimulatedSubstrate(database_url) as s:
        yield s


@pytest.fixture
async def rt(served: Any) -> Any:
    await served.client.create_actor_template(NS, "rev-1", "registry.local/agent:1")
    return served.client


@pytest.mark.clause("FLEET-5")
async def test_actor_lifecycle_through_the_wire(rt: SubstrateClient, sim: SimulatedSubstrate) -> None:
    made = await rt.create_actor(NS, "a1", TEMPLATE, env={"K": "v"})
    assert made.state == ActorState.SUSPENDED and made.uid and made.template == TEMPLATE
    assert await sim.read_env(NS, "a1") == {"K": "v"}
    actor, resumed = await rt.resume_actor(NS, "a1", made.uid)
    assert resumed and actor.state == ActorState.RUNNING and actor.worker and actor.worker_ip
    again, resumed = await rt.resume_actor(NS, "a1", made.uid)
    assert not resumed and again.worker == actor.worker
    paused = await rt.pause_actor(NS, "a1", made.uid)
    assert paused.state == ActorState.PAUSED
    await rt.resume_actor(NS, "a1", made.uid)
    suspended = await rt.suspend_actor(NS, "a1", made.uid, SnapshotFidelity.VOLUMES)
    assert suspended.state == ActorState.SUSPENDED and suspended.worker is None
    assert [s.fidelity for s in suspended.snapshots][-1] == SnapshotFidelity.VOLUMES
    got = await rt.get_actor(NS, "a1")
    assert got.uid == made.uid and got.version == suspended.version
    assert [s.generation for s in got.snapshots] == [s.generation for s in suspended.snapshots]
    # the simulator knows each snapshot's size, ateapi's Snapshot carries none: unknown through the wire
    direct = await sim.get_actor(NS, "a1")
    assert all(s.size_bytes is not None for s in direct.snapshots) and direct.snapshots
    assert all(s.size_bytes is None for s in got.snapshots)
    page = await rt.list_actors(NS, 10, "")
    assert [a.name for a in page.items] == ["a1"] and page.next_page_token == ""
    await rt.delete_actor(NS, "a1", made.uid)
    with pytest.raises(SubstrateError) as e:
        await rt.get_actor(NS, "a1")
    assert e.value.code == Code.NOT_FOUND


@pytest.mark.clause("Q-11")
async def test_uid_precondition_travels(rt: SubstrateClient) -> None:
    """A same-name replacement is never acted upon: the recorded UID goes with the call."""
    made = await rt.create_actor(NS, "a2", TEMPLATE)
    for call in (rt.resume_actor(NS, "a2", "other-uid"), rt.suspend_actor(NS, "a2", "other-uid"),
                 rt.delete_actor(NS, "a2", "other-uid"), rt.create_tag(NS, "t", "a2", "other-uid")):
        with pytest.raises(SubstrateError) as e:
            await call
        assert e.value.code == Code.FAILED_PRECONDITION
    assert (await rt.get_actor(NS, "a2")).uid == made.uid


async def test_uid_preflight_for_a_real_substrate(served: Any, sim: SimulatedSubstrate) -> None:
    """uid_preflight reads the Actor first (a real Substrate ignores the header)."""
    client = SubstrateClient(SubstrateOptions(address=served.address, uid_preflight=True))
    await client.open()
    try:
        await client.create_actor_template(NS, "rev-1", "img:1")
        made = await client.create_actor(NS, "a3", TEMPLATE)
        with pytest.raises(SubstrateError) as e:
            await client.resume_actor(NS, "a3", "other-uid")
        assert e.value.code == Code.FAILED_PRECONDITION and "uid mismatch" in e.value.message
        assert await sim.mutation_count(actor="a3", method="resume_actor") == 0
        _, resumed = await client.resume_actor(NS, "a3", made.uid)
        assert resumed
    finally:
        await client.close()


async def test_templates_egress_tags_workers(rt: SubstrateClient, sim: SimulatedSubstrate) -> None:
    tpl = await rt.get_actor_template(NS, "rev-1")
    assert tpl.image == "registry.local/agent:1"
    with pytest.raises(SubstrateError) as e:
        await rt.create_actor_template(NS, "rev-1", "x")
    assert e.value.code == Code.ALREADY_EXISTS
    made = await rt.create_actor(NS, "a4", TEMPLATE)
    rules = [EgressRule("https", "api.example.com", 443, {"Authorization": "ate-secret://k8s/s/key"}),
             EgressRule("http", "example.org", 8080)]
    policy = await rt.create_egress_policy(NS, "a4", made.uid, rules)
    assert policy.actor_uid == made.uid and set(policy.rules) == set(rules)
    got = await rt.get_egress_policy(NS, "a4")
    assert set(got.rules) == set(rules) and got.version == policy.version
    updated = await rt.update_egress_policy(NS, "a4", made.uid, rules[:1])
    assert list(updated.rules) == rules[:1] and updated.version > policy.version
    await rt.resume_actor(NS, "a4", made.uid)
    await rt.suspend_actor(NS, "a4", made.uid)
    tag = await rt.create_tag(NS, "t4", "a4", made.uid)
    assert tag.actor_uid == made.uid and tag.actor_name == "a4" and tag.snapshot_generation >= 1
    got_tag = await rt.get_tag(NS, "t4")
    assert got_tag == tag
    fork = await rt.create_actor(NS, "a4-fork", TEMPLATE, from_tag="t4")
    assert fork.uid != made.uid
    await rt.delete_tag(NS, "t4")
    with pytest.raises(SubstrateError) as e:
        await rt.get_tag(NS, "t4")
    assert e.value.code == Code.NOT_FOUND
    workers = await rt.list_workers(5, "")
    assert len(workers.items) == 5 and workers.next_page_token
    nxt = await rt.list_workers(5, workers.next_page_token)
    assert {w.name for w in nxt.items}.isdisjoint({w.name for w in workers.items})
    with pytest.raises(SubstrateError) as e:
        await rt.list_actors(None, 10, "garbage!")
    assert e.value.code == Code.INVALID_ARGUMENT
    await rt.delete_actor_template(NS, "rev-1", tpl.uid)


async def test_status_codes_map_one_to_one(rt: SubstrateClient, sim: SimulatedSubstrate) -> None:
    for code in (Code.UNAVAILABLE, Code.ABORTED, Code.RESOURCE_EXHAUSTED, Code.INTERNAL, Code.PERMISSION_DENIED,
                 Code.FAILED_PRECONDITION, Code.NOT_FOUND):
        await sim.inject("get_actor", "fail_before", actor="nobody", code=code)
        with pytest.raises(SubstrateError) as e:
            await rt.get_actor(NS, "nobody")
        assert e.value.code == code, code


async def test_lost_response_applies_the_effect(rt: SubstrateClient, sim: SimulatedSubstrate) -> None:
    """The server applies the effect, then the call ends UNAVAILABLE: an uncertain outcome."""
    made = await rt.create_actor(NS, "a5", TEMPLATE)
    await sim.inject("resume_actor", "lose_after", actor="a5")
    with pytest.raises(SubstrateError) as e:
        await rt.resume_actor(NS, "a5", made.uid)
    assert e.value.code == Code.UNAVAILABLE
    assert (await rt.get_actor(NS, "a5")).state == ActorState.RUNNING


async def test_delay_past_the_deadline(served: Any, sim: SimulatedSubstrate) -> None:
    """A call slower than the per-call deadline ends DEADLINE_EXCEEDED; the effect still happens."""
    client = SubstrateClient(SubstrateOptions(address=served.address, call_timeout=0.3, uid_preflight=False))
    await client.open()
    try:
        await client.create_actor_template(NS, "rev-1", "img:1")
        made = await client.create_actor(NS, "a6", TEMPLATE)
        await sim.inject("suspend_actor", "delay", actor="a6", delay=0.8)
        await client.resume_actor(NS, "a6", made.uid)
        with pytest.raises(SubstrateError) as e:
            await client.suspend_actor(NS, "a6", made.uid)
        assert e.value.code == Code.DEADLINE_EXCEEDED
        for _ in range(50):
            if (await client.get_actor(NS, "a6")).state == ActorState.SUSPENDED:
                break
            await asyncio.sleep(0.05)
        assert (await client.get_actor(NS, "a6")).state == ActorState.SUSPENDED
    finally:
        await client.close()


async def test_reflection_and_health(served: Any) -> None:
    async with grpc.aio.insecure_channel(served.address) as ch:
        health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="ateapi.Control"))
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)

        async def one() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")

        names = [s.name async for r in stub.ServerReflectionInfo(one()) for s in r.list_services_response.service]
        assert "ateapi.Control" in names
        # an RPC sessionq does not use answers UNIMPLEMENTED, not INTERNAL
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await pb_grpc.ControlStub(ch).ListAtespaces(pb.ListAtespacesRequest())
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        # a request the frame cannot serve is INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await pb_grpc.ControlStub(ch).GetActor(pb.GetActorRequest())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await served.client.check_health() is None


# ---------------------------------------------------------------------------------------------
# a Substrate answering shapes we do not expect


class OddControl(pb_grpc.ControlServicer):
    def __init__(self, answer: pb.Actor) -> None:
        self.answer = answer

    async def GetActor(self, request: pb.GetActorRequest, context: Any) -> pb.Actor:
        return self.answer


GOOD = pb.Actor(metadata=pb.ResourceMetadata(atespace=NS, name="x", uid="u-1", version=1),
                actor_template=pb.ObjectRef(atespace=NS, name="rev-1"),
                status=pb.ActorStatus(state=pb.ACTOR_STATE_SUSPENDED))


def _without_status() -> pb.Actor:
    a = pb.Actor()
    a.CopyFrom(GOOD)
    a.ClearField("status")
    return a


def _unknown_state() -> pb.Actor:
    raw = pb.Actor()
    raw.CopyFrom(GOOD)
    raw.status.state = 42  # an enum number this build does not know (proto3 keeps it)
    return raw


def _empty_uid() -> pb.Actor:
    a = pb.Actor()
    a.CopyFrom(GOOD)
    a.metadata.uid = ""
    return a


def _unknown_fidelity() -> pb.Actor:
    a = pb.Actor()
    a.CopyFrom(GOOD)
    a.status.snapshots.add(generation=1, storage=[pb.SnapshotStorage(
        durability=pb.SNAPSHOT_DURABILITY_DURABLE, status=pb.SNAPSHOT_STORAGE_STATUS_COMPLETED, fidelity=9)])
    return a


@pytest.mark.parametrize(("answer", "why"), [
    (_without_status(), "without status"),
    (_unknown_state(), "unknown enum number 42"),
    (_empty_uid(), "metadata.uid is empty"),
    (_unknown_fidelity(), "unknown enum number 9"),
])
async def test_unexpected_shapes_are_clear_failures(answer: pb.Actor, why: str) -> None:
    server = grpc.aio.server()
    pb_grpc.add_ControlServicer_to_server(OddControl(answer), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = SubstrateClient(SubstrateOptions(address=f"127.0.0.1:{port}"))
    await client.open()
    try:
        with pytest.raises(SubstrateError) as e:
            await client.get_actor(NS, "x")
        assert e.value.code == Code.INTERNAL and why in e.value.message and "unexpected shape" in e.value.message
        ok = OddControl(GOOD)
        assert codec.actor_from_pb(ok.answer).uid == "u-1"
    finally:
        await client.close()
        await server.stop(0)


# ---------------------------------------------------------------------------------------------
# cancel_turn: A2A CancelTask to the Actor's endpoint


class Cancels(SimulatedSubstrate):
    """A simulator that records the turns it was told to cancel."""

    cancelled: list[tuple[str, ...]]

    async def cancel_turn(
        self, atespace: str, name: str, uid: str, session_id: str, task_id: str, *, credential: str | None = None
    ) -> None:
        self.cancelled.append((atespace, name, uid, session_id, task_id, credential or ""))


async def test_cancel_turn_reaches_the_actors_endpoint(database_url: str) -> None:
    from sessionq.runtime.ateapi.actor_endpoint import ActorEndpoints

    async with Cancels(database_url) as runtime:
        runtime.cancelled = []
        endpoints = ActorEndpoints(runtime)
        await endpoints.start("127.0.0.1:0")
        client = SubstrateClient(SubstrateOptions(address="127.0.0.1:1", actor_address_pattern=endpoints.pattern))
        await client.open()
        try:
            await client.cancel_turn(NS, "a7", "uid-7", "session-7", "task-7")
            await client.cancel_turn(NS, "a7", "uid-7", "session-7", "task-7")  # idempotent for the caller
            # the Session's workload credential goes with the call, as with a turn's
            await client.cancel_turn(NS, "a7", "uid-7", "session-7", "task-7", credential="sqw.session-7.mac")
            assert runtime.cancelled == [(NS, "a7", "uid-7", "session-7", "task-7", "")] * 2 + [
                (NS, "a7", "uid-7", "session-7", "task-7", "sqw.session-7.mac")]
        finally:
            await client.close()
            await endpoints.stop()


async def test_cancel_turn_on_a_runtime_that_cannot(database_url: str) -> None:
    from sessionq.runtime.ateapi.actor_endpoint import ActorEndpoints

    class NoCancel:
        async def invoke(self, *args: Any) -> None:
            raise AssertionError("not called")

    endpoints = ActorEndpoints(NoCancel())  # type: ignore[arg-type]
    await endpoints.start("127.0.0.1:0")
    client = SubstrateClient(SubstrateOptions(address="127.0.0.1:1", actor_address_pattern=endpoints.pattern))
    await client.open()
    try:
        with pytest.raises(SubstrateError) as e:
            await client.cancel_turn(NS, "a8", "uid-8", "session-8", "task-8")
        assert e.value.code == Code.UNIMPLEMENTED and "cannot cancel" in e.value.message
    finally:
        await client.close()
        await endpoints.stop()


def test_timestamps_round_trip_exactly() -> None:
    """The codec's direct Timestamp arithmetic agrees with protobuf's own conversion, to the
    microsecond, before and after the epoch and across time zones."""
    from datetime import UTC, datetime, timedelta, timezone

    from google.protobuf.timestamp_pb2 import Timestamp

    for value in (datetime(2026, 12, 1, 19, 8, 58, 123456, tzinfo=UTC),
                  datetime(1969, 7, 20, 20, 17, 40, 999999, tzinfo=UTC),
                  datetime(2030, 1, 1, 1, 0, 0, 1, tzinfo=timezone(timedelta(hours=-5)))):
        expected = Timestamp()
        expected.FromDatetime(value.astimezone(UTC))
        got = codec.timestamp(value)
        assert (got.seconds, got.nanos) == (expected.seconds, expected.nanos), value
        assert codec.from_timestamp(got, True) == value
    assert codec.from_timestamp(Timestamp(), False) == datetime(1970, 1, 1, tzinfo=UTC)
