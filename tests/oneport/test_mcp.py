"""MCP at /mcp on the public port, through the official `mcp` SDK's own client (streamable HTTP):
kagent's tools (list_agents, invoke_agent twice in one conversation), the Session lifecycle tools
with the gRPC calls' authorization and errors, and bad input answered at the protocol level."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from conftest import apply_agent, make_settings
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.subscriptions import ResourceUpdated
from test_one_port import create_session, public_port

from sessionq.api.public import PublicPort
from sessionq.db.store import Store

pytestmark = pytest.mark.timeout(180)


@contextlib.asynccontextmanager
async def mcp_session(port: int, token: str | None = "alice-token", *, http2: bool = False,
                      versions: list[str] | None = None) -> AsyncIterator[ClientSession]:
    """The mcp SDK's client session; `http2`: over HTTP/2 with prior knowledge (h2c), the HTTP
    versions of the answers recorded in `versions`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def record(response: Any) -> None:
        if versions is not None:
            versions.append(response.http_version)

    async with httpx2.AsyncClient(headers=headers, timeout=120, http1=not http2, http2=http2,
                                  event_hooks={"response": [record]}) as http, \
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return result.structured_content or json.loads(result.content[0].text)


@pytest.mark.parametrize("stateless", [False, True])
async def test_mcp_client_lists_agents_and_continues_a_conversation(store, sim, database_url, stateless):
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url, **{"server.mcpStateless": stateless}) as public, \
            mcp_session(public.port) as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
        assert {"list_agents", "invoke_agent", "list_sessions", "get_session", "suspend_session", "resume_session",
                "delete_session", "checkpoint_session", "fork_checkpoint"} <= names
        agents = structured(await mcp.call_tool("list_agents", {}))["agents"]
        assert {"ref": "kagent/my-first-agent"} in [{"ref": a["ref"]} for a in agents]
        first = structured(await mcp.call_tool("invoke_agent", {"agent": "kagent/my-first-agent",
                                                               "task": "Remember the number 7."}))
        assert first["agent"] == "kagent/my-first-agent" and first["context_id"]
        second = structured(await mcp.call_tool("invoke_agent", {
            "agent": "kagent/my-first-agent", "task": "What number did I ask you to remember?",
            "context_id": first["context_id"]}))
        assert second["context_id"] == first["context_id"] and "7" in second["text"], second
        got = structured(await mcp.call_tool("get_session", {"session_id": first["context_id"]}))
        assert got["session"]["id"] == first["context_id"]
        listed = structured(await mcp.call_tool("list_sessions", {"agent": "kagent/my-first-agent"}))
        assert first["context_id"] in [s["id"] for s in listed["sessions"]]


