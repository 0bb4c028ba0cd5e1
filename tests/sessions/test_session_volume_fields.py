"""The newer Session fields over gRPC (giantswarm's sessions.proto additions, issue 20):
`volume_source` is refused FAILED_PRECONDITION (no volume admission is configured) after its
capacity is checked as a whole number of bytes; `admission_token` is never stored nor returned."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest
from conftest import apply_agent

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)

AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")
TOKEN = "adm1ss10n-t0ken-never-stored"


def volume(capacity: str = "20Gi") -> sessions_pb2.SessionVolumeSource:
    return sessions_pb2.SessionVolumeSource(
        snapshot=sessions_pb2.SessionVolumeSnapshot(csi_driver="ebs.csi.aws.com", snapshot_handle="snap-0a1b"),
        capacity=capacity, storage_class="gp3")


async def stored_anywhere(store: Any, text: str) -> int:
    """Rows of sessionq's tables and of the job queue whose text holds `text`."""
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM sessionq.sessions s WHERE to_jsonb(s)::text LIKE %(p)s)"
            " + (SELECT count(*) FROM procrastinate_jobs j WHERE to_jsonb(j)::text LIKE %(p)s) AS n",
            {"p": f"%{text}%"})
        row = await cur.fetchone()
        return int(row["n"])


async def test_a_volume_source_without_a_configured_admission_is_failed_precondition(api, store, sim, caplog):
    caplog.set_level(logging.DEBUG)
    await apply_agent(store, sim)
    stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
    for token in ("", TOKEN):
        request = sessions_pb2.CreateSessionRequest(request_id="vol", agent=AGENT, volume_source=volume(),
                                                    admission_token=token)
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.CreateSession(request, metadata=api.md(), timeout=10)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "volume admission" in (e.value.details() or "")
    async with store.pool.connection() as conn:
        assert (await (await conn.execute("SELECT count(*) AS n FROM sessionq.sessions")).fetchone())["n"] == 0
    assert await stored_anywhere(store, TOKEN) == 0
    assert TOKEN not in caplog.text  # nor logged


@pytest.mark.parametrize(("capacity", "words"), [
    ("0", "positive number of bytes"),
    ("0.0Gi", "positive number of bytes"),
    ("1.5", "whole number of bytes"),
    ("20ki", "unknown suffix 'ki'"),
    ("9Ei", "larger than"),
])
async def test_a_capacity_its_pattern_lets_through_is_still_checked(api, store, sim, capacity, words):
    stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
    request = sessions_pb2.CreateSessionRequest(request_id="vol", agent=AGENT, volume_source=volume(capacity))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.CreateSession(request, metadata=api.md(), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "volume_source.capacity" in (e.value.details() or "") and words in (e.value.details() or "")


async def test_an_admission_token_alone_is_accepted_and_never_stored_or_returned(api, store, sim, caplog):
    caplog.set_level(logging.DEBUG)
    await apply_agent(store, sim)
    stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
    request = sessions_pb2.CreateSessionRequest(request_id="tok", agent=AGENT, admission_token=TOKEN)
    created = await stub.CreateSession(request, metadata=api.md(), timeout=15)
    got = await stub.GetSession(sessions_pb2.GetSessionRequest(session_id=created.session.id), metadata=api.md(),
                                timeout=5)
    listed = await stub.ListSessions(sessions_pb2.ListSessionsRequest(), metadata=api.md(), timeout=5)
    for response in (created, got, listed):
        assert TOKEN.encode() not in response.SerializeToString()
    assert not got.session.HasField("volume_source") and not got.session.HasField("last_quiescence_failure")
    assert await stored_anywhere(store, TOKEN) == 0
    assert caplog.records and TOKEN not in caplog.text  # the server logged, and never the token
    # the token is no part of the request's identity: a retry without it is the same creation
    again = await stub.CreateSession(sessions_pb2.CreateSessionRequest(request_id="tok", agent=AGENT),
                                     metadata=api.md(), timeout=15)
    assert again.session.id == created.session.id
