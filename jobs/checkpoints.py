"""Jobs: tag a checkpoint's snapshot, remove a checkpoint's tag, record a pending snapshot, release a
turn pin."""

from __future__ import annotations

from uuid import UUID

from procrastinate import JobContext
from sessionq.jobs.deps import deps

from sessionq.domain.checkpoints import CheckpointOutcomeStatus, run_checkpoint
from sessionq.domain.checkpoints import refresh_snapshot as refresh
from sessionq.domain.turn_snapshots import release_turn_pin


async def _run(context: JobContext, checkpoint_id: str) -> CheckpointOutcomeStatus:
    """Another attempt holds a live claim: wait for it to lapse (its holder crashed), unless its
    completion or release makes the waiting job due sooner (sessionq.run_waiting_job)."""
    d = deps(context)
    outcome = await run_checkpoint(d.store, d.runtime, UUID(checkpoint_id), d.settings.sessions.claim_lifetime)
    if outcome.status == CheckpointOutcomeStatus.BUSY and outcome.retry_at is not None:
        await d.store.queue_checkpoint(UUID(checkpoint_id), outcome.retry_at)
    return outcome.status


async def create_checkpoint(context: JobContext, checkpoint_id: str) -> CheckpointOutcomeStatus:
    return await _run(context, checkpoint_id)


async def delete_checkpoint(context: JobContext, checkpoint_id: str) -> CheckpointOutcomeStatus:
    return await _run(context, checkpoint_id)


async def refresh_snapshot(context: JobContext, session_id: str, generation: int) -> bool:
    d = deps(context)
    return await refresh(d.store, d.runtime, UUID(session_id), int(generation))



async def release_turn_snapshot(context: JobContext, pin_id: str) -> bool:
    """Delete the tag of a released turn pin, then its row (retried while the runtime fails)."""
    d = deps(context)
    return await release_turn_pin(d.store, d.runtime, UUID(pin_id))
