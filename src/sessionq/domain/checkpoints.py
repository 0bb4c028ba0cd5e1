"""The runtime side of checkpoints: tag the snapshot, remove the tag; refresh pending snapshots.

Admission (sessionq.admit_checkpoint / admit_checkpoint_delete) decides; these functions run in
jobs with an executor claim on the checkpoint row, call the runtime with no transaction open,
and record the outcome with sessionq.finish_checkpoint.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID, uuid4

from sessionq.db.retry import detached, with_db_retry
from sessionq.db.store import Store
from sessionq.domain.operations import TRANSIENT
from sessionq.domain.snapshots import pick_snapshot
from sessionq.models import CheckpointClaimStatus, CheckpointState, SnapshotState
from sessionq.runtime.base import ActorState, Code, SnapshotStatus, Substrate, SubstrateError, Tag

log = logging.getLogger(__name__)


class CheckpointOutcomeStatus(enum.StrEnum):
    """What one run of a checkpoint job did (create_checkpoint / delete_checkpoint return it)."""

    READY = "ready"  # the tag holds the snapshot
    FAILED = "failed"  # the checkpoint is FAILED (the reason is recorded)
    DELETED = "deleted"  # the tag and the row are gone
    BUSY = "busy"  # another attempt holds a live claim (until retry_at)
    DONE = "done"  # nothing left to do
    GONE = "gone"  # no such checkpoint


# the claim statuses that end a run without runtime work, as outcomes
_UNCLAIMED = {
    CheckpointClaimStatus.DONE: CheckpointOutcomeStatus.DONE,
    CheckpointClaimStatus.GONE: CheckpointOutcomeStatus.GONE,
}


@dataclass(frozen=True)
class CheckpointOutcome:
    status: CheckpointOutcomeStatus
    retry_at: datetime | None = None


async def run_checkpoint(store: Store, runtime: Substrate, checkpoint_id: UUID, lifetime: float) -> CheckpointOutcome:
    """Create the tag of a CREATING checkpoint, or remove the tag of a DELETING one."""
    executor = uuid4()
    started = time.monotonic()
    claim = await store.claim_checkpoint(checkpoint_id, executor, lifetime)
    if claim.status == CheckpointClaimStatus.BUSY:
        return CheckpointOutcome(CheckpointOutcomeStatus.BUSY, claim.expires_at)
    if claim.status != CheckpointClaimStatus.CLAIMED:
        return CheckpointOutcome(_UNCLAIMED[claim.status])
    c = claim.checkpoint
    assert c is not None
    failure: str | None = None
    tag_uri: str | None = None
    try:
        async with asyncio.timeout(lifetime - (time.monotonic() - started)):
            if c.state == CheckpointState.DELETING:
                try:
                    await runtime.delete_tag(c.actor_atespace, c.tag_name)
                except SubstrateError as e:
                    if e.code != Code.NOT_FOUND:
                        raise
            else:
                made = await tag_snapshot(
                    runtime, c.actor_atespace, c.tag_name, c.actor_name, c.actor_uid, c.snapshot_generation
                )
                if isinstance(made, str):
                    failure = made
                else:
                    tag_uri = made.snapshot_uri  # the tag's own copy (a real Substrate's has its own URI)
    except SubstrateError as e:
        if e.code in TRANSIENT:
            await detached(with_db_retry(lambda: store.release_checkpoint(checkpoint_id, executor)))
            raise
        failure = f"the runtime refused the tag: {e.message}"
    except TimeoutError:
        await detached(with_db_retry(lambda: store.release_checkpoint(checkpoint_id, executor)))
        raise SubstrateError(Code.DEADLINE_EXCEEDED, "checkpoint attempt exceeded its claim lifetime") from None
    done = await detached(with_db_retry(lambda: store.finish_checkpoint(checkpoint_id, executor, failure, tag_uri)))
    if done is None:
        return CheckpointOutcome(CheckpointOutcomeStatus.DELETED)
    if failure:
        log.warning("checkpoint %s failed: %s", checkpoint_id, failure, extra={"session_id": str(c.session_id)})
        return CheckpointOutcome(CheckpointOutcomeStatus.FAILED)
    return CheckpointOutcome(CheckpointOutcomeStatus.READY)


async def tag_snapshot(runtime: Substrate, atespace: str, tag: str, actor: str, uid: str, generation: int) -> Tag | str:
    """Tag the Actor's current snapshot. Returns the tag as the runtime answered it (its snapshot
    URI is the tag's own copy's), or a failure message when the tag would not hold exactly the
    recorded generation.

    A tag of that name that already exists (an earlier attempt whose answer was lost, or anything
    else) is adopted only when it is provably the one this checkpoint wants (`_provably_ours`);
    otherwise it is deleted, which also cleans up a partial attempt, and created again while the
    Actor is still suspended (the Substrate's own retry rule for a failed or timed-out CreateTag)."""
    try:
        made = await runtime.create_tag(atespace, tag, actor, uid)
    except SubstrateError as e:
        if e.code != Code.ALREADY_EXISTS:
            raise
        found = await runtime.get_tag(atespace, tag)
        if await _provably_ours(runtime, found, atespace, actor, uid, generation):
            made = found
        else:
            log.info("tag %s/%s exists but is not provably this checkpoint's: deleting and tagging again",
                     atespace, tag)
            try:
                await runtime.delete_tag(atespace, tag)
            except SubstrateError as gone:
                if gone.code != Code.NOT_FOUND:
                    raise
            made = await runtime.create_tag(atespace, tag, actor, uid)
    if (made.actor_uid and made.actor_uid != uid) or made.snapshot_generation != generation:
        await runtime.delete_tag(atespace, tag)  # never keep a tag on another snapshot
        return (
            f"the actor's snapshot is generation {made.snapshot_generation}, not the recorded {generation}; "
            "create a new checkpoint"
        )
    return await _completed(runtime, made)


_USABLE = (SnapshotStatus.COMPLETED, SnapshotStatus.IN_PROGRESS)
TAG_POLL_FIRST = 0.05  # seconds before the first look at a tag whose copy is still being written
TAG_POLL_MAX = 1.0


async def _completed(runtime: Substrate, made: Tag) -> Tag:
    """The tag once its snapshot copy is COMPLETED (SNAP-1: only a COMPLETED snapshot counts; a
    real Substrate answers CreateTag while its copy of the snapshot is still IN_PROGRESS, with no
    URI yet): looked at again, backing off, until it is. The caller's deadline bounds the wait (a
    checkpoint's claim lifetime, a turn pin's bound); a tag that ends neither way is not recorded
    as made."""
    delay = TAG_POLL_FIRST
    while made.status != SnapshotStatus.COMPLETED:
        await asyncio.sleep(delay)
        delay = min(delay * 2, TAG_POLL_MAX)
        made = await runtime.get_tag(made.atespace, made.name)
    return made


async def _provably_ours(runtime: Substrate, found: Tag, atespace: str, actor: str, uid: str, generation: int) -> bool:
    """Whether an existing tag holds exactly what this checkpoint tags: the recorded generation of
    this Actor, COMPLETED or still being copied (IN_PROGRESS: adopted, then waited for). A runtime
    that names the source Actor's UID proves it directly; a real Substrate does not, and then the
    tag must come from an Actor of that name, under the template of the Actor recorded now (read:
    it must still be the recorded UID and suspended)."""
    if found.snapshot_generation != generation or found.status not in _USABLE:
        return False
    if found.actor_uid:
        return found.actor_uid == uid
    if found.actor_name != actor or not found.template_uid:
        return False
    current = await runtime.get_actor(atespace, actor)
    if current.uid != uid or current.state != ActorState.SUSPENDED:
        return False
    if max((snap.generation for snap in current.snapshots), default=0) != generation:
        return False  # the tag cannot be proven a copy of the Actor's current snapshot
    template_atespace, _, template_name = current.template.partition("/")
    template = await runtime.get_actor_template(template_atespace, template_name)
    return template.uid == found.template_uid


async def refresh_snapshot(store: Store, runtime: Substrate, session_id: UUID, generation: int) -> bool:
    """Record a pending snapshot generation once it is COMPLETED. Raises while still pending (the
    job retries); returns False when the Session moved on."""
    session = await store.session_by_id(session_id)
    if (
        session is None
        or session.snapshot_generation != generation
        or session.snapshot_status != SnapshotState.IN_PROGRESS
    ):
        return False
    actor = await runtime.get_actor(session.actor_atespace, session.actor_name)
    snap = next((s for s in actor.snapshots if s.generation == generation), None)
    if snap is None:
        return False
    picked = pick_snapshot([snap])
    if picked is None or picked["status"] != SnapshotState.COMPLETED:
        raise SubstrateError(Code.UNAVAILABLE, f"snapshot generation {generation} is still being written")
    return await store.record_snapshot_completed(session_id, generation, picked["uri"], picked["bytes"])
