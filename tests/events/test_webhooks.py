"""Webhooks of lifecycle events: subscriptions through the API and the CLI, deliveries in order per
Session signed as Standard Webhooks say (verified with the `standardwebhooks` package, as a
receiver would), retried after failures, never redirected, never to a private target unless
configured, disabled after a run of failures; operators see the deliveries."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
import standardwebhooks
from click.testing import CliRunner
from conftest import make_settings
from lifecycle import count, ready_session
from sessionq.cli.main import main
from sessionq.jobs.events import tick

from sessionq import config
from sessionq._pb.sessionq.v1 import events_pb2, events_pb2_grpc
from sessionq.domain import push, webhooks
from sessionq.domain.operations import OperationExecutor
from sessionq.models import EventKind, OperationKind

LOOPBACK = push.TargetPolicy(allow_loopback=True)

# a subscription's job reads the events once no older transaction runs on the server (schema/45_events.sql)
pytestmark = pytest.mark.quiet_horizon


@pytest.fixture
def settings() -> config.Settings:
    return make_settings(**{"webhooks.allowLoopback": True})


@dataclass
class Receiver:
    """A local HTTP receiver: answers each request with the next status of `script` (then 204)."""

    script: list[int] = field(default_factory=list)
    requests: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)  # (answered status, headers, body)
    port: int = 0
    location: str = ""
    keep_alive: bool = False  # answer more than one request on a connection
    connections: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return  # the client closed a kept connection
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip()
                           for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status = self.script.pop(0) if self.script else 204
                self.requests.append((status, headers, body))
                extra = f"Location: {self.location}\r\n" if status in (301, 302, 307, 308) else ""
                extra += "" if self.keep_alive else "Connection: close\r\n"
                writer.write(f"HTTP/1.1 {status} X\r\n{extra}Content-Length: 0\r\n\r\n".encode())
                await writer.drain()
                if not self.keep_alive:
                    return
        finally:
            writer.close()

    def delivered(self) -> list[dict[str, Any]]:
        return [json.loads(body) for status, _, body in self.requests if 200 <= status < 300]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    server = await asyncio.start_server(r.handle, "127.0.0.1", 0)
    r.port = server.sockets[0].getsockname()[1]
    async with server:
        yield r


async def drain(store: Any, subscription: uuid.UUID, **options: Any) -> int:
    """Run the deliver_webhooks job's work as procrastinate would, retrying at once after a failure."""
    delivered = 0
    for _ in range(50):
        try:
            return delivered + await webhooks.deliver_subscription(store, subscription, policy=LOOPBACK, timeout=5,
                                                                   **options)
        except webhooks.WebhookFailed:
            continue
    raise AssertionError("the deliveries never finished")


async def settled(store: Any) -> None:
    """Wait until every event is behind the horizon (written by a transaction older than every one
    running on the server: another test's database being cloned holds it back for a moment)."""
    for _ in range(400):
        if await count(store, "SELECT count(*) FROM sessionq.lifecycle_events e"
                              " WHERE e.xid >= pg_snapshot_xmin(pg_current_snapshot())") == 0:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("a transaction kept the horizon back for 10 s")


async def operate(store: Any, sim: Any, session_id: uuid.UUID, kind: OperationKind) -> None:
    await store.admit_operation(session_id, "alice", None, kind)
    assert (await OperationExecutor(store, sim, 30).run(session_id)).status == "completed"


