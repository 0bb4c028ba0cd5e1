"""A push-notification config belongs to whoever created it: only its creator reads, replaces or
deletes it, and nobody, its creator included, gets its token or credentials back. Driven over the
gRPC binding (grpcio stubs, to see each status code) and the a2a-sdk's JSON-RPC and HTTP+JSON
clients, as the Session's owner, a READ_ONLY share holder and a READ_WRITE share holder."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.errors import A2AError
from conftest import apply_agent
from harness import TENANT, as_user, env, settings_for_a2a, user_message  # noqa: F401 - fixtures
from test_shares import share, with_share

from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2, sessions_pb2_grpc

pytestmark = pytest.mark.timeout(180)

OWNER_URL = "http://127.0.0.1:9/hooks/owner-secret-path-7f3a"
BOB_URL = "http://127.0.0.1:9/hooks/bob-secret-path-91c2"


@pytest.fixture
def a2a_settings() -> Any:
    # the owner alice, bob (a READ_WRITE share) and carol (a READ_ONLY share)
    return settings_for_a2a(**{"auth.tokens": {"alice-token": "alice", "bob-token": "bob", "carol-token": "carol"}})


def metadata(user: str, share_token: str | None = None) -> list[tuple[str, str]]:
    md = [("authorization", f"Bearer {user}-token")]
    if share_token:
        md.append(("x-kagent-share-token", share_token))
    return md


def config(task_id: str, config_id: str, url: str, token: str) -> a2a_pb2.TaskPushNotificationConfig:
    return a2a_pb2.TaskPushNotificationConfig(
        tenant=TENANT, task_id=task_id, id=config_id, url=url, token=token,
        authentication=a2a_pb2.AuthenticationInfo(scheme="Bearer", credentials=f"{token}-credentials"))


async def stored(store: Any, task_id: str) -> dict[str, tuple[str, str, str]]:
    rows = await store._rows("SELECT id, url, token, created_by FROM sessionq.push_configs WHERE task_id = %s",
                             (task_id,))
    return {r["id"]: (r["url"], r["token"], r["created_by"]) for r in rows}


async def refused(call: Any, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    assert e.value.code() == code, e.value
    return str(e.value.details())


async def test_a_push_config_is_its_creators_and_its_token_is_write_only(env, store, sim):
    await apply_agent(store, sim)
    async with env.client("GRPC", streaming=False) as client:
        events = [e async for e in client.send_message(a2a_pb2.SendMessageRequest(
            message=user_message("[input-required] Book a table")), context=as_user())]
    task = events[-1].task
    assert task.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    ro = await share(env, task.context_id, sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY)
    rw = await share(env, task.context_id, sessions_pb2.SESSION_SHARE_PERMISSION_READ_WRITE)
    owner, reader, writer = metadata("alice"), metadata("carol", ro), metadata("bob", rw)

    def get(config_id: str) -> a2a_pb2.GetTaskPushNotificationConfigRequest:
        return a2a_pb2.GetTaskPushNotificationConfigRequest(tenant=TENANT, task_id=task.id, id=config_id)

    def listing() -> a2a_pb2.ListTaskPushNotificationConfigsRequest:
        return a2a_pb2.ListTaskPushNotificationConfigsRequest(tenant=TENANT, task_id=task.id)

    def delete(config_id: str) -> a2a_pb2.DeleteTaskPushNotificationConfigRequest:
        return a2a_pb2.DeleteTaskPushNotificationConfigRequest(tenant=TENANT, task_id=task.id, id=config_id)

    async with grpc.aio.insecure_channel(env.grpc_address) as channel:
        a2a = a2a_pb2_grpc.A2AServiceStub(channel)
        created = await a2a.CreateTaskPushNotificationConfig(
            config(task.id, "hook", OWNER_URL, "owner-tok"), metadata=owner, timeout=30)
        # the creator gets the URL and the scheme back, never the token or the credentials
        assert (created.id, created.url, created.authentication.scheme) == ("hook", OWNER_URL, "Bearer")
        assert not created.token and not created.authentication.credentials
        fetched = await a2a.GetTaskPushNotificationConfig(get("hook"), metadata=owner, timeout=30)
        assert fetched.url == OWNER_URL and not fetched.token and not fetched.authentication.credentials

        # a READ_ONLY share holder sees none of the owner's configs, as if there were none
        assert not (await a2a.ListTaskPushNotificationConfigs(listing(), metadata=reader, timeout=30)).configs
        await refused(a2a.GetTaskPushNotificationConfig(get("hook"), metadata=reader, timeout=30),
                      grpc.StatusCode.NOT_FOUND)
        await refused(a2a.CreateTaskPushNotificationConfig(config(task.id, "hook", BOB_URL, "carol-tok"),
                                                           metadata=reader, timeout=30),
                      grpc.StatusCode.PERMISSION_DENIED)

        # a READ_WRITE share holder can neither read, replace nor delete the owner's config
        assert not (await a2a.ListTaskPushNotificationConfigs(listing(), metadata=writer, timeout=30)).configs
        await refused(a2a.GetTaskPushNotificationConfig(get("hook"), metadata=writer, timeout=30),
                      grpc.StatusCode.NOT_FOUND)
        details = await refused(a2a.CreateTaskPushNotificationConfig(
            config(task.id, "hook", BOB_URL, "bob-tok"), metadata=writer, timeout=30), grpc.StatusCode.ALREADY_EXISTS)
        assert "owner-secret" not in details and "choose another id" in details
        await refused(a2a.DeleteTaskPushNotificationConfig(delete("hook"), metadata=writer, timeout=30),
                      grpc.StatusCode.NOT_FOUND)
        assert await stored(store, task.id) == {"hook": (OWNER_URL, "owner-tok", "alice")}

        # ... but makes configs of their own, which they alone read, replace and delete
        mine = await a2a.CreateTaskPushNotificationConfig(
            config(task.id, "bob-hook", BOB_URL, "bob-tok"), metadata=writer, timeout=30)
        assert mine.url == BOB_URL and not mine.token
        await a2a.CreateTaskPushNotificationConfig(
            config(task.id, "bob-hook", BOB_URL + "-2", "bob-tok-2"), metadata=writer, timeout=30)
        assert [(c.id, c.url, c.token) for c in (await a2a.ListTaskPushNotificationConfigs(
            listing(), metadata=writer, timeout=30)).configs] == [("bob-hook", BOB_URL + "-2", "")]
        assert [(c.id, c.url, c.token) for c in (await a2a.ListTaskPushNotificationConfigs(
            listing(), metadata=owner, timeout=30)).configs] == [("hook", OWNER_URL, "")]
        # the Session's owner does not see, take over or delete the share holder's config either
        await refused(a2a.GetTaskPushNotificationConfig(get("bob-hook"), metadata=owner, timeout=30),
                      grpc.StatusCode.NOT_FOUND)
        await refused(a2a.CreateTaskPushNotificationConfig(
            config(task.id, "bob-hook", OWNER_URL, "owner-tok"), metadata=owner, timeout=30),
            grpc.StatusCode.ALREADY_EXISTS)
        await refused(a2a.DeleteTaskPushNotificationConfig(delete("bob-hook"), metadata=owner, timeout=30),
                      grpc.StatusCode.NOT_FOUND)
        assert await stored(store, task.id) == {"hook": (OWNER_URL, "owner-tok", "alice"),
                                                "bob-hook": (BOB_URL + "-2", "bob-tok-2", "bob")}
        await a2a.DeleteTaskPushNotificationConfig(delete("bob-hook"), metadata=writer, timeout=30)
        assert await stored(store, task.id) == {"hook": (OWNER_URL, "owner-tok", "alice")}

    # the HTTP bindings answer the same: nothing of the owner's to a share holder, no token to anyone
    for transport in ("JSONRPC", "HTTP+JSON"):
        async with env.client(transport, streaming=False) as client:
            for who, expect in ((with_share(ro, "carol"), []), (with_share(rw), []), (as_user(), [("hook", "")])):
                listed = await client.list_task_push_notification_configs(
                    a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=task.id), context=who)
                assert [(c.id, c.token) for c in listed.configs] == expect, transport
            with pytest.raises(A2AError, match="choose another id"):
                await client.create_task_push_notification_config(a2a_pb2.TaskPushNotificationConfig(
                    task_id=task.id, id="hook", url=BOB_URL, token="bob-tok"), context=with_share(rw))
    assert await stored(store, task.id) == {"hook": (OWNER_URL, "owner-tok", "alice")}


async def test_a_share_holders_config_lives_as_long_as_the_share(env, store, sim):
    """Revoking the share a config was made through deletes the config (its pending deliveries end);
    after the share expired, new events queue nothing for it. The owner's config goes on."""
    await apply_agent(store, sim)
    async with env.client("GRPC", streaming=False) as client:
        events = [e async for e in client.send_message(a2a_pb2.SendMessageRequest(
            message=user_message("[input-required] Book a table")), context=as_user())]
    task = events[-1].task

    async def new_share(ttl: int) -> tuple[str, str]:
        async with grpc.aio.insecure_channel(env.grpc_address) as ch:
            r = await sessions_pb2_grpc.SessionServiceStub(ch).CreateSessionShare(
                sessions_pb2.CreateSessionShareRequest(session_id=task.context_id, ttl={"seconds": ttl},
                                                       permission=sessions_pb2.SESSION_SHARE_PERMISSION_READ_WRITE),
                metadata=metadata("alice"), timeout=10)
            return r.share.id, r.token

    bob_share, bob_token = await new_share(600)
    _, carol_token = await new_share(2)
    async with grpc.aio.insecure_channel(env.grpc_address) as channel:
        a2a = a2a_pb2_grpc.A2AServiceStub(channel)
        for md, config_id in ((metadata("alice"), "alice-hook"), (metadata("bob", bob_token), "bob-hook"),
                              (metadata("carol", carol_token), "carol-hook")):
            await a2a.CreateTaskPushNotificationConfig(
                config(task.id, config_id, f"http://127.0.0.1:9/{config_id}", "tok"), metadata=md, timeout=30)
        assert set(await stored(store, task.id)) == {"alice-hook", "bob-hook", "carol-hook"}

        # the owner revokes bob's share: bob's config goes with it, its pending deliveries end failed
        await sessions_pb2_grpc.SessionServiceStub(channel).RevokeSessionShare(
            sessions_pb2.RevokeSessionShareRequest(share_id=bob_share), metadata=metadata("alice"), timeout=10)
        assert set(await stored(store, task.id)) == {"alice-hook", "carol-hook"}
        bob = [d for d in await store.push_deliveries(task.id) if d["config_id"] == "bob-hook"]
        assert bob and all(d["state"] != "pending" for d in bob)

        # carol's share expires: the next event queues a delivery for the owner's config only
        expired: list[dict[str, Any]] = []
        for _ in range(100):
            expired = await store._rows("SELECT bool_and(expires_at < clock_timestamp()) AS gone"
                                        " FROM sessionq.session_shares WHERE expires_at < now() + interval '1 minute'")
            if expired[0]["gone"]:
                break
            await asyncio.sleep(0.1)
        assert expired[0]["gone"]
        before = {d["id"] for d in await store.push_deliveries(task.id)}
        await a2a.SendMessage(a2a_pb2.SendMessageRequest(
            tenant=TENANT, message=user_message("for two", task.context_id, task.id)), metadata=metadata("alice"),
            timeout=60)
        after = [d for d in await store.push_deliveries(task.id) if d["id"] not in before]
        assert after and {d["config_id"] for d in after} == {"alice-hook"}
