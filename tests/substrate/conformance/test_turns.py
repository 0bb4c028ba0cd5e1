"""Conformance: the Actor's private endpoint - a turn (`invoke`) and its cancel (`cancel_turn`),
with the caller's UID and without one (a plain client of a served runtime sends none: the call
acts on the current Actor, as every other method does without a UID)."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from sessionq.runtime.base import ActorState, Code, InvokeRequest

from .conftest import Subject
from .helpers import NS, refused, running

NO_UID = cast(str, None)  # what the server frame passes on for a call without a UID


async def test_cancel_turn_without_a_uid_acts_on_the_current_actor(subject: Subject) -> None:
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    await rt.cancel_turn(NS, "a", NO_UID, "session", "task")  # SUSPENDED: no turn to stop
    running_actor = await running(rt, made)
    await rt.cancel_turn(NS, "a", NO_UID, "session", "task")
    await rt.cancel_turn(NS, "a", NO_UID, "session", "task")  # idempotent
    got = await rt.get_actor(NS, "a")
    assert (got.uid, got.state) == (made.uid, ActorState.RUNNING) and got.version == running_actor.version
    await refused(Code.NOT_FOUND, rt.cancel_turn(NS, "ghost", NO_UID, "session", "task"))


@pytest.mark.parametrize("with_uid", [True, False], ids=["uid", "no-uid"])
async def test_an_actor_whose_process_ends_during_a_turn_fails_it_and_reads_crashed(
    subject: Subject, with_uid: bool
) -> None:
    """The turn's call ends once the runtime has recorded the crash (UNAVAILABLE, saying the process
    ended), so whoever reads the Actor next sees it CRASHED, whether the caller named its UID or not."""
    if subject.end_process is None:
        pytest.skip(f"{subject.kind}: no process to end during a turn")
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    await running(rt, made)
    request = InvokeRequest("session", "dispatch", {"parts": [{"text": "hello"}]}, credential="sqw.test")
    turn = asyncio.ensure_future(rt.invoke(NS, "a", made.uid if with_uid else NO_UID, request))
    try:
        await subject.end_process(NS, "a", made.uid)
        error = await refused(Code.UNAVAILABLE, asyncio.wait_for(turn, 60))
    finally:
        turn.cancel()
    assert "ended during the turn" in error.message, error.message
    got = await rt.get_actor(NS, "a")
    assert got.state == ActorState.CRASHED, got.state