async def test_a_receiver_that_fails_twice_gets_each_event_once_in_order_signed(store, sim, receiver):
    secret = webhooks.new_secret()
    hook = await store.create_webhook("alice", False, receiver.url, [], None, secret)
    s = await ready_session(store, sim)
    await operate(store, sim, s.id, OperationKind.SUSPEND)
    await operate(store, sim, s.id, OperationKind.RESUME)
    receiver.script = [500, 503]
    assert await drain(store, hook.id) == 4
    got = receiver.delivered()
    assert [m["type"] for m in got] == ["created", "ready", "suspended", "resumed"]
    assert len(receiver.requests) == 6
    verifier = standardwebhooks.Webhook(secret)
    ids = []
    for status, headers, body in receiver.requests:
        assert verifier.verify(body, headers)["data"]["session_id"] == str(s.id)
        ids.append((status, headers["webhook-id"]))
    # the failed attempts were the first event's, with the same id as its delivery
    assert ids[0][1] == ids[1][1] == ids[2][1] and [st for st, _ in ids[:3]] == [500, 503, 204]
    assert len({i for _, i in ids}) == 4
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(webhooks.new_secret()).verify(receiver.requests[-1][2], receiver.requests[-1][1])
    # operators see each delivery, its attempts and its outcome
    async with store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT event_type, state, attempts, last_status FROM sessionq.webhook_delivery_log"
            " WHERE subscription_id = %s ORDER BY id", (hook.id,))).fetchall()
    assert [tuple(r.values()) for r in rows] == [("created", "delivered", 3, 204), ("ready", "delivered", 1, 204),
                                                 ("suspended", "delivered", 1, 204), ("resumed", "delivered", 1, 204)]
    assert await drain(store, hook.id) == 0  # nothing twice


async def test_concurrent_jobs_deliver_every_event_once_and_each_sessions_in_order(store, sim, receiver):
    """Racing deliver_webhooks jobs on real connections, claiming small batches: one at a time holds
    the subscription's lease, the others leave it to that one; every event of every Session is
    POSTed exactly once, and each Session's in order."""
    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    sessions = [await ready_session(store, sim, f"race{i}") for i in range(8)]
    for s in sessions:
        await operate(store, sim, s.id, OperationKind.SUSPEND)
        await operate(store, sim, s.id, OperationKind.RESUME)

    async def job() -> None:
        for _ in range(200):  # a job that met a stream another one holds is retried, as procrastinate would
            try:
                await webhooks.deliver_subscription(store, hook.id, policy=LOOPBACK, timeout=5, batch=5, streams=3)
                return
            except webhooks.WebhookFailed:
                await asyncio.sleep(0.01)
        raise AssertionError("the deliveries never finished")

    await asyncio.gather(*(job() for _ in range(6)))
    got = receiver.delivered()
    ids = [headers["webhook-id"] for _, headers, _ in receiver.requests]
    assert len(ids) == len(set(ids)) == 32  # each once
    for s in sessions:
        assert [m["type"] for m in got if m["data"]["session_id"] == str(s.id)] == [
            "created", "ready", "suspended", "resumed"]
    assert await drain(store, hook.id) == 0


async def test_a_job_keeps_its_connections_to_the_subscription_url(store, sim, receiver):
    """A deliver_webhooks job POSTs to one URL only: a receiver that keeps connections gets the
    job's deliveries over at most one connection per Session delivered at a time."""
    receiver.keep_alive = True
    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    for i in range(2):
        await ready_session(store, sim, f"kept{i}")
    assert await drain(store, hook.id, streams=1) == 4
    assert len(receiver.requests) == 4 and receiver.connections == 1


async def test_a_redirect_is_not_followed(store, sim, receiver):
    receiver.script = [302]
    receiver.location = f"http://127.0.0.1:{receiver.port}/elsewhere"
    hook = await store.create_webhook("alice", False, receiver.url, [EventKind.CREATED], None, webhooks.new_secret())
    await ready_session(store, sim)
    assert await drain(store, hook.id, max_attempts=1) == 0
    assert len(receiver.requests) == 1  # the Location was never asked for
    async with store.pool.connection() as conn:
        row = await (await conn.execute("SELECT state, last_status FROM sessionq.webhook_delivery_log"
                                        " WHERE subscription_id = %s", (hook.id,))).fetchone()
    assert row == {"state": "failed", "last_status": 302}


async def test_a_private_target_is_refused_at_delivery_unless_configured(store, sim, receiver):
    hook = await store.create_webhook("alice", False, receiver.url, [EventKind.CREATED], None, webhooks.new_secret())
    await ready_session(store, sim)
    with pytest.raises(webhooks.WebhookFailed):
        await webhooks.deliver_subscription(store, hook.id, policy=push.TargetPolicy(), timeout=5)
    assert receiver.requests == []
    assert await drain(store, hook.id) == 1  # loopback allowed (`sessionq up`)
    for url in ("http://10.1.2.3/hook", "http://192.168.0.1/", "http://169.254.169.254/latest", "http://[::1]:9/"):
        with pytest.raises(Exception) as e:
            await webhooks.check_url(url, push.TargetPolicy(allow_loopback=url.startswith("http://[::1]") is False))
        assert getattr(e.value, "code", None) is not None and e.value.code.name == "INVALID_ARGUMENT"
    await webhooks.check_url("http://[::1]:9/", LOOPBACK)


