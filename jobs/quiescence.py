"""Job: retry the claimed idle work of a Session whose quiescence worker died (operator-requested)."""

from __future__ import annotations

from typing import Literal
from uuid import UUID

from procrastinate import JobContext
from sessionq.jobs.deps import deps

from sessionq.domain.quiescence import QuiescencePool, retry_claimed


async def retry_quiescence(context: JobContext, session_id: str) -> Literal["nothing", "recorded"]:
    """Operator-requested (sessionq.retry_quiescence): finish a claimed idle boundary whose worker died."""
    d = deps(context)
    pool = QuiescencePool(d.store, d.runtime, d.url, workers=1, listen=False,
                          attempt_timeout=d.settings.sessions.quiescence_attempt_timeout,
                          turn_snapshots=d.settings.sessions.turn_snapshots)
    return await retry_claimed(pool, UUID(session_id))
