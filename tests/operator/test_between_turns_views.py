"""Operators see what happens between turns: queued turns (sessionq.turn_queue), paused Actors and
turns failed as stalled, in the views, `sessionq status` and its JSON."""

from __future__ import annotations

from typing import Any

from lifecycle import ready_session
from ophelpers import ops_fixture  # noqa: F401 (fixtures)
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