async def test_a_run_of_failures_disables_the_subscription(store, sim, receiver):
    receiver.script = [500] * 100
    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    s = await ready_session(store, sim)
    assert await drain(store, hook.id, disable_after=3, max_attempts=10) == 0
    assert len(receiver.requests) == 3
    (listed,) = await store.list_webhooks("alice", False, None, 10)
    assert not listed.enabled and listed.consecutive_failures == 3 and listed.last_failure == "HTTP 500"
    assert await count(store, "SELECT count(*) FROM sessionq.webhook_delivery_log WHERE state = 'pending'") == 0
    await operate(store, sim, s.id, OperationKind.SUSPEND)  # a disabled subscription gets nothing new
    assert await count(store, "SELECT count(*) FROM sessionq.webhook_delivery_log WHERE subscription_id = %s",
                       hook.id) == 2


async def test_filters_by_owner_agent_and_type_and_deliveries_roll_back_with_their_transition(store, sim,
                                                                                           database_url):
    import psycopg

    mine = await store.create_webhook("alice", False, "http://127.0.0.1:9/a", [EventKind.READY], None,
                                      webhooks.new_secret())
    other_agent = await store.create_webhook("alice", False, "http://127.0.0.1:9/b", [], ("kagent", "other"),
                                             webhooks.new_secret())
    everything = await store.create_webhook("root", True, "http://127.0.0.1:9/c", [], None, webhooks.new_secret())
    bob = await store.create_webhook("bob", False, "http://127.0.0.1:9/d", [], None, webhooks.new_secret())
    s = await ready_session(store, sim)

    async def deliveries(hook: Any) -> int:
        return await count(store, "SELECT count(*) FROM sessionq.webhook_delivery_log WHERE subscription_id = %s",
                           hook.id)

    assert (await deliveries(mine), await deliveries(other_agent), await deliveries(everything),
            await deliveries(bob)) == (1, 0, 2, 0)
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT * FROM sessionq.admit_operation(%s, 'alice', NULL, 'DELETE', 'user_requested', 'session')",
                     (s.id,))
        conn.rollback()
    assert await deliveries(everything) == 2


def stub(api: Any) -> events_pb2_grpc.WebhookServiceStub:
    return events_pb2_grpc.WebhookServiceStub(api.channel)


