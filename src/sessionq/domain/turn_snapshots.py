"""Turn pins: the snapshots of a Session's last settled turns stay pinned for time travel.

The quiescence worker that suspended the Actor after a turn pins that turn's snapshot while it
still holds the Session's idle claim (`pin_turn`): sessionq.begin_turn_pin records a PINNING pin,
the runtime copies the Actor's snapshot under tag turn-<pin id> (the Actor is suspended and holds
exactly the recorded generation: nothing resumes it while the claim is held), and
sessionq.finish_turn_pin records it PINNED and releases the pins beyond the retention
(sessions.turnSnapshots). Pinning is best effort: a turn whose pin cannot be made is simply not
retained (ListTurns says so), and quiescence records the snapshot either way. A released pin's
tag is deleted by the release_turn_snapshot job (`release_turn_pin`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg

from sessionq.db.retry import with_db_retry
from sessionq.db.store import Store
from sessionq.domain.checkpoints import tag_snapshot
from sessionq.errors import SessionqError
from sessionq.models import Session, SnapshotState, TurnPin, TurnPinState
from sessionq.runtime.base import Code, Substrate, SubstrateError

log = logging.getLogger(__name__)

PIN_BOUND = 30.0  # the longest the tag of one turn may hold up the Session's quiescence


@dataclass(frozen=True)
class PinToFinish:
    """A turn pin whose tag was made (or could not be): what finish_turn_pin records."""

    pin: TurnPin
    executor: UUID
    failure: str | None
    tag_uri: str | None
    keep: int

    def as_json(self) -> dict[str, Any]:
        return {"id": str(self.pin.id), "executor": str(self.executor), "failure": self.failure,
                "tag_uri": self.tag_uri, "keep": self.keep}


async def pin_turn(store: Store, runtime: Substrate, session: Session, snapshot: dict[str, Any] | None,
                   keep: int, *, bound: float | None = None) -> bool:
    """Pin the snapshot just recorded after the Session's last turn (by the idle claim holder,
    before it records the snapshot). True when a pin was made; never raises. The tag counts once
    its copy of the snapshot is COMPLETED (SNAP-1; `tag_snapshot` waits for it): a copy still
    being written after `bound` seconds (default PIN_BOUND) leaves the turn not retained, its tag
    deleted by the pin's release."""
    made = await tag_turn(store, runtime, session, snapshot, keep, bound=bound)
    return made is not None and await finish_pin(store, runtime, made)


async def tag_turn(store: Store, runtime: Substrate, session: Session, snapshot: dict[str, Any] | None,
                   keep: int, *, bound: float | None = None) -> PinToFinish | None:
    """pin_turn's first half: begin the pin and tag the snapshot. None when nothing is to be
    pinned (or the pin could not be begun); else what `finish_pin` (or the quiescence workers'
    batched record, sessionq.finish_idle_many) records. Never raises."""
    bound = PIN_BOUND if bound is None else bound
    if keep <= 0 or snapshot is None or snapshot.get("status") != SnapshotState.COMPLETED:
        return None
    assert session.idle_boundary_id is not None and session.idle_executor is not None
    executor = session.idle_executor
    extra = {"session_id": str(session.id)}
    try:
        pin = await store.begin_turn_pin(
            session.id, session.idle_boundary_id, executor, int(snapshot["generation"]), snapshot.get("uri")
        )
    except (psycopg.Error, SessionqError) as e:
        log.warning("turn pin not begun (%s); the turn is not retained", e, extra=extra)
        return None
    if pin is None:
        return None
    failure: str | None = None
    tag_uri: str | None = None
    try:
        made = await asyncio.wait_for(
            tag_snapshot(runtime, pin.actor_atespace, pin.tag_name, pin.actor_name, pin.actor_uid,
                         pin.snapshot_generation),
            timeout=bound,
        )
        if isinstance(made, str):
            failure = made
        else:
            tag_uri = made.snapshot_uri
    except SubstrateError as e:
        failure = f"the runtime refused the tag ({e.code.name}): {e.message}"
    except TimeoutError:
        failure = f"the tag's snapshot copy was not completed within {bound:g}s"
    return PinToFinish(pin, executor, failure, tag_uri, keep)


async def finish_pin(store: Store, runtime: Substrate, made: PinToFinish) -> bool:
    """pin_turn's second half: record the pin (finish_turn_pin). True when a pin was made; never raises."""
    pin = made.pin
    extra = {"session_id": str(pin.session_id)}
    try:
        await with_db_retry(
            lambda: store.finish_turn_pin(pin.id, made.executor, made.failure, made.tag_uri, made.keep), budget=30.0
        )
    except SessionqError as e:
        await pin_lost(runtime, made, str(e))
        return False
    except psycopg.Error as e:
        # the PINNING row stays: the next pin of this Session, or its deletion, releases it
        log.warning("turn pin %s not recorded (%s)", pin.id, e, extra=extra)
        return False
    return pin_recorded(made)


async def pin_lost(runtime: Substrate, made: PinToFinish, why: str) -> None:
    """The claim moved on (taken over): this attempt's tag is not recorded anywhere, remove it."""
    log.warning("turn pin %s not recorded (%s); removing its tag", made.pin.id, why,
                extra={"session_id": str(made.pin.session_id)})
    await _delete_tag(runtime, made.pin.actor_atespace, made.pin.tag_name)


def pin_recorded(made: PinToFinish) -> bool:
    """The pin was recorded: True when it holds a tag (a failure is logged)."""
    if made.failure:
        log.warning("turn %s not retained: %s", made.pin.task_id, made.failure,
                    extra={"session_id": str(made.pin.session_id)})
        return False
    return True


async def release_turn_pin(store: Store, runtime: Substrate, pin_id: UUID) -> bool:
    """Delete the tag of a RELEASING turn pin, then its row. False when there is nothing to do."""
    pin = await store.turn_pin_by_id(pin_id)
    if pin is None or pin.state != TurnPinState.RELEASING:
        return False
    await _delete_tag(runtime, pin.actor_atespace, pin.tag_name, strict=True)
    return await store.forget_turn_pin(pin_id)


async def _delete_tag(runtime: Substrate, atespace: str, tag: str, *, strict: bool = False) -> None:
    try:
        await runtime.delete_tag(atespace, tag)
    except SubstrateError as e:
        if e.code == Code.NOT_FOUND:
            return
        if strict:
            raise
        log.warning("tag %s/%s could not be deleted: %s", atespace, tag, e)