@pytest.mark.clause("RT-1")
async def test_mcp_over_http2_prior_knowledge(store, sim, database_url):
    """The mcp SDK's client over HTTP/2 (h2c, prior knowledge): served by the port's HTTP app, not
    sent to grpcio, with the same tools and answers as over HTTP/1.1."""
    await apply_agent(store, sim)
    versions: list[str] = []
    async with public_port(store, sim, database_url) as public:
        async with mcp_session(public.port, http2=True, versions=versions) as mcp:
            assert "invoke_agent" in {t.name for t in (await mcp.list_tools()).tools}
            first = structured(await mcp.call_tool("invoke_agent", {"agent": "kagent/my-first-agent",
                                                                   "task": "Remember the number 7."}))
            second = structured(await mcp.call_tool("invoke_agent", {
                "agent": "kagent/my-first-agent", "task": "What number did I ask you to remember?",
                "context_id": first["context_id"]}))
            assert "7" in second["text"], second
        assert versions and set(versions) == {"HTTP/2"}, versions
        # without a token: 401 over HTTP/2 as over HTTP/1.1
        async with httpx2.AsyncClient(http1=False, http2=True, timeout=30) as http:
            r = await http.post(f"http://127.0.0.1:{public.port}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                headers={"accept": "application/json, text/event-stream"})
        assert r.status_code == 401 and r.http_version == "HTTP/2"


async def test_mcp_has_the_api_s_authorization_and_errors(store, sim, database_url):
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url) as public:
        session = await create_session(f"127.0.0.1:{public.port}")  # alice's
        # no token, an unknown token: 401 before MCP, short
        async with httpx.AsyncClient(timeout=30) as http:
            for headers in ({}, {"Authorization": "Bearer nobody"}):
                r = await http.post(f"http://127.0.0.1:{public.port}/mcp", headers={
                    **headers, "content-type": "application/json", "accept": "application/json, text/event-stream"},
                    content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
                assert r.status_code == 401 and len(r.text) < 200, r.text
            # malformed JSON-RPC: a JSON-RPC error, never a traceback
            r = await http.post(f"http://127.0.0.1:{public.port}/mcp", content=b"{not json",
                                headers={"Authorization": "Bearer alice-token", "content-type": "application/json",
                                         "accept": "application/json, text/event-stream"})
            assert 400 <= r.status_code < 500 and "Traceback" not in r.text, r.text
        before = await store._rows("SELECT count(*) AS n FROM sessionq.sessions")
        async with mcp_session(public.port, "bob-token") as bob:
            # another user's conversation: the same answer as a missing one
            theirs = await bob.call_tool("invoke_agent", {"agent": "kagent/my-first-agent", "task": "hi",
                                                          "context_id": session.id})
            missing = await bob.call_tool("invoke_agent", {"agent": "kagent/my-first-agent", "task": "hi",
                                                           "context_id": "00000000-0000-7000-8000-000000000000"})
            assert theirs.is_error and missing.is_error
            assert theirs.content[0].text.replace(session.id, "ID") == \
                missing.content[0].text.replace("00000000-0000-7000-8000-000000000000", "ID")
            r = await bob.call_tool("get_session", {"session_id": session.id})
            assert r.is_error and "NOT_FOUND: " in r.content[0].text
            r = await bob.call_tool("delete_session", {"session_id": session.id})
            assert r.is_error and "NOT_FOUND: " in r.content[0].text
            # a malformed agent, wrong argument types, unknown tools: refused, nothing written
            r = await bob.call_tool("invoke_agent", {"agent": "no-slash", "task": "hi"})
            assert r.is_error and "namespace/name" in r.content[0].text
            r = await bob.call_tool("invoke_agent", {"agent": "kagent/my-first-agent", "task": ["not", "a", "string"]})
            assert r.is_error
            r = await bob.call_tool("get_session", {"session_id": "not-a-uuid"})
            assert r.is_error and "INVALID_ARGUMENT: " in r.content[0].text
            with contextlib.suppress(Exception):
                r = await bob.call_tool("no_such_tool", {})
                assert r.is_error
        assert await store._rows("SELECT count(*) AS n FROM sessionq.sessions") == before
        assert (await store.get_session(session.id, "alice")).state.name == "READY"


async def test_subscribers_of_kagent_agents_hear_of_an_apply_through_another_api_server(store, sim, database_url,
                                                                                        pooled_url, tmp_path):
    """`sessionq agent apply` (the CLI, its own process) through another API server (its own Store,
    pool and LISTEN connection): the subscriber of the first one gets notifications/resources/updated,
    the change having travelled through PostgreSQL's NOTIFY."""
    await apply_agent(store, sim)
    other_store = await Store.open(pooled_url, pool_size=2, direct_url=database_url)
    try:
        async with public_port(store, sim, database_url) as public:
            other = PublicPort(make_settings(), other_store, address="127.0.0.1:0", runtime=sim)
            await other.start()
            try:
                updates: list[str] = []
                heard = asyncio.Event()

                async def on_message(message: Any) -> None:
                    if "kagent://agents" in str(message):
                        updates.append(str(message))
                        heard.set()

                headers = {"Authorization": "Bearer alice-token"}
                async with httpx2.AsyncClient(headers=headers, timeout=120) as http, \
                        streamable_http_client(f"http://127.0.0.1:{public.port}/mcp", http_client=http) as (r, w), \
                        ClientSession(r, w, message_handler=on_message) as mcp, \
                        httpx2.AsyncClient(headers=headers, timeout=120) as http2, \
                        Client(streamable_http_client(f"http://127.0.0.1:{public.port}/mcp", http_client=http2)) as modern, \
                        modern.listen(resource_subscriptions=["kagent://agents"]) as listening:
                    # the current way (2026-07-28): a subscriptions/listen stream, acknowledged
                    assert "kagent://agents" in (listening.honored.resource_subscriptions or [])
                    await mcp.initialize()
                    listed = await mcp.read_resource("kagent://agents")
                    assert "kagent/my-first-agent" in listed.contents[0].text
                    # the earlier one (kagent's): resources/subscribe, which the SDK marks as removed
                    # from the 2026-07-28 revision on; earlier clients still use it
                    with pytest.warns(MCPDeprecationWarning):
                        await mcp.subscribe_resource("kagent://agents")
                    spec = tmp_path / "agent.yaml"
                    spec.write_text("name: helper\nnamespace: kagent\n")
                    (tmp_path / "client.yaml").write_text("{}\n")
                    proc = await asyncio.create_subprocess_exec(
                        sys.executable, "-m", "sessionq.cli.main", "--server", f"127.0.0.1:{other.port}",
                        "--token", "alice-token", "agent", "apply", "--no-wait", "-f", str(spec),
                        env={**os.environ, "SESSIONQ_CLIENT_CONFIG": str(tmp_path / "client.yaml")},
                        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                    _, err = await proc.communicate()
                    assert proc.returncode == 0, err.decode()
                    await asyncio.wait_for(heard.wait(), 20)
                    assert updates
                    event = await asyncio.wait_for(anext(aiter(listening)), 20)
                    assert isinstance(event, ResourceUpdated) and event.uri == "kagent://agents", event
            finally:
                await other.stop(0)
    finally:
        await other_store.close()


async def test_invoke_agent_reports_progress_and_a_cancel_cancels_the_turn(store, sim, database_url):
    """A long invoke_agent: the turn's events arrive as progress notifications; abandoning the call
    (the client's notifications/cancelled) cancels the turn as A2A CancelTask does."""
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url) as public, mcp_session(public.port) as mcp:
        progress: list[tuple[float, str | None]] = []
        started = asyncio.Event()

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, message))
            started.set()

        short = structured(await mcp.call_tool("invoke_agent", {"agent": "kagent/my-first-agent", "task": "hello"},
                                               progress_callback=on_progress))
        assert progress and short["context_id"]
        progress.clear()
        started.clear()
        call = asyncio.create_task(mcp.call_tool("invoke_agent", {
            "agent": "kagent/my-first-agent", "task": "[slow:60] take your time", "context_id": short["context_id"]},
            progress_callback=on_progress))
        await asyncio.wait_for(started.wait(), 30)  # the turn exists (its first event)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call

        async def cancelled() -> bool:
            rows = await store._rows("SELECT count(*) AS n FROM sessionq.tasks WHERE session_id = %s"
                                     " AND state IN ('TASK_STATE_CANCELED', 'canceled', 'CANCELED')",
                                     (short["context_id"],))
            return bool(rows[0]["n"])

        deadline = asyncio.get_running_loop().time() + 30
        while not await cancelled():
            assert asyncio.get_running_loop().time() < deadline, "the turn was not cancelled"
            await asyncio.sleep(0.3)


async def test_mcp_tools_call_the_handlers_in_process(store, sim, database_url):
    """MCP's tools call the API's method handlers in this process, as gRPC-Web does, not grpcio over
    its private socket: with that socket's path gone (no new connection reaches grpcio), the tools
    still answer, with the same authorization and errors."""
    await apply_agent(store, sim)
    async with public_port(store, sim, database_url) as public:
        session = await create_session(f"127.0.0.1:{public.port}")  # alice's, over native gRPC
        os.unlink(public.private.path)
        async with mcp_session(public.port) as alice:
            got = structured(await alice.call_tool("get_session", {"session_id": session.id}))
            assert got["session"]["id"] == session.id
            listed = structured(await alice.call_tool("list_sessions", {"agent": "kagent/my-first-agent"}))
            assert session.id in [s["id"] for s in listed["sessions"]]
        async with mcp_session(public.port, "bob-token") as bob:
            r = await bob.call_tool("get_session", {"session_id": session.id})
            assert r.is_error and "NOT_FOUND: session" in r.content[0].text, r.content
            r = await bob.call_tool("get_session", {"session_id": "not-a-uuid"})
            assert r.is_error and "INVALID_ARGUMENT: " in r.content[0].text, r.content
