"""Jobs of A2A: carry out a cancel intent, deliver a task's push notifications (queue ``a2a``)."""

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
    """POST the task's pending notifications in order (queueing lock push:<task id>); a failed
    attempt raises, and procrastinate retries with exponential backoff."""
    d = deps(context)
    cfg = d.settings.a2a
    return await push.deliver(
        d.store,
        task_id,
        allow_private=cfg.push.allow_private_targets,
        timeout=cfg.push.timeout,
        max_attempts=cfg.push.max_attempts,
    )