async def test_the_api_shows_the_secret_once_and_refuses_bad_input(api, store, sim, receiver):
    s = stub(api)
    created = await s.CreateWebhook(events_pb2.CreateWebhookRequest(
        url=receiver.url, event_types=[events_pb2.EVENT_KIND_CREATED, events_pb2.EVENT_KIND_READY],
        agent_namespace="kagent", agent_name="my-first-agent"), metadata=api.md(), timeout=10)
    assert created.secret.startswith("whsec_") and created.webhook.enabled
    assert list(created.webhook.event_types) == [events_pb2.EVENT_KIND_CREATED, events_pb2.EVENT_KIND_READY]
    listed = await s.ListWebhooks(events_pb2.ListWebhooksRequest(), metadata=api.md(), timeout=10)
    assert [w.id for w in listed.webhooks] == [created.webhook.id]
    assert created.secret.removeprefix("whsec_") not in str(listed)
    assert list((await s.ListWebhooks(events_pb2.ListWebhooksRequest(), metadata=api.md("bob"), timeout=10)).webhooks) == []
    bad = [
        (events_pb2.CreateWebhookRequest(url="ftp://127.0.0.1/x"), grpc.StatusCode.INVALID_ARGUMENT),
        (events_pb2.CreateWebhookRequest(url="javascript:alert(1)"), grpc.StatusCode.INVALID_ARGUMENT),
        (events_pb2.CreateWebhookRequest(url="not a url"), grpc.StatusCode.INVALID_ARGUMENT),
        (events_pb2.CreateWebhookRequest(url="http://127.0.0.1/" + "x" * 3000), grpc.StatusCode.INVALID_ARGUMENT),
        (events_pb2.CreateWebhookRequest(url="http://10.0.0.1/x"), grpc.StatusCode.INVALID_ARGUMENT),
        (events_pb2.CreateWebhookRequest(url=receiver.url, event_types=[99]), grpc.StatusCode.INVALID_ARGUMENT),
        (events_pb2.CreateWebhookRequest(url=receiver.url, event_types=[1] * 14), grpc.StatusCode.INVALID_ARGUMENT),
        (events_pb2.CreateWebhookRequest(url=receiver.url, agent_namespace="kagent"), grpc.StatusCode.INVALID_ARGUMENT),
        (events_pb2.CreateWebhookRequest(url=receiver.url, agent_namespace="k" * 300, agent_name="a"),
         grpc.StatusCode.INVALID_ARGUMENT),
        (events_pb2.CreateWebhookRequest(url=receiver.url, **{"global": True}), grpc.StatusCode.PERMISSION_DENIED),
    ]
    for request, code in bad:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await s.CreateWebhook(request, metadata=api.md(), timeout=10)
        assert e.value.code() == code, (request, e.value.details())
        assert len(e.value.details()) < 300
    assert await count(store, "SELECT count(*) FROM sessionq.webhook_subscriptions") == 1  # nothing written
    glob = await s.CreateWebhook(events_pb2.CreateWebhookRequest(url=receiver.url, **{"global": True}),
                                 metadata=api.md("admin"), timeout=10)
    assert getattr(glob.webhook, "global")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await s.DeleteWebhook(events_pb2.DeleteWebhookRequest(id=glob.webhook.id), metadata=api.md(), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    await s.DeleteWebhook(events_pb2.DeleteWebhookRequest(id=created.webhook.id), metadata=api.md(), timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await s.DeleteWebhook(events_pb2.DeleteWebhookRequest(id="nope"), metadata=api.md(), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_the_worker_delivers_a_created_session(api, store, sim, receiver):
    """End to end: a subscription through the API, a Session through the API; the worker's
    deliver_webhooks job POSTs its events, verified as a receiver would."""
    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

    created = await stub(api).CreateWebhook(events_pb2.CreateWebhookRequest(url=receiver.url), metadata=api.md(),
                                            timeout=10)
    await ready_session(store, sim, "warm")  # the Agent, prepared
    session = (await sessions_pb2_grpc.SessionServiceStub(api.channel).CreateSession(
        sessions_pb2.CreateSessionRequest(request_id="r1", agent=common_pb2.ResourceReference(
            namespace="kagent", name="my-first-agent")), metadata=api.md(), timeout=20)).session
    verifier = standardwebhooks.Webhook(created.secret)
    for _ in range(200):
        mine = [m for m in receiver.delivered() if m["data"]["session_id"] == session.id]
        if len(mine) == 2:
            break
        await asyncio.sleep(0.05)
    assert [m["type"] for m in mine] == ["created", "ready"]
    for _, headers, body in receiver.requests:
        verifier.verify(body, headers)


async def test_the_cli_creates_lists_and_deletes(api, receiver):
    async def cli(*args: str) -> Any:
        return await asyncio.to_thread(CliRunner().invoke, main,
                                       ["--server", api.address, "--token", "alice-token", *args])

    made = await cli("webhooks", "create", "--url", receiver.url, "--event", "created", "--event", "deleted",
                     "-o", "json")
    assert made.exit_code == 0, made.output
    body = json.loads(made.output)
    assert body["secret"].startswith("whsec_") and body["webhook"]["eventTypes"] == ["EVENT_KIND_CREATED",
                                                                                        "EVENT_KIND_DELETED"]
    listed = await cli("webhooks", "list", "-o", "json")
    assert json.loads(listed.output)["webhooks"][0]["id"] == body["webhook"]["id"]
    assert body["secret"] not in listed.output
    table = await cli("webhooks", "list")
    assert "created,deleted" in table.output and body["secret"] not in table.output
    bad = await cli("webhooks", "create", "--url", "ftp://x/")
    assert bad.exit_code != 0 and "http" in bad.output and "Traceback" not in bad.output
    bad = await cli("webhooks", "create", "--url", receiver.url, "--event", "bogus")
    assert bad.exit_code != 0
    gone = await cli("webhooks", "delete", body["webhook"]["id"])
    assert gone.exit_code == 0 and "Deleted" in gone.output
    assert "No webhooks." in (await cli("webhooks", "list")).output


def test_sessionq_up_allows_loopback_webhooks_and_serve_does_not():
    from sessionq.app.up import _local_settings

    assert config.defaults().webhooks.allow_loopback is False
    assert config.defaults().webhooks.allow_private_targets is False
    assert _local_settings(config.defaults(), "me").webhooks.allow_loopback is True


async def test_operators_read_the_deliveries_with_the_cli(store, sim, receiver, database_url):
    """`sessionq webhooks deliveries` (an operator command on the database): each delivery's state,
    attempts and last status, newest first, paged; never the URL or the secret; bad input is one
    usage line."""
    secret = webhooks.new_secret()
    hook = await store.create_webhook("alice", False, receiver.url, [], None, secret)
    receiver.script = [500]
    s = await ready_session(store, sim)
    with pytest.raises(webhooks.WebhookFailed):
        await webhooks.deliver_subscription(store, hook.id, policy=LOOPBACK, timeout=5)

    async def cli(*args: str) -> Any:
        return await asyncio.to_thread(CliRunner().invoke, main,
                                       ["webhooks", "deliveries", "--database-url", database_url, *args])

    listed = await cli("-o", "json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)["deliveries"]
    assert [(r["event_type"], r["state"], r["attempts"], r["last_status"]) for r in rows] == [
        ("ready", "pending", 0, None), ("created", "pending", 1, 500)]
    assert all(r["subscription_id"] == str(hook.id) and r["session_id"] == str(s.id) for r in rows)
    assert receiver.url not in listed.output and secret not in listed.output
    table = await cli("--subscription", str(hook.id))
    assert table.exit_code == 0 and "pending" in table.output and "500" in table.output
    first = await cli("--limit", "1", "-o", "json")
    page = json.loads(first.output)
    assert len(page["deliveries"]) == 1 and page["next_page_token"]
    second = json.loads((await cli("--limit", "1", "--page-token", page["next_page_token"], "-o", "json")).output)
    assert [r["event_type"] for r in second["deliveries"]] == ["created"] and second["next_page_token"] == ""
    none = await cli("--state", "failed")
    assert none.exit_code == 0 and "No webhook deliveries." in none.output
    bad = await cli("--page-token", "x" * 5000)
    assert bad.exit_code == 2 and len(bad.output) < 300 and "Traceback" not in bad.output
    bad = await cli("--page-token", f"{2**63}.{hook.id}")  # past a bigint: refused before the database
    assert bad.exit_code == 2 and "page-token" in bad.output
    bad = await cli("--subscription", "not-a-uuid")
    assert bad.exit_code == 2 and "Traceback" not in bad.output


async def test_a_transition_writes_no_delivery_and_the_cursor_passes_what_went_out(store, sim, receiver):
    """A transition writes its event only: the subscription's job reads it past the cursor, and an
    event delivered at its first attempt never gets a row (operators still see it delivered)."""
    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    s = await ready_session(store, sim)
    await operate(store, sim, s.id, OperationKind.SUSPEND)
    assert await count(store, "SELECT count(*) FROM sessionq.webhook_deliveries") == 0
    assert await count(store, "SELECT count(*) FROM sessionq.webhook_delivery_log WHERE state = 'pending'") == 3
    assert await drain(store, hook.id) == 3
    assert [m["type"] for m in receiver.delivered()] == ["created", "ready", "suspended"]
    assert await count(store, "SELECT count(*) FROM sessionq.webhook_deliveries") == 0
    async with store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT event_type, state, attempts FROM sessionq.webhook_delivery_log WHERE subscription_id = %s"
            " ORDER BY id", (hook.id,))).fetchall()
        cursor = await (await conn.execute(
            "SELECT (w.cursor_xid, w.cursor_seq) = (e.xid, e.seq) AS at_last FROM sessionq.webhook_subscriptions w,"
            " sessionq.lifecycle_events e WHERE w.id = %s ORDER BY e.xid DESC, e.seq DESC LIMIT 1",
            (hook.id,))).fetchone()
    assert [tuple(r.values()) for r in rows] == [("created", "delivered", 1), ("ready", "delivered", 1),
                                                 ("suspended", "delivered", 1)]
    assert cursor == {"at_last": True}


async def test_a_job_waits_for_a_transition_that_saw_it_waiting(store, sim, receiver, database_url):
    """A transition that found the subscription's job waiting defers none: the job must not end
    before that transition has committed, or its event would wait for the next one. Here the
    transition is still open when the job starts, and commits 0.5 s later."""
    import psycopg

    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    s = await ready_session(store, sim)
    assert await drain(store, hook.id) == 2
    conn = await psycopg.AsyncConnection.connect(database_url)
    try:
        await conn.execute("SELECT * FROM sessionq.admit_operation(%s, 'alice', NULL, 'DELETE', 'user_requested',"
                           " 'session')", (s.id,))
        job = asyncio.create_task(webhooks.deliver_subscription(store, hook.id, policy=LOOPBACK, timeout=5))
        await asyncio.sleep(0.5)
        assert not job.done()  # waiting for the open transition, not finished without its event
        await conn.commit()
        assert await asyncio.wait_for(job, 10) == 1
    finally:
        await conn.close()
    assert [m["type"] for m in receiver.delivered()] == ["created", "ready", "deleting"]


async def test_a_second_executor_leaves_the_subscription_to_the_lease_holder_and_runs_after_it(store, sim,
                                                                                             receiver):
    """One executor at a time holds a subscription (each Session's events go out in order). A job
    that finds the lease taken defers a job for the lease's end and stops; the holder's release
    makes that job due at once, so nothing waits for the lease to lapse."""
    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    await ready_session(store, sim)
    first, second = uuid.uuid4(), uuid.uuid4()
    await settled(store)
    claimed = await store.claim_webhook_round(hook.id, first, 60, 10, None)
    assert claimed is not None and len(claimed["events"]) == 2
    due = ("SELECT extract(epoch FROM scheduled_at - clock_timestamp()) AS wait FROM procrastinate_jobs"
           " WHERE queueing_lock = %s AND status = 'todo'")
    lock = f"webhook:{hook.id}"
    async with store.pool.connection() as conn:
        # the job the transitions deferred is the first executor's: no worker runs here, so it goes
        await conn.execute("DELETE FROM procrastinate_jobs WHERE queueing_lock = %s", (lock,))
        assert await store.claim_webhook_round(hook.id, second, 60, 10, None) == {"busy": True}
        (waiting,) = await (await conn.execute(due, (lock,))).fetchall()
        assert 50 < waiting["wait"] <= 60  # at the lease's end, should its holder die
        outcomes = [{"seq": e["seq"], "xid": e["xid"], "session_id": e["session_id"], "attempted": True, "ok": True}
                    for e in claimed["events"]]
        assert await store.record_webhook_round(hook.id, first, claimed["cursor"], outcomes, 0, True) == "recorded"
        (waiting,) = await (await conn.execute(due, (lock,))).fetchall()
        assert waiting["wait"] is None  # due now (no schedule): the holder let go
    assert await drain(store, hook.id) == 0  # recorded as delivered: nothing twice


async def test_a_failing_session_holds_back_its_own_events_only_and_in_order(store, sim, receiver):
    """A failed attempt holds its Session's later events back (they become held deliveries, new
    ones included, even when a round claims only part of what is held); other Sessions' go on."""
    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    one = await ready_session(store, sim, "one")
    two = await ready_session(store, sim, "two")
    receiver.script = [500]
    await settled(store)  # one round takes both Sessions' events
    with pytest.raises(webhooks.WebhookFailed):
        await webhooks.deliver_subscription(store, hook.id, policy=LOOPBACK, timeout=5, streams=1)
    got = receiver.delivered()
    assert [m["type"] for m in got if m["data"]["session_id"] == str(two.id)] == ["created", "ready"]
    assert [m for m in got if m["data"]["session_id"] == str(one.id)] == []
    await operate(store, sim, one.id, OperationKind.SUSPEND)  # a new event behind the held ones
    await settled(store)  # so that the first round claims it, with the first held delivery only
    assert await drain(store, hook.id, batch=1) == 3  # one held delivery a round: the rest wait in order
    assert [m["type"] for m in receiver.delivered() if m["data"]["session_id"] == str(one.id)] == [
        "created", "ready", "suspended"]
    async with store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT session_id, event_type, state, attempts, last_status FROM sessionq.webhook_delivery_log"
            " WHERE subscription_id = %s ORDER BY id", (hook.id,))).fetchall()
    assert [(r["session_id"] == one.id, r["event_type"], r["state"], r["attempts"], r["last_status"]) for r in rows] == [
        (True, "created", "delivered", 2, 204), (True, "ready", "delivered", 1, 204),
        (False, "created", "delivered", 1, None), (False, "ready", "delivered", 1, None),
        (True, "suspended", "delivered", 1, 204)]


