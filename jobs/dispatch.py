"""Job: dispatch an admitted turn to its Actor (queue ``dispatch``)."""

from __future__ import annotations

from uuid import UUID

from procrastinate import JobContext
from sessionq.jobs.deps import deps

from sessionq.domain.turns import DispatchOutcome
from sessionq.domain.turns import dispatch_turn as dispatch


async def dispatch_turn(context: JobContext, session_id: str) -> DispatchOutcome:
    """Deliver the Session's current turn (queueing lock dispatch:<session id>)."""
    d = deps(context)
    return await dispatch(d.store, d.runtime, UUID(session_id))
