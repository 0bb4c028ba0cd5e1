"""schema/35_a2a.sql on real connections: the push stream lease under racers, and where push
notifications may go (domain/push.py)."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from sessionq.domain.push import check_target
from sessionq.errors import SessionqError


async def test_one_of_many_racers_takes_a_tasks_push_stream(database_url: str) -> None:
    conns = [await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in range(8)]
    try:
        executors = [uuid.uuid4() for _ in conns]

        async def claim(conn: psycopg.AsyncConnection, executor: uuid.UUID) -> bool:
            cur = await conn.execute("SELECT sessionq.claim_push_stream('task-1', %s, 30)", (executor,))
            row = await cur.fetchone()
            return bool(row and row[0])

        won = await asyncio.gather(*(claim(c, e) for c, e in zip(conns, executors, strict=True)))
        assert sum(won) == 1
        holder = executors[won.index(True)]
        assert await claim(conns[0], holder)  # the holder renews its lease
        await conns[0].execute("SELECT sessionq.release_push_stream('task-1', %s)", (holder,))
        other = next(e for e in executors if e != holder)
        assert await claim(conns[1], other)  # released: the next job takes it
        # an expired lease is taken over
        await conns[0].execute("UPDATE sessionq.push_streams SET expires_at = clock_timestamp() - interval '1 s'")
        assert await claim(conns[2], holder)
    finally:
        for c in conns:
            await c.close()


@pytest.mark.parametrize("url", ["http://127.0.0.1/x", "http://localhost:8080/x", "http://10.0.0.1/", "http://[::1]/",
                                 "http://169.254.169.254/latest", "http://192.168.1.1/", "http://[fe80::1]/"])
async def test_private_targets_are_refused_unless_allowed(url: str) -> None:
    with pytest.raises(SessionqError) as e:
        await check_target(url, allow_private=False)
    assert e.value.sqlstate == "SQ400"
    await check_target(url, allow_private=True)


@pytest.mark.parametrize("url", ["ftp://example.com/", "not a url", "http:///nohost", "http://x:99999/"])
async def test_what_is_not_an_http_url_is_refused_always(url: str) -> None:
    with pytest.raises(SessionqError):
        await check_target(url, allow_private=True)


async def test_a_public_address_is_accepted() -> None:
    await check_target("https://93.184.216.34/hook", allow_private=False)


def test_validation_errors_on_a2a_methods_carry_the_a2a_domain() -> None:
    """The shared interceptor's INVALID_ARGUMENT details: on an A2A method also ErrorInfo
    INVALID_PARAMS of the A2A domain, which the a2a-sdk's gRPC client raises as InvalidParamsError."""
    from google.rpc import error_details_pb2, status_pb2

    from sessionq._pb.buf.validate import validate_pb2
    from sessionq.api.validation import status_details

    violation = validate_pb2.Violation(rule_id="string.min_len", message="too short")
    for a2a, expected in ((True, [("a2a-protocol.org", "INVALID_PARAMS")]), (False, [])):
        status = status_pb2.Status.FromString(status_details([violation], a2a))
        infos = []
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                infos.append((info.domain, info.reason))
        assert infos == expected