async def test_jobs_racing_transitions_deliver_every_event_once_in_order(store, sim, receiver):
    """Transitions commit on real connections while four jobs race to deliver (each a loop of
    deliver_webhooks runs, as workers would start them): every event is POSTed exactly once, each
    Session's in order, and the last runs, started after the last commit, leave nothing behind."""
    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    sessions = [await ready_session(store, sim, f"busy{i}") for i in range(6)]
    done = asyncio.Event()

    async def transitions(s: Any) -> None:
        for _ in range(3):
            await operate(store, sim, s.id, OperationKind.SUSPEND)
            await operate(store, sim, s.id, OperationKind.RESUME)

    async def job() -> None:
        while not done.is_set():
            try:
                await webhooks.deliver_subscription(store, hook.id, policy=LOOPBACK, timeout=5, batch=4, streams=2,
                                                    linger=0.01)
            except webhooks.WebhookFailed:
                pass
            await asyncio.sleep(0.005)

    jobs = [asyncio.create_task(job()) for _ in range(4)]
    await asyncio.gather(*(transitions(s) for s in sessions))
    done.set()
    await asyncio.gather(*jobs)
    await settled(store)
    await drain(store, hook.id)
    ids = [headers["webhook-id"] for _, headers, _ in receiver.requests]
    assert len(ids) == len(set(ids)) == 6 * 8  # created, ready, then three suspensions and resumptions
    got = receiver.delivered()
    for s in sessions:
        assert [m["type"] for m in got if m["data"]["session_id"] == str(s.id)] == [
            "created", "ready", *["suspended", "resumed"] * 3]
    assert await count(store, "SELECT count(*) FROM sessionq.webhook_delivery_log WHERE state <> 'delivered'") == 0


