"""Conformance: the Actor's private endpoint - a turn (`invoke`) and its cancel (`cancel_turn`),
with the caller's UID and without one (a plain client of a served runtime sends none: the call
acts on the current Actor, as every other method does without a UID)."""

from __future__ import annotations

from typing import cast

from sessionq.runtime.base import ActorState, Code

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
