"""The console's time travel in a real headless Chromium: a Session's turns, which can be forked,
the snapshots it holds, and "Fork from here" (TT-7)."""

from __future__ import annotations

import asyncio
import time

import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent
from test_console import ADMIN, browser, console, login  # noqa: F401 (fixtures)

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq._pb.sessionq.v1 import turns_pb2, turns_pb2_grpc


async def send(api, text, sid):
    msg = a2a_pb2.Message(message_id=f"m-{time.monotonic_ns()}", role=a2a_pb2.ROLE_USER, context_id=sid,
                          parts=[a2a_pb2.Part(text=text)])
    r = await a2a_pb2_grpc.A2AServiceStub(api.channel).SendMessage(
        a2a_pb2.SendMessageRequest(tenant="kagent/my-first-agent", message=msg), metadata=api.md(), timeout=15)
    return r.task


async def pinned(api, sid, task_id):
    stub = turns_pb2_grpc.TurnServiceStub(api.channel)
    for _ in range(300):
        turns = (await stub.ListTurns(turns_pb2.ListTurnsRequest(session_id=sid), metadata=api.md(), timeout=5)).turns
        if any(t.task_id == task_id and t.checkpointable for t in turns):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("not pinned")


@pytest.mark.clause("TT-7")
@pytest.mark.clause("TT-4")
async def test_a_sessions_turns_and_fork_from_here(browser, console, api, store, sim, tmp_path):  # noqa: F811
    await apply_agent(store, sim)
    sessions = sessions_pb2_grpc.SessionServiceStub(api.channel)
    sid = (await sessions.CreateSession(sessions_pb2.CreateSessionRequest(
        request_id="console-tt", agent=common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")),
        metadata=api.md(), timeout=10)).session.id
    first = await send(api, "Remember the number 11.", sid)
    await pinned(api, sid, first.id)
    second = await send(api, "Remember the number 22.", sid)
    await pinned(api, sid, second.id)

    page = await browser.new_page()
    await login(page, console, ADMIN)
    await page.goto(f"{console}/sessions/{sid}")
    assert "Snapshots held in the runtime: 2" in await page.inner_text("p.snapshots")
    rows = page.locator("table.turns tr[data-task]")
    assert await rows.count() == 2
    await page.screenshot(path=str(tmp_path / "turns.png"), full_page=True)
    await page.locator(f"tr[data-task='{first.id}'] button:has-text('Fork from here')").click()
    await page.wait_for_selector(".flash.ok")
    flash = await page.inner_text(".flash.ok")
    assert f"of turn {first.id} admitted" in flash
    fork_id = page.url.split("/sessions/")[1].split("?")[0]
    assert fork_id != sid
    for _ in range(200):
        got = (await sessions.GetSession(sessions_pb2.GetSessionRequest(session_id=fork_id), metadata=api.md(),
                                         timeout=5)).session
        if got.state == runtime_pb2.RUNTIME_STATE_READY:
            break
        await asyncio.sleep(0.05)
    assert got.state == runtime_pb2.RUNTIME_STATE_READY and got.creator == "alice"  # the Session owner's fork
    said = await send(api, "What number did I ask you to remember?", fork_id)
    assert "remember the number 11" in " ".join(p.text for p in said.status.message.parts)
    # the source's first turn is now held by the fork's checkpoint, and says so
    await page.goto(f"{console}/sessions/{sid}")
    assert "from checkpoint" in await page.inner_text(f"tr[data-task='{first.id}']")
    await page.screenshot(path=str(tmp_path / "after-fork.png"), full_page=True)
    assert (tmp_path / "turns.png").stat().st_size > 1000