async def test_a_transaction_of_several_transitions_and_a_transition_it_waits_for_do_not_deadlock(
        store, sim, receiver, database_url):
    """A transaction that makes several transitions (a bulk action's page, a batch of suspensions)
    takes its Sessions' rows one after another; a transition on one of them that it waits for must
    not wait for it in turn. Their subscription's job is deferred when each commits, once every row
    is held, so neither waits on the other's job while holding a row the other needs."""
    import psycopg

    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    a = await ready_session(store, sim, "a")
    b = await ready_session(store, sim, "b")
    delete = "SELECT outcome FROM sessionq.admit_operation(%s, 'alice', NULL, 'DELETE', 'user_requested', 'session')"
    async with await psycopg.AsyncConnection.connect(database_url) as page, \
            await psycopg.AsyncConnection.connect(database_url) as single:
        async with store.pool.connection() as conn:  # no job waits: each transaction defers its own
            await conn.execute("DELETE FROM procrastinate_jobs WHERE queueing_lock = %s", (f"webhook:{hook.id}",))
        page_pid = page.info.backend_pid

        async def bulk_page() -> None:
            async with page.transaction():
                await page.execute(delete, (a.id,))
                await page.execute(delete, (b.id,))  # waits for the single transition's row

        async with single.transaction():
            await single.execute("SELECT 1 FROM sessionq.sessions WHERE id = %s FOR UPDATE", (b.id,))
            running = asyncio.create_task(bulk_page())
            for _ in range(200):  # until the page waits for b's row
                if await count(store, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
                                      " AND wait_event_type = 'Lock'", page_pid):
                    break
                await asyncio.sleep(0.025)
            else:
                raise AssertionError("the page never reached b")
            await single.execute(delete, (b.id,))
        await asyncio.wait_for(running, 10)
    assert await count(store, "SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock = %s AND status = 'todo'",
                       f"webhook:{hook.id}") == 1
    await settled(store)
    assert await drain(store, hook.id) == 6
    assert sorted(m["type"] for m in receiver.delivered()) == ["created"] * 2 + ["deleting"] * 2 + ["ready"] * 2


