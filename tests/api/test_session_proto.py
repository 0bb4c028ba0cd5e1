"""GetSession builds its answer from the dozen columns sessionq.get_session_views reads
(session_view_to_proto, issue 23): the same Session message as session_to_proto of the whole
record, for the row as created and with every optional field the answer shows set or empty (the
row is changed in the database, then read both ways)."""

from __future__ import annotations

import json
import uuid

from conftest import apply_agent
from psycopg import AsyncConnection

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.api.sessions import session_to_proto, session_view_to_proto
from sessionq.db.store import Store

AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")
FAILED = {"task_id": "t-1", "reason": "TIMEOUT", "message": "no answer", "failed_at": "2026-12-01T20:21:39.123456+00:00"}

# column changes (name = value) made to the Session before each comparison; times before 1970 too
VARIANTS: list[dict[str, object]] = [
    {},
    {"name": "named"},
    {"failure_reason": "RUNTIME", "failure_message": "it broke"},
    {"failure_reason": None, "failure_message": "no reason"},
    {"failure_reason": "RUNTIME", "failure_message": ""},
    {"quiescence_failure": json.dumps(FAILED)},
    {"quiescence_failure": json.dumps({**FAILED, "failed_at": None, "task_id": None})},
    {"created_at": "2026-01-02T03:04:05+02:00", "updated_at": "2026-01-02T03:04:05.000001-07:30"},
    {"created_at": "1969-12-31T23:59:59.999999+00:00", "updated_at": "1900-06-01T00:00:00.5+00:00"},
]


async def test_get_session_answer_is_the_whole_records_proto(api, store: Store, sim, aconn: AsyncConnection):
    await apply_agent(store, sim)
    stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
    created = (await stub.CreateSession(sessions_pb2.CreateSessionRequest(request_id="p1", agent=AGENT, name="n"),
                                        metadata=api.md(), timeout=10)).session
    sid = uuid.UUID(created.id)
    alone = Store(store.pool, coalesce_reads=False)
    for change in VARIANTS:
        for column, value in change.items():
            cast = "::jsonb" if column == "quiescence_failure" else ""
            # a column name from the list above, never from input
            await aconn.execute(f"UPDATE sessionq.sessions SET {column} = %s{cast} WHERE id = %s", (value, sid))
        expected = session_to_proto(await store.get_session(sid, "alice"))
        got = (await stub.GetSession(sessions_pb2.GetSessionRequest(session_id=created.id), metadata=api.md(),
                                     timeout=5)).session
        assert got == expected, change
        assert session_view_to_proto(await alone.get_session_view(sid, "alice")) == expected, change
    assert got.created_at.seconds == -1 and got.created_at.nanos == 999_999_000
    view = await store.get_session_view(sid, "alice")
    assert session_view_to_proto(view).last_quiescence_failure.reason == "TIMEOUT"
