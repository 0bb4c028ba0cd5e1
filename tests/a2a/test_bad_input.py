"""Bad input on every binding: the A2A specification's errors, never INTERNAL or a traceback, nothing written."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2
from a2a.utils.errors import InvalidParamsError
from conftest import apply_agent
from google.rpc import error_details_pb2, status_pb2
from harness import a2a_env, as_user, settings_for_a2a, user_message

pytestmark = pytest.mark.timeout(180)

AUTH = {"Authorization": "Bearer alice-token", "A2A-Version": "1.0"}


async def counts(store: Any) -> tuple[int, int, int]:
    row = (await store._rows(
        "SELECT (SELECT count(*) FROM sessionq.sessions) AS s, (SELECT count(*) FROM sessionq.tasks) AS t,"
        " (SELECT count(*) FROM sessionq.push_configs) AS p"
    ))[0]
    return row["s"], row["t"], row["p"]


@pytest.mark.clause("A2A-1")
@pytest.mark.clause("A2A-2")
async def test_bad_input_on_jsonrpc_rest_and_grpc(database_url, store, sim):
    settings = settings_for_a2a(**{"a2a.maxMessageBytes": 4096, "auth.namespaces": {"carol": ["team-c"]},
                                   "auth.tokens": {"alice-token": "alice", "bob-token": "bob", "carol-token": "carol"}})
    await apply_agent(store, sim)
    async with a2a_env(settings, database_url, store, sim) as env:
        url = f"{env.base}/api/a2a/kagent/my-first-agent/jsonrpc"
        http = env.http

        async def rpc(body: Any, headers: dict[str, str] = AUTH, raw: bytes | None = None) -> tuple[int, Any]:
            r = await http.post(url, content=raw, headers=headers) if raw is not None else await http.post(
                url, json=body, headers=headers)
            return r.status_code, r.json()

        # a real task of alice's to aim at
        async with env.client("GRPC", streaming=False) as client:
            events = [e async for e in client.send_message(
                a2a_pb2.SendMessageRequest(message=user_message("What is 1+1?")), context=as_user())]
            task = events[-1].task
        before = await counts(store)

        status, body = await rpc(None, raw=b"{not json")
        assert status == 200 and body["error"]["code"] == -32700
        status, body = await rpc([1, 2])
        assert body["error"]["code"] == -32600
        status, body = await rpc({"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": {}})
        assert body["error"]["code"] == -32601
        status, body = await rpc({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": "text"}})
        assert body["error"]["code"] == -32602
        status, body = await rpc({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": {"x": 1}}})
        assert body["error"]["code"] == -32602
        huge = {"messageId": "m-huge", "role": "ROLE_USER", "parts": [{"text": "x" * 10_000}]}
        status, body = await rpc({"jsonrpc": "2.0", "id": 4, "method": "SendMessage", "params": {"message": huge}})
        assert body["error"]["code"] == -32602 and "largest message" in body["error"]["message"]
        # TaskNotFound: a missing task and another user's, alike, also for a stream (A2A-1, A2A-2)
        for user, tid in (("alice", "no-such-task"), ("bob", task.id)):
            headers = {**AUTH, "Authorization": f"Bearer {user}-token"}
            status, body = await rpc({"jsonrpc": "2.0", "id": 5, "method": "GetTask", "params": {"id": tid}}, headers)
            assert body["error"]["code"] == -32001
            r = await http.post(url, json={"jsonrpc": "2.0", "id": 6, "method": "SubscribeToTask",
                                           "params": {"id": tid}}, headers=headers)
            assert "-32001" in r.text and tid not in ("",)
        status, body = await rpc({"jsonrpc": "2.0", "id": 7, "method": "CancelTask", "params": {"id": task.id}})
        assert body["error"]["code"] == -32002  # a finished task: TaskNotCancelable
        # no token: 401; a namespace the caller may not use: 403 (as for the card, A2A-4)
        assert (await http.post(url, json={"jsonrpc": "2.0", "id": 8, "method": "GetTask",
                                           "params": {"id": task.id}})).status_code == 401
        carol = {**AUTH, "Authorization": "Bearer carol-token"}
        assert (await rpc({"jsonrpc": "2.0", "id": 9, "method": "GetTask", "params": {"id": task.id}}, carol))[0] == 403

        # HTTP+JSON: a missing task is 404 with TASK_NOT_FOUND; a body that is not JSON is 400
        rest = f"{env.base}/api/a2a/kagent/my-first-agent/rest"
        r = await http.get(f"{rest}/tasks/no-such-task", headers=AUTH)
        assert r.status_code == 404 and "TASK_NOT_FOUND" in r.text
        r = await http.post(f"{rest}/message:send", content=b"{oops", headers={**AUTH, "Content-Type": "application/json"})
        assert 400 <= r.status_code < 500
        r = await http.get(f"{rest}/tasks/{task.id}", headers={**AUTH, "Authorization": "Bearer bob-token"})
        assert r.status_code == 404
        # a body beyond the configured limit is refused before it is read
        big = b"{" + b" " * (64 * 1024 * 1024) + b"}"
        r = await http.post(f"{rest}/message:send", content=big, headers=AUTH)
        assert r.status_code == 413

        # gRPC: an undecodable body on an A2A method is INVALID_ARGUMENT of the A2A domain
        async with grpc.aio.insecure_channel(env.grpc_address) as channel:
            call = channel.unary_unary("/lf.a2a.v1.A2AService/GetTask")
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await call(b"\xff\xff\xff", metadata=[("authorization", "Bearer alice-token")], timeout=10)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            details = dict(e.value.trailing_metadata() or ())
            status = status_pb2.Status.FromString(details["grpc-status-details-bin"])
            info = error_details_pb2.ErrorInfo()
            status.details[0].Unpack(info)
            assert (info.domain, info.reason) == ("a2a-protocol.org", "INVALID_PARAMS")
        async with env.client("GRPC", streaming=False) as client:
            with pytest.raises(InvalidParamsError):
                async for _ in client.send_message(a2a_pb2.SendMessageRequest(
                        message=user_message("y" * 10_000)), context=as_user()):
                    pass

        assert await counts(store) == before  # nothing was written by any of it