async def _deferring(conn: Any, session_id: uuid.UUID) -> None:
    """In conn's open transaction: a transition of the Session, and its deferred triggers run now
    (as at its commit), so the transaction holds the deferral of its subscription's job, uncommitted."""
    await conn.execute("SELECT * FROM sessionq.admit_operation(%s, 'alice', NULL, 'DELETE', 'user_requested',"
                       " 'session')", (session_id,))
    await conn.execute("SET CONSTRAINTS ALL IMMEDIATE")


async def test_a_transition_does_not_queue_behind_another_transactions_deferral_of_the_job(
        store, sim, receiver, database_url):
    """One subscription is every Session's: the transitions committing while its job is being
    deferred must not wait for that deferral's insert (the queueing lock's unique index). They defer
    nothing, and the deferred job delivers their events too."""
    import psycopg

    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    sessions = [await ready_session(store, sim, name) for name in ("a", "b", "c", "d")]
    lock = f"webhook:{hook.id}"
    async with store.pool.connection() as conn:  # no job waits: the next committing transition defers it
        await conn.execute("DELETE FROM procrastinate_jobs WHERE queueing_lock = %s", (lock,))
    async with await psycopg.AsyncConnection.connect(database_url) as first:
        async with first.transaction():
            await _deferring(first, sessions[0].id)
            # a transition queued behind the first one's deferral is cancelled rather than left waiting
            others = [psycopg.AsyncConnection.connect(database_url, options="-c statement_timeout=5000")
                      for _ in sessions[1:]]
            conns = await asyncio.gather(*others)
            try:

                async def transition(conn: Any, session_id: uuid.UUID) -> None:
                    async with conn.transaction():
                        await _deferring(conn, session_id)

                await asyncio.gather(*(transition(c, s.id) for c, s in zip(conns, sessions[1:], strict=True)))
            finally:
                for c in conns:
                    await c.close()
            assert await count(store, "SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock = %s", lock) == 0
    assert await count(store, "SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock = %s AND status = 'todo'",
                       lock) == 1
    await settled(store)
    assert await drain(store, hook.id) == 12
    assert sorted(m["type"] for m in receiver.delivered()) == ["created"] * 4 + ["deleting"] * 4 + ["ready"] * 4


