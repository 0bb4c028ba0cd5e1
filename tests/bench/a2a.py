"""Scenario `a2a`: A2A turns, streams and push notifications beside CreateSession, same processes.

Processes: one `sessionq serve` (every protocol on its one port) and one `sessionq worker`
(procrastinate, quiescence, the simulated runtime with the zero-time agent), each its own OS
process; this process is the client (the a2a-sdk's own clients) and a local push receiver.
Sequential calls (one at a time), each on a fresh Session whose Actor is suspended:

- CreateSession p50/p99 (the baseline);
- a turn on a suspended Actor over gRPC and over JSON-RPC (SendMessage, blocking: admit,
  dispatch job, resume, invoke, the task store's writes, settle, NOTIFY);
- the same turn as MCP's invoke_agent (the `mcp` SDK's client, streamable HTTP, on /mcp of the same
  port);
- the first streamed event of SendStreamingMessage (gRPC);
- push delivery: the final event's commit (its database timestamp) -> the receiver's arrival;
- quiescence wake (a baseline): the same turns' settlement -> the suspend call the quiescence
  worker makes (the simulator's call log).

Targets: turn p50 within 2x CreateSession p50; JSON-RPC within 1.3x gRPC; MCP within 1.3x JSON-RPC;
push delivery p99 within 2x the quiescence wake p99.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import httpx
import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.bench.common import (
    AGENT,
    METADATA,
    NAMESPACE,
    TOKEN,
    Server,
    free_port,
    processes,
    query_value,
    ratio,
    say,
    setup_agent,
    start_api,
    start_workers,
    summary_ms,
    table,
)

SETTINGS: dict[str, Any] = {
    "workers.concurrency": 32,
    "workers.pollInterval": 1.0,
    "database.poolSize": 20,
    "runtime.simulator.workers": 512,
    "a2a.push.allowPrivateTargets": True,  # the receiver listens on loopback
}


class Receiver:
    """Push receiver: the arrival time (epoch seconds) of each notification, by task and state."""

    def __init__(self) -> None:
        self.arrivals: dict[tuple[str, str], float] = {}
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            now = time.time()
            lines = head.decode().split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))))
            if "statusUpdate" in body:
                key = (body["statusUpdate"]["taskId"], body["statusUpdate"]["status"]["state"])
            else:
                key = (body["task"]["id"], body["task"]["status"]["state"])
            self.arrivals.setdefault(key, now)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        finally:
            writer.close()


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    from a2a.client import ClientCallContext, ClientConfig, ClientFactory
    from a2a.types import a2a_pb2

    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc

    sizes = {"turns": 12 if quick else 40, **(sizes or {})}
    n = int(sizes["turns"])
    say("", f"== a2a: {n} sequential turns per kind on suspended Actors, beside CreateSession ==")
    url = srv.fresh_database("a2a")
    await setup_agent(url)
    port = http_port = free_port()  # one port: gRPC and the A2A HTTP bindings
    settings = dict(SETTINGS)
    receiver = Receiver()
    await receiver.start()
    async with processes(log_dir / "a2a") as procs:
        await start_api(procs, url, port, settings)
        await start_workers(procs, url, port, settings)
        address = f"127.0.0.1:{port}"
        channel = grpc.aio.insecure_channel(address)
        sessions = sessions_pb2_grpc.SessionServiceStub(channel)
        http = httpx.AsyncClient(timeout=60)
        ctx = ClientCallContext(service_parameters={"authorization": f"Bearer {TOKEN}"}, timeout=60)
        card_url = f"http://127.0.0.1:{http_port}/api/a2a/{NAMESPACE}/{AGENT}/.well-known/agent-card.json"
        json_card = (await http.get(card_url, headers={"Authorization": f"Bearer {TOKEN}"})).json()
        from google.protobuf import json_format

        card = json_format.ParseDict(json_card, a2a_pb2.AgentCard(), ignore_unknown_fields=True)

        def client(binding: str, streaming: bool) -> Any:
            return ClientFactory(ClientConfig(
                streaming=streaming, supported_protocol_bindings=[binding], httpx_client=http,
                grpc_channel_factory=lambda u: grpc.aio.insecure_channel(u),
            )).create(card)

        clients = {"GRPC": client("GRPC", False), "JSONRPC": client("JSONRPC", False)}
        streaming = client("GRPC", True)

        async def create() -> tuple[str, float]:
            t0 = time.monotonic()
            r = await sessions.CreateSession(sessions_pb2.CreateSessionRequest(
                request_id=f"bench-a2a-{uuid.uuid4()}", agent=common_pb2.ResourceReference(
                    namespace=NAMESPACE, name=AGENT)), metadata=METADATA, timeout=60)
            return r.session.id, time.monotonic() - t0

        def message(sid: str, text: str) -> Any:
            return a2a_pb2.Message(message_id=str(uuid.uuid4()), role=a2a_pb2.ROLE_USER, context_id=sid,
                                   parts=[a2a_pb2.Part(text=text)])

        async def turn(c: Any, sid: str, push: bool = False) -> tuple[str, float]:
            request = a2a_pb2.SendMessageRequest(message=message(sid, "What is 2+2?"))
            if push:
                request.configuration.task_push_notification_config.url = f"http://127.0.0.1:{receiver.port}/h"
            t0 = time.monotonic()
            last = None
            async for event in c.send_message(request, context=ctx):
                last = event
            elapsed = time.monotonic() - t0
            assert last is not None and last.task.status.state == a2a_pb2.TASK_STATE_COMPLETED, last
            return last.task.id, elapsed

        async def first_event(sid: str) -> float:
            request = a2a_pb2.SendMessageRequest(message=message(sid, "What is 3+3?"))
            t0 = time.monotonic()
            first = None
            async for _event in streaming.send_message(request, context=ctx):
                if first is None:
                    first = time.monotonic() - t0
            assert first is not None
            return first

        mcp_http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
        mcp_exit = contextlib.AsyncExitStack()
        read, write = await mcp_exit.enter_async_context(streamable_http_client(f"http://{address}/mcp",
                                                                                http_client=mcp_http))
        mcp = await mcp_exit.enter_async_context(ClientSession(read, write))
        await mcp.initialize()

        async def mcp_turn(sid: str) -> float:
            t0 = time.monotonic()
            r = await mcp.call_tool("invoke_agent", {"agent": f"{NAMESPACE}/{AGENT}", "task": "What is 2+2?",
                                                     "context_id": sid})
            elapsed = time.monotonic() - t0
            assert not r.is_error, r.content
            return elapsed

        lat: dict[str, list[float]] = {"create": [], "GRPC": [], "JSONRPC": [], "MCP": [], "stream_first": []}
        push_tasks: list[str] = []
        # warm-up (connections, caches, the first job fetch)
        sid, _ = await create()
        await turn(clients["GRPC"], sid)
        for _ in range(n):
            # interleaved, so that every kind sees the same machine
            sid, t = await create()
            lat["create"].append(t)
            for binding in ("GRPC", "JSONRPC"):
                fresh, _ = await create()
                lat[binding].append((await turn(clients[binding], fresh))[1])
            fresh, _ = await create()
            lat["MCP"].append(await mcp_turn(fresh))
            fresh, _ = await create()
            lat["stream_first"].append(await first_event(fresh))
            fresh, _ = await create()
            push_tasks.append((await turn(clients["GRPC"], fresh, push=True))[0])

        # push delivery: the final event's commit -> the receiver's arrival
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
                (t, "TASK_STATE_COMPLETED") in receiver.arrivals for t in push_tasks):
            await asyncio.sleep(0.1)
        push_lat = []
        wake_lat = []
        for t in push_tasks:
            committed = await query_value(
                url, "SELECT extract(epoch FROM max(created_at)) FROM sessionq.events WHERE task_id = %s", (t,))
            arrived = receiver.arrivals.get((t, "TASK_STATE_COMPLETED"))
            if committed is not None and arrived is not None:
                push_lat.append(max(0.0, arrived - float(committed)))
            # quiescence wake: settlement -> the suspend call that followed it
            wake = await query_value(
                url, "SELECT extract(epoch FROM min(c.at)) - extract(epoch FROM max(e.created_at))"
                " FROM sessionq.events e JOIN sessionq.sessions s ON s.id = e.session_id"
                " JOIN substrate_sim.calls c ON c.name = s.actor_name AND c.method = 'suspend_actor'"
                "  AND c.at > (SELECT max(created_at) FROM sessionq.events WHERE task_id = %s)"
                " WHERE e.task_id = %s", (t, t))
            if wake is not None:
                wake_lat.append(float(wake))
        for c in (*clients.values(), streaming):
            await c.close()
        await mcp_exit.aclose()
        await mcp_http.aclose()
        await http.aclose()
        await channel.close()
    if receiver.server:
        receiver.server.close()

    s = {k: summary_ms(v) for k, v in lat.items()}
    s["push_delivery"] = summary_ms(push_lat)
    s["quiescence_wake"] = summary_ms(wake_lat)
    results: dict[str, Any] = {
        "sizes": sizes,
        **s,
        "turn_grpc_p50_over_create_p50": ratio(s["GRPC"]["p50_ms"], s["create"]["p50_ms"]),
        "jsonrpc_p50_over_grpc_p50": ratio(s["JSONRPC"]["p50_ms"], s["GRPC"]["p50_ms"]),
        "mcp_p50_over_jsonrpc_p50": ratio(s["MCP"]["p50_ms"], s["JSONRPC"]["p50_ms"]),
        "push_p99_over_wake_p99": ratio(s["push_delivery"]["p99_ms"], s["quiescence_wake"]["p99_ms"]),
        "targets": {"turn_grpc_p50_over_create_p50": 2.0, "jsonrpc_p50_over_grpc_p50": 1.3,
                    "mcp_p50_over_jsonrpc_p50": 1.3,
                    "push_p99_over_wake_p99": 2.0},
    }
    rows = [[k, v["n"], v["p50_ms"], v["p99_ms"]] for k, v in s.items()]
    say(table("a2a latencies (ms)", ["what", "n", "p50", "p99"], rows))
    say(table("a2a ratios (target)", ["ratio", "value", "target"], [
        [k, results[k], t] for k, t in results["targets"].items()]))
    return results
