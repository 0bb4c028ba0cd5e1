"""A2A CancelTask, executed: tell the Actor, then end the task CANCELED.

The API only admits the intent (sessionq.admit_cancel: a row in task_cancels and the cancel_task
job). The job runs here: sessionq.finish_cancel first publishes the task CANCELED and ends the turn
under the Session row lock (unless the task reached a final state on its own first), so that
nothing the Actor still writes to the task is accepted and the dispatch job, when the Actor's turn
returns, finds the turn already ended; then the runtime is asked to stop the turn
(`Substrate.cancel_turn`, with no transaction open) and sessionq.cancel_told records it. A runtime
failure other than a missing Actor raises, and the job retries; every step is idempotent. The
ended turn's idle boundary is not claimed (the Actor not suspended) until cancel_told records the
telling (sessionq.claim_idle, schema/30_tasks.sql): otherwise quiescence could
stop the process before the CancelTask reached it.
"""

from __future__ import annotations

import logging
from uuid import UUID

from sessionq.db.store import Store
from sessionq.domain.turns import workload_credential
from sessionq.models import CancelOutcome
from sessionq.runtime.base import Code, Substrate, SubstrateError

log = logging.getLogger(__name__)


async def cancel_task(store: Store, runtime: Substrate, task_id: str) -> CancelOutcome | None:
    """Carry out the pending cancel of a task; returns finish_cancel's outcome (None: nothing pending)."""
    target = await store.cancel_target(task_id)
    if target is None:
        return None
    outcome = await store.finish_cancel(task_id)
    if target.get("actor_uid"):
        try:
            session_id = target["session_id"]
            await runtime.cancel_turn(
                target["actor_atespace"], target["actor_name"], target["actor_uid"], str(session_id), task_id,
                credential=await workload_credential(store, UUID(str(session_id))),
            )
        except SubstrateError as e:
            if e.code not in (Code.NOT_FOUND, Code.FAILED_PRECONDITION):
                raise  # the job retries
            # no such Actor (or another one of that name): nothing runs the turn any more
            log.info("cancel of task %s: the actor is gone (%s)", task_id, e.code.name)
    await store.cancel_told(task_id)
    return outcome