async def test_events_left_to_a_deferral_that_rolled_back_get_their_job_from_the_periodic_tick(
        store, sim, receiver, database_url):
    """A transition that found another transaction deferring the job deferred none; when that one
    rolls back, no job covers the event until the periodic wake_webhook_jobs defers one (once)."""
    import psycopg

    hook = await store.create_webhook("alice", False, receiver.url, [], None, webhooks.new_secret())
    a = await ready_session(store, sim, "a")
    b = await ready_session(store, sim, "b")
    assert await drain(store, hook.id) == 4
    lock = f"webhook:{hook.id}"
    async with store.pool.connection() as conn:
        await conn.execute("DELETE FROM procrastinate_jobs WHERE queueing_lock = %s", (lock,))
    assert await store.wake_webhook_jobs() == 0  # everything delivered: nothing to wake
    async with await psycopg.AsyncConnection.connect(database_url) as first, \
            await psycopg.AsyncConnection.connect(database_url, options="-c statement_timeout=5000") as second:
        async with first.transaction(force_rollback=True):
            await _deferring(first, a.id)
            async with second.transaction():
                await _deferring(second, b.id)
    jobs = "SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock = %s AND status = 'todo'"
    assert await count(store, jobs, lock) == 0  # b's event waits for a job
    await settled(store)
    assert await tick(store, 3600, 300, 7 * 86400) == (0, 0, 1)  # the periodic task's work
    assert await store.wake_webhook_jobs() == 0  # its job waits now
    assert await count(store, jobs, lock) == 1
    assert await drain(store, hook.id) == 1
    assert [m["type"] for m in receiver.delivered()][-1] == "deleting"
    assert [m["data"]["session_id"] for m in receiver.delivered()][-1] == str(b.id)
