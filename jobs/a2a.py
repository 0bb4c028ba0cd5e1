"""Jobs of A2A: carry out a cancel intent (queue ``a2a``), deliver a task's push notifications
(queue ``push``, of which a worker runs at most a2a.push.concurrency jobs at a time)."""

from __future__ import annotations

from procrastinate import JobContext
from sessionq.jobs.deps import deps

from sessionq.domain import cancel, push


async def cancel_task(context: JobContext, task_id: str) -> str | None:
    """Tell the Actor to stop the task and end it CANCELED (queueing lock cancel:<task id>)."""
    d = deps(context)
    outcome = await cancel.cancel_task(d.store, d.runtime, task_id)
    return outcome.value if outcome is not None else None


async def deliver_push(context: JobContext, task_id: str) -> int:
    """POST the task's pending notifications in order (queueing lock push:<task id>), each within
    a2a.push.timeout in all; a failed attempt raises, and procrastinate retries with exponential backoff."""
    d = deps(context)
    cfg = d.settings.a2a
    return await push.deliver(
        d.store,
        task_id,
        policy=push.TargetPolicy(allow_private=cfg.push.allow_private_targets),
        timeout=cfg.push.timeout,
        max_attempts=cfg.push.max_attempts,
    )
