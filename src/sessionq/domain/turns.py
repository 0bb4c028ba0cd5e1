"""Dispatching a turn to its Actor: resume if suspended, invoke, let the Actor settle.

The frontend only admits (sessionq.admit_turn records the dispatch reservation and queues the
``dispatch_turn`` job). The job runs here, on a worker: it waits while idle work is claimed
(claimed quiescence blocks new execution), resumes the Actor when it is not running, and
delivers the message. The Actor reports through the task store and settles the task before
`invoke` returns. If anything fails the dispatch is ended with fail_dispatch: an unfinished task
becomes FAILED and abandoned (never continued), and the waiting caller is told.

What fail_dispatch records is shown to the user (the FAILED task's status, the SendMessage answer):
one of the fixed reasons below, never the runtime's message, which names Actors, atespaces and
internal RPCs; that detail goes to the log, with the Session's id. One exception: a resume the
runtime answers DATA_LOSS (the Actor's snapshot could not be restored, `RESTORE_FAILED`) fails the
turn with the runtime's own reason, which a runtime words for the user (it names no path or secret
of the runtime's), and the Session shows it (Failure reason RestoreFailed) until a resume succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Literal
from uuid import UUID

from sessionq import errors
from sessionq.db.store import Store
from sessionq.domain import workload
from sessionq.models import OperationKind, SessionState, TurnFailure
from sessionq.runtime.base import RESTORE_FAILED, ActorState, Code, InvokeRequest, Substrate, SubstrateError

log = logging.getLogger(__name__)

# user-facing reasons of a failed dispatch (see the module docstring)
RUNTIME_FAILED = "the agent failed while running the turn"
DEADLINE_EXCEEDED = "the turn exceeded its dispatch deadline"
RESTORE_MESSAGE_LIMIT = 300  # characters of a restore failure's reason kept

_secrets: weakref.WeakKeyDictionary[Store, str] = weakref.WeakKeyDictionary()

# what one run of the dispatch_turn job did
DispatchOutcome = Literal["nothing", "failed", "running", "superseded", "done"]


async def workload_credential(store: Store, session_id: UUID) -> str:
    """The Session's workload credential, which the Actor gets with the call (the secret is read
    once per store)."""
    secret = _secrets.get(store)
    if secret is None:
        secret = _secrets[store] = await store.secret("workload")
    return workload.token_for(secret, session_id)


def restore_failure(error: SubstrateError) -> str:
    """What the user is told of a resume the runtime answered DATA_LOSS: its reason, short."""
    message = error.message if error.message.startswith(RESTORE_FAILED) else f"{RESTORE_FAILED}: {error.message}"
    return errors.clip(message, RESTORE_MESSAGE_LIMIT)


async def dispatch_turn(store: Store, runtime: Substrate, session_id: UUID) -> DispatchOutcome:
    """Deliver the Session's current turn, if one is reserved and not yet delivered."""
    session = await store.session_by_id(session_id)
    if session is None or session.dispatch_id is None:
        return "nothing"
    dispatch_id = session.dispatch_id
    if session.state != SessionState.READY or session.operation != OperationKind.NONE:
        # a lifecycle operation (a Delete, say) came after the turn was admitted: never wake the Actor for it
        await store.fail_dispatch(session_id, dispatch_id, f"the session is {session.state.lower()}", False)
        return "failed"
    if session.dispatch_task_id is not None and session.active_task_id == session.dispatch_task_id:
        return "running"  # already delivered: the Actor is working on it
    extra = {"session_id": str(session_id)}
    deadline = session.dispatch_expires_at.timestamp() if session.dispatch_expires_at else time.time() + 600
    # claimed idle work blocks new execution until its outcome is recorded
    while session.idle_executor is not None:
        if time.time() >= deadline:
            await store.fail_dispatch(session_id, dispatch_id, "the session's actor stayed busy quiescing", False)
            return "failed"
        await asyncio.sleep(0.05)
        session = await store.session_by_id(session_id)
        if session is None or session.dispatch_id != dispatch_id:
            return "superseded"
    issued = False
    credential = await workload_credential(store, session_id)
    try:
        async with asyncio.timeout(max(deadline - time.time(), 0.1)):
            actor = await runtime.get_actor(session.actor_atespace, session.actor_name)
            if session.actor_uid and actor.uid != session.actor_uid:
                raise SubstrateError(
                    Code.FAILED_PRECONDITION, f"actor {session.actor_name} was replaced; it is never adopted"
                )
            if actor.state != ActorState.RUNNING:
                issued = True
                try:
                    started = time.monotonic()
                    actor, _ = await runtime.resume_actor(session.actor_atespace, session.actor_name, actor.uid)
                    await store.record_resume(session_id, time.monotonic() - started)  # usage (45_usage.sql)
                except SubstrateError as e:
                    if e.code != Code.DATA_LOSS:
                        raise
                    log.warning("dispatch failed: %s: %s", e.code.name, e.message, extra=extra)
                    message = restore_failure(e)
                    await store.record_turn_failure(session_id, dispatch_id, TurnFailure.RESTORE_FAILED, message)
                    await store.fail_dispatch(session_id, dispatch_id, message, issued)
                    return "failed"
                if session.failure_reason == TurnFailure.RESTORE_FAILED:
                    await store.clear_turn_failure(session_id, TurnFailure.RESTORE_FAILED)
            issued = True
            await runtime.invoke(
                session.actor_atespace,
                session.actor_name,
                actor.uid,
                InvokeRequest(
                    str(session_id), str(dispatch_id), session.dispatch_message or {}, session.dispatch_task_id,
                    credential=credential,
                ),
            )
    except (SubstrateError, TimeoutError) as e:
        detail = f"{e.code.name}: {e.message}" if isinstance(e, SubstrateError) else DEADLINE_EXCEEDED
        if not await _still_dispatched(store, session_id, dispatch_id):
            # the Actor settled the turn through the task store before its answer to the call came
            # back, and the idle suspension that followed ended its process: nothing failed
            log.debug("dispatch ended after its turn settled: %s", detail, extra=extra)
            return "done"
        log.warning("dispatch failed: %s", detail, extra=extra)
        await store.fail_dispatch(
            session_id, dispatch_id, RUNTIME_FAILED if isinstance(e, SubstrateError) else DEADLINE_EXCEEDED, issued
        )
        return "failed"
    if await _still_dispatched(store, session_id, dispatch_id):
        await store.fail_dispatch(session_id, dispatch_id, "the agent ended the turn without settling it", True)
        return "failed"
    return "done"


async def _still_dispatched(store: Store, session_id: UUID, dispatch_id: UUID) -> bool:
    """Whether the Session still waits for this dispatch's turn (not settled, superseded or gone)."""
    after = await store.session_by_id(session_id)
    return after is not None and after.dispatch_id == dispatch_id
