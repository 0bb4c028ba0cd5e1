"""GetSession builds its answer straight from the database's row (session_row_to_proto, issue 23's
fourth pass): the same Session message as session_to_proto of the decoded record, for the row as
stored and with every optional field the answer shows set or empty."""

from __future__ import annotations

import uuid
from typing import Any

from conftest import apply_agent

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.api.sessions import session_row_to_proto, session_to_proto
from sessionq.models import Session

AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")


def variants(row: dict[str, Any]) -> list[dict[str, Any]]:
    failed = {"task_id": "t-1", "reason": "TIMEOUT", "message": "no answer", "failed_at": "2026-12-01T20:21:39.123456+00:00"}
    return [
        row,
        {**row, "revision_id": str(uuid.uuid4()), "name": "named"},
        {**row, "failure_reason": "RUNTIME", "failure_message": "it broke", "state": "FAILED"},
        {**row, "failure_reason": None, "failure_message": "no reason"},
        {**row, "failure_reason": "RUNTIME", "failure_message": ""},
        {**row, "quiescence_failure": failed, "operation": "SUSPEND"},
        {**row, "quiescence_failure": {**failed, "failed_at": None, "task_id": None}},
        {**row, "created_at": "2026-01-02T03:04:05+02:00", "updated_at": "2026-01-02T03:04:05.000001-07:30"},
    ]


async def test_get_session_answer_is_the_decoded_records_proto(api, store, sim):
    await apply_agent(store, sim)
    stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
    created = (await stub.CreateSession(sessions_pb2.CreateSessionRequest(request_id="p1", agent=AGENT, name="n"),
                                        metadata=api.md(), timeout=10)).session
    sid = uuid.UUID(created.id)
    row = await store.get_session_row(sid, "alice")
    assert isinstance(row, dict) and row["id"] == created.id
    got = (await stub.GetSession(sessions_pb2.GetSessionRequest(session_id=created.id), metadata=api.md(),
                                 timeout=5)).session
    assert got == session_to_proto(await store.get_session(sid, "alice"))
    for v in variants(row):
        assert session_row_to_proto(v) == session_to_proto(Session.from_json(v)), v
    assert session_row_to_proto(variants(row)[5]).last_quiescence_failure.message == "no answer"
