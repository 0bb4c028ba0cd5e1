"""GetSession builds its answer from the dozen columns sessionq.get_session_views reads (a
SessionView, read by column name): the same Session message as session_to_proto of the whole
record (through Session.view()), for the row as created and with every optional field the answer
shows set or empty (the row is changed in the database, then read both ways)."""

from __future__ import annotations

import json
import uuid

import pytest
from conftest import apply_agent
from psycopg import AsyncConnection

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.api.sessions import session_to_proto
from sessionq.db.store import Store
from sessionq.models import Session, SessionView

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)

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
        assert session_to_proto(await alone.get_session_view(sid, "alice")) == expected, change
    assert got.created_at.seconds == -1 and got.created_at.nanos == 999_999_000
    view = await store.get_session_view(sid, "alice")
    assert session_to_proto(view).last_quiescence_failure.reason == "TIMEOUT"


async def test_list_sessions_pages_are_the_whole_records_protos(api, store: Store, sim, aconn: AsyncConnection):
    """ListSessions answers from sessionq.list_session_views: each page the same rows as
    list_sessions with the same arguments, each row's message session_to_proto of the whole
    record, the answer's bytes those of the message built from the whole records, for every
    filter (own or every creator's, an agent or none), page size and page token."""
    from sessionq.api.paging import next_id_token

    await apply_agent(store, sim)
    stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
    for who, n in (("alice", 7), ("bob", 3)):
        for i in range(n):
            await stub.CreateSession(sessions_pb2.CreateSessionRequest(request_id=f"{who}{i}", agent=AGENT, name=f"s{i}"),
                                     metadata=api.md(who), timeout=10)
    # some rows with every optional field the answer shows, and one deleted (never listed)
    await aconn.execute("UPDATE sessionq.sessions SET failure_reason = 'RUNTIME', failure_message = 'x',"
                        " quiescence_failure = %s::jsonb WHERE name = 's1'", (json.dumps(FAILED),))
    await aconn.execute("UPDATE sessionq.sessions SET state = 'DELETED', revision_id = NULL, actor_uid = NULL"
                        " WHERE name = 's2' AND creator = 'alice'")
    admin = store  # list_sessions and list_session_views take the caller as given (the servicer checks admins)
    for caller, everyone in (("alice", False), ("bob", False), ("alice", True)):
        for namespace, agent in ((None, None), ("kagent", "my-first-agent"), ("kagent", "other")):
            for limit in (1, 2, 50):
                after = None
                while True:
                    whole = await admin.list_sessions(caller, everyone, namespace, agent, after, limit + 1)
                    views = await admin.list_session_views(caller, everyone, namespace, agent, after, limit + 1)
                    assert [v.id for v in views] == [str(s.id) for s in whole]
                    assert [session_to_proto(v) for v in views] == [session_to_proto(s) for s in whole]
                    if len(whole) <= limit:
                        break
                    after = whole[limit - 1].id
    # through the API: the answer's bytes as the whole records would have built them
    for limit in (2, 50):
        got = await stub.ListSessions(
            sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=limit)), metadata=api.md(), timeout=5)
        whole = await store.list_sessions("alice", False, None, None, None, limit + 1)
        expected = sessions_pb2.ListSessionsResponse(
            sessions=[session_to_proto(s) for s in whole[:limit]],
            page=common_pb2.PageResponse(next_page_token=next_id_token(whole, limit)))
        assert got.SerializeToString() == expected.SerializeToString()
        assert len(got.sessions) == min(limit, 6) and got.HasField("page")


async def test_the_view_functions_answer_exactly_the_fields_of_a_session_view(aconn: AsyncConnection):
    """SessionView is read by column name: get_session_views and list_session_views answer one column
    per field of it (and `ord`), no more, so a field added to one place and not the other fails here."""
    fields = {"ord", *SessionView._fields}
    for function in ("get_session_views", "list_session_views"):
        cur = await aconn.execute(
            "SELECT proargnames[pronargs + 1:] FROM pg_proc WHERE proname = %s"
            " AND pronamespace = 'sessionq'::regnamespace", (function,))
        [(columns,)] = await cur.fetchall()
        assert set(columns) == fields, function
    assert set(SessionView._fields) <= set(Session.__dataclass_fields__) | {"created_us", "updated_us"}
