"""Push notifications: delivered by the deliver_push job, in order, with the config's token and
authentication, retried while the receiver fails, recorded for operators; private targets refused."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2
from a2a.utils.errors import InvalidParamsError
from click.testing import CliRunner
from conftest import apply_agent
from harness import a2a_env, a2a_settings, as_user, env, settings_for_a2a, user_message  # noqa: F401 - fixtures
from sessionq.cli.main import main

from sessionq import config
from sessionq.console.server import ConsoleServer

pytestmark = pytest.mark.timeout(180)


class Receiver:
    """A local HTTP receiver that fails its first `failures` requests with 503."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []  # every request, failed ones too
        self.accepted: list[dict[str, Any]] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))))
        self.requests.append((headers, body))
        if len(self.requests) <= self.failures:
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        else:
            self.accepted.append(body)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()


def state_of(body: dict[str, Any]) -> str:
    if "task" in body:
        return str(body["task"]["status"]["state"])
    return str(body["statusUpdate"]["status"]["state"])


async def test_push_delivery_retries_a_failing_receiver_and_keeps_order(env, store, sim):
    await apply_agent(store, sim)
    receiver = Receiver(failures=2)
    await receiver.start()
    try:
        async with env.client("GRPC", streaming=False) as client:
            push = a2a_pb2.TaskPushNotificationConfig(
                id="hook", url=f"http://127.0.0.1:{receiver.port}/hook", token="tok-1",
                authentication=a2a_pb2.AuthenticationInfo(scheme="Bearer", credentials="receiver-secret"),
            )
            request = a2a_pb2.SendMessageRequest(message=user_message("[slow:0.5] What is 4+4?"))
            request.configuration.task_push_notification_config.CopyFrom(push)
            events = [e async for e in client.send_message(request, context=as_user())]
            task = events[-1].task
            assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED  # the turn never waited for delivery
        for _ in range(300):
            deliveries = await store.push_deliveries(task.id)
            if deliveries and all(d["state"] == "delivered" for d in deliveries):
                break
            await asyncio.sleep(0.1)
        deliveries = await store.push_deliveries(task.id)
        assert deliveries and all(d["state"] == "delivered" for d in deliveries)
        # recorded for operators: the first one took three attempts (503, 503, 200)
        assert deliveries[0]["attempts"] == 3 and deliveries[0]["last_status"] == 200
        # delivered once each, in event order, ending with the final state
        assert len(receiver.accepted) == len(deliveries)
        assert [state_of(b) for b in receiver.accepted][-1] == "TASK_STATE_COMPLETED"
        assert len(deliveries) >= 2  # the task as it stood when the config was attached, then the final state
        assert state_of(receiver.accepted[0]) == "TASK_STATE_WORKING"
        assert [d["event_seq"] for d in deliveries] == sorted(d["event_seq"] for d in deliveries)
        headers = receiver.requests[-1][0]
        assert headers["x-a2a-notification-token"] == "tok-1"
        assert headers["authorization"] == "Bearer receiver-secret"
    finally:
        await receiver.stop()


async def test_private_push_targets_are_refused(database_url, store, sim):
    settings = settings_for_a2a(**{"a2a.push.allowPrivateTargets": False})
    await apply_agent(store, sim)
    async with a2a_env(settings, database_url, store, sim) as e:
        for transport in ("GRPC", "JSONRPC"):
            async with e.client(transport, streaming=False) as client:
                for url in ("http://127.0.0.1:9/hook", "http://10.1.2.3/hook", "http://[::1]/x", "ftp://example.com/",
                            "http://[::127.0.0.1]/x", "http://[64:ff9b::7f00:1]/x", "http://[2002:7f00:1::]/x"):
                    request = a2a_pb2.SendMessageRequest(message=user_message("What is 1+1?"))
                    request.configuration.task_push_notification_config.url = url
                    with pytest.raises((InvalidParamsError, A2AClientError)):
                        async for _ in client.send_message(request, context=as_user()):
                            pass
        # nothing was written: no Session, no task, no config
        assert (await store._rows("SELECT count(*) AS n FROM sessionq.sessions"))[0]["n"] == 0
        assert (await store._rows("SELECT count(*) AS n FROM sessionq.push_configs"))[0]["n"] == 0


async def test_a_failed_delivery_names_its_config_not_its_url(env, store, sim, database_url):
    """The deliver_push job's error (what operators read in the console, the CLI and the worker's log)
    names the config by its id: the webhook URL, often with a secret path, is its creator's alone."""
    await apply_agent(store, sim)
    receiver = Receiver(failures=1000)
    await receiver.start()
    secret = "hooks/secret-path-5d1e"
    try:
        async with env.client("GRPC", streaming=False) as client:
            request = a2a_pb2.SendMessageRequest(message=user_message("What is 2+2?"))
            request.configuration.task_push_notification_config.CopyFrom(a2a_pb2.TaskPushNotificationConfig(
                id="failing-hook", url=f"http://127.0.0.1:{receiver.port}/{secret}", token="tok-secret"))
            task = [e async for e in client.send_message(request, context=as_user())][-1].task
        attempts: list[dict[str, Any]] = []
        for _ in range(600):
            attempts = await store._rows(
                "SELECT job_id, error_type, error_message, traceback FROM sessionq.job_attempts"
                " WHERE task_name = 'deliver_push' AND outcome <> 'succeeded'"
                "   AND error_message NOT LIKE %s", ("the push stream of task % is being delivered by another job%",))
            if attempts:
                break
            await asyncio.sleep(0.1)
        assert attempts, "no failed delivery attempt was recorded"
        failure = attempts[0]
        assert failure["error_type"].endswith("PushFailed")
        assert "failing-hook" in failure["error_message"] and task.id in failure["error_message"]
        assert "HTTP 503" in failure["error_message"]
        for text in (failure["error_message"], failure["traceback"]):
            assert secret not in text and "tok-secret" not in text
        # what an admin reads in the console: the config's id, not its URL
        console = ConsoleServer(config.defaults(), store.pool, local_user="operator")
        await console.start("127.0.0.1:0")
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{console.port}") as http:
                for path in ("/jobs?task=deliver_push", f"/jobs/{failure['job_id']}", "/"):
                    page = await http.get(path)
                    assert page.status_code == 200, path
                    assert secret not in page.text and "tok-secret" not in page.text, path
                assert "failing-hook" in (await http.get(f"/jobs/{failure['job_id']}")).text
        finally:
            await console.stop()
        # ... and in the CLI
        for args in (["jobs", "list", "--task", "deliver_push"], ["jobs", "show", str(failure["job_id"])]):
            shown = await asyncio.to_thread(CliRunner().invoke, main, [*args, "--database-url", database_url])
            assert shown.exit_code == 0, shown.output
            assert secret not in shown.output and "tok-secret" not in shown.output
        assert "failing-hook" in shown.output
    finally:
        await receiver.stop()
