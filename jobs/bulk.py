"""Job: run a bulk action, a page of Sessions per transaction (schema/22_fleet.sql, bulk_step).

Each page admits its Sessions' operations through their own admission (their execute_operation jobs
do the runtime work, as for any call); a failure retries from the last page done.
"""

from __future__ import annotations

from uuid import UUID

from procrastinate import JobContext
from sessionq.jobs.deps import deps

from sessionq.models import BulkActionState

PAGE = 50  # Sessions locked by one transaction of the bulk action


async def run_bulk_action(context: JobContext, bulk_id: str) -> int:
    """Step through the action until DONE; the number of Sessions it processed in all."""
    d = deps(context)
    while True:
        action = await d.store.bulk_step(UUID(bulk_id), PAGE)
        if action is None or action.state == BulkActionState.DONE:
            return action.processed if action is not None else 0
