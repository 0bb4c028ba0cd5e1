"""Operators see what happens between turns: queued turns (sessionq.turn_queue), paused Actors and
turns failed as stalled, in the views, `sessionq status` and its JSON; an idle boundary inside the
server-wide keep-warm window (sessions.keepWarm, as the workers report it) shows warm."""

from __future__ import annotations

import json
from typing import Any

from lifecycle import ready_session, turn_by_store
from ophelpers import cli_fixture, ok, ops_fixture  # noqa: F401 (fixtures)
from sessionq.cli.operator import status_text

from sessionq.models import BusyPolicy


async def test_queued_paused_and_stalled_show_in_views_and_status(ops: Any, store: Any, sim: Any) -> None:
    session = await ready_session(store, sim)
    msg = {"role": "ROLE_USER", "parts": [{"text": "hi"}]}
    await store.admit_turn(session.id, "alice", None, msg, None, 600)  # dispatched (no worker runs it)
    queued = [await store.send_turn(session.id, "alice", None, msg, None, 600, BusyPolicy.ENQUEUE) for _ in range(2)]
    first = await store.send_turn(session.id, "alice", None, msg, None, 600, BusyPolicy.INTERRUPT)
    rows = await ops.view("turn_queue")
    assert [(r["place"], r["task_id"], r["policy"]) for r in rows] == [
        (1, first.queued_task_id, "interrupt"), (2, queued[0].queued_task_id, "enqueue"),
        (3, queued[1].queued_task_id, "enqueue")]
    assert all(r["session_id"] == session.id and r["enqueued_by"] == "alice" for r in rows)
    s = await ops.status()
    b = s["between_turns"]
    assert (b["queued_turns"], b["queued_sessions"], b["paused_actors"], b["stalled_turns"]) == (3, 1, 0, 0)
    text = status_text(s)
    assert "BETWEEN TURNS" in text and "queued 3 on 1 sessions" in text


async def test_the_server_wide_keep_warm_window_shows_in_the_quiescence_backlog(ops: Any, store: Any,
                                                                                sim: Any) -> None:
    session = await ready_session(store, sim)
    await turn_by_store(store, sim, session)  # settled: an idle boundary waits for quiescence

    async def status() -> str:
        return {r["session_id"]: r for r in await ops.view("quiescence_backlog")}[session.id]["status"]

    assert await status() == "waiting"  # no worker reports a window
    await ops.register_worker(9001, "w-warm", "host", 1, None, 4, 600.0)  # sessions.keepWarm 600s
    await ops.register_worker(9002, "w-old", "host", 2, None, 4)  # a worker that reports none
    assert await status() == "warm"
    await ops.register_worker(9003, "w-cold", "host", 3, None, 4, 0.0)  # the first worker past its window claims
    assert await status() == "waiting"
    await ops.unregister_worker(9003)
    assert await status() == "warm"
    async with store.pool.connection() as conn:
        row = await (await conn.execute("SELECT keep_warm FROM sessionq.worker_info WHERE worker_id = 9001")).fetchone()
    assert row["keep_warm"] == 600.0


async def test_sessionq_between_turns_lists_queued_warm_and_paused(ops: Any, store: Any, sim: Any, cli: Any) -> None:
    busy = await ready_session(store, sim, "req-busy")
    msg = {"role": "ROLE_USER", "parts": [{"text": "hi"}]}
    await store.admit_turn(busy.id, "alice", None, msg, None, 600)
    queued = await store.send_turn(busy.id, "alice", None, msg, None, 600, BusyPolicy.ENQUEUE)
    warm = await ready_session(store, sim, "req-warm")
    await turn_by_store(store, sim, warm)
    await ops.register_worker(9201, "w-warm", "host", 1, None, 4, 120.0)
    text = ok(await cli("between-turns")).stdout
    assert "QUEUED TURNS (1)" in text and queued.queued_task_id in text
    assert "WARM AND PAUSED ACTORS (1)" in text and str(warm.id) in text and "120s" in text
    assert "TURNS FAILED AS STALLED (0)" in text
    data = json.loads(ok(await cli("between-turns", "-o", "json")).stdout)
    assert [r["task_id"] for r in data["queued"]] == [queued.queued_task_id]
    assert [(r["session_id"], r["status"], r["keep_warm"]) for r in data["idle"]] == [(str(warm.id), "warm", 120.0)]
    assert data["stalled"] == []
