"""Receivers that misbehave cannot hold a worker: a delivery ends at its deadline (a2a.push.timeout,
all of it) however slowly the receiver trickles bytes, reads at most a few KiB of an answer however
large, and deliveries run in slots of their own (a2a.push.concurrency), so that lifecycle
operations and turns run in normal time while every delivery slot is held. Real receivers on
loopback, a real worker."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import psutil
import pytest
from a2a.types import a2a_pb2
from conftest import apply_agent
from harness import a2a_env, as_user, settings_for_a2a, user_message

from sessionq.domain import push

pytestmark = pytest.mark.timeout(180)

ALLOW_LOOPBACK = push.TargetPolicy(allow_private=True)


class Trickler:
    """A receiver that reads the request, then answers one byte every `interval` seconds, never
    finishing its headers (`headers_done` False) or, with `headers_done`, a 200 whose body never
    ends. It records when each connection opened and closed."""

    def __init__(self, interval: float, *, headers_done: bool = False) -> None:
        self.interval = interval
        self.headers_done = headers_done
        self.open = 0
        self.most_open = 0
        self.requests = 0
        self.lasted: list[float] = []  # seconds each closed connection lasted
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened = time.monotonic()
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            self.requests += 1
            if self.headers_done:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            closed = asyncio.ensure_future(reader.read(1))  # b"" once the client closes
            while not closed.done():
                writer.write(b"a")
                await writer.drain()
                await asyncio.wait({closed}, timeout=self.interval)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            self.lasted.append(time.monotonic() - opened)
            writer.close()


@contextlib.asynccontextmanager
async def serving(receiver: Any) -> AsyncIterator[Any]:
    await receiver.start()
    try:
        yield receiver
    finally:
        await receiver.stop()


def delivery(port: int) -> dict[str, Any]:
    return {"url": f"http://127.0.0.1:{port}/hook", "payload": {"statusUpdate": {"taskId": "t"}}}


async def test_a_receiver_trickling_its_headers_is_cut_at_the_deadline() -> None:
    """A byte every 0.5 s keeps any per-read timeout from firing; the delivery still ends at its
    2 s deadline, as a failed attempt."""
    async with serving(Trickler(0.5)) as trickler, push.delivery_client(2.0) as http:
        started = time.monotonic()
        ok, status, error = await push.post(http, delivery(trickler.port), ALLOW_LOOPBACK, 2.0)
        took = time.monotonic() - started
        assert not ok and status is None and error is not None and "no answer within 2s" in error
        assert 1.9 <= took < 5.0
        for _ in range(100):  # the connection was closed: the receiver sees it
            if trickler.lasted:
                break
            await asyncio.sleep(0.05)
        assert trickler.requests == 1 and trickler.lasted and trickler.lasted[0] < 6.0


async def test_a_receiver_trickling_its_body_gets_its_status_counted_by_the_deadline() -> None:
    """A 200 whose body trickles: delivered, and the attempt still ends by the deadline."""
    async with serving(Trickler(0.5, headers_done=True)) as trickler, push.delivery_client(2.0) as http:
        started = time.monotonic()
        ok, status, error = await push.post(http, delivery(trickler.port), ALLOW_LOOPBACK, 2.0)
        assert (ok, status, error) == (True, 200, None)
        assert time.monotonic() - started < 5.0


class Flood:
    """A receiver that answers 200 with a body of `size` bytes, made lazily and written as fast as
    the connection takes it; it counts the bytes the connection took."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.sent = 0
        self.done = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        chunk = b"x" * 65536
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {self.size}\r\n\r\n".encode())
            while self.sent < self.size:
                writer.write(chunk)
                await writer.drain()
                self.sent += len(chunk)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.done.set()
            writer.close()


async def test_a_huge_answer_is_not_read_past_a_few_kib() -> None:
    """A 512 MiB answer: the delivery takes its status, reads a few KiB and closes the connection;
    the receiver could hand over only what the socket buffers hold, and this process (the worker's
    code path) does not grow by the answer."""
    size = 512 * 1024 * 1024
    me = psutil.Process()
    async with serving(Flood(size)) as flood, push.delivery_client(30.0) as http:
        rss_before = me.memory_info().rss
        ok, status, error = await push.post(http, delivery(flood.port), ALLOW_LOOPBACK, 30.0)
        assert (ok, status, error) == (True, 200, None)
        await asyncio.wait_for(flood.done.wait(), timeout=30)  # the receiver's writes fail: closed
        grown = me.memory_info().rss - rss_before
    assert flood.sent < 64 * 1024 * 1024, flood.sent  # socket buffers at most, not the answer
    assert grown < 64 * 1024 * 1024, grown


async def test_trickling_receivers_hold_only_the_delivery_slots(database_url: str, store: Any, sim: Any) -> None:
    """A worker of 4 slots, 2 of them for deliveries, and as many tasks whose receiver trickles a
    byte a second as it has slots (deliveries that could take any slot would hold all 4): the
    receiver never has more than 2 connections, each is cut at the 3 s deadline, and a new
    conversation (CreateSession, then its turn's dispatch) completes in normal time while both
    delivery slots are held."""
    settings = settings_for_a2a(**{
        "workers.concurrency": 4,
        "a2a.push.concurrency": 2,
        "a2a.push.timeout": 3.0,
        "a2a.push.maxAttempts": 3,
    })
    await apply_agent(store, sim)
    async with serving(Trickler(1.0)) as trickler, a2a_env(settings, database_url, store, sim) as env:
        async with env.client("GRPC", streaming=False) as client:
            tasks = []
            for i in range(4):  # as many tasks with a trickling receiver as the worker has slots
                request = a2a_pb2.SendMessageRequest(message=user_message(f"What is {i}+{i}?"))
                request.configuration.task_push_notification_config.url = f"http://127.0.0.1:{trickler.port}/h{i}"
                events = [e async for e in client.send_message(request, context=as_user(timeout=60))]
                tasks.append(events[-1].task.id)
            async with asyncio.timeout(30):
                while trickler.open < 2:
                    await asyncio.sleep(0.05)
            held: list[int] = []  # delivery connections open, sampled while the conversation runs

            async def sample() -> None:
                while True:
                    held.append(trickler.open)
                    await asyncio.sleep(0.05)

            sampler = asyncio.create_task(sample())
            started = time.monotonic()
            request = a2a_pb2.SendMessageRequest(message=user_message("What is 7+7?"))
            events = [e async for e in client.send_message(request, context=as_user(timeout=60))]
            took = time.monotonic() - started
            sampler.cancel()
            assert events[-1].task.status.state == a2a_pb2.TASK_STATE_COMPLETED
            assert took < 20.0, took  # a second or two; without slots of their own it never ran
            assert max(held) == 2  # both delivery slots were held meanwhile
        # deliveries keep failing at their deadline and being retried, two at a time
        async with asyncio.timeout(60):
            while len(trickler.lasted) < 4:
                await asyncio.sleep(0.1)
        assert trickler.most_open == 2
        assert all(s < 3.0 + 3.0 for s in trickler.lasted), trickler.lasted
        errors = [d["last_error"] for t in tasks for d in await store.push_deliveries(t) if d["attempts"]]
        assert errors and all(e and "no answer within 3s" in e for e in errors), errors
