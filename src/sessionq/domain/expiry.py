"""Idle expiration: a leader-only sweep, once a minute, in bounded pages, with a bounded number
of deletions in flight.

`sweep()` runs in the ``expire_idle_sessions`` periodic job. Only the holder of the ``expiry``
advisory lock sweeps; the others return at once. Each candidate is rechecked and admitted under
the Session row lock by sessionq.expire_session (an ordinary DELETE with reason idle_timeout),
then deleted through the normal operation and claim machinery (OperationExecutor). Admitted
deletions that failed or were interrupted are resumed by later sweeps, whatever the TTL now.

Sandboxes (schema/25_sandboxes.sql) expire at their own expires_at, which activity never
extends: with `sandboxes`, the same sweep pages through the expired ones and deletes them by the
same bounded workflow (expire_session rechecks a Sandbox against its expires_at).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from sessionq import metrics
from sessionq.db.leader import leadership
from sessionq.db.store import Store
from sessionq.domain.operations import OperationExecutor, OutcomeStatus
from sessionq.models import ExpiryOutcome, RowKind

log = logging.getLogger("sessionq.expiry")

PAGE = 100
IN_FLIGHT = 4


@dataclass
class SweepResult:
    leader: bool
    scanned: int = 0
    admitted: int = 0
    expired: int = 0
    failed: int = 0
    outcomes: dict[ExpiryOutcome, int] = field(default_factory=dict)


async def sweep(
    store: Store,
    executor: OperationExecutor,
    url: str,
    ttl: float,
    holder: str,
    *,
    page: int = PAGE,
    in_flight: int = IN_FLIGHT,
    sandboxes: bool = False,
) -> SweepResult:
    """One sweep. ttl <= 0 disables the idle expiry of Sessions; without `sandboxes` it disables
    expiry entirely (no sweep, no retries). With `sandboxes`, expired Sandboxes are deleted too."""
    if ttl <= 0 and not sandboxes:
        return SweepResult(leader=False)
    async with leadership(url, "expiry", holder) as leader:
        if not leader:
            return SweepResult(leader=False)
        result = SweepResult(leader=True)
        limit = asyncio.Semaphore(in_flight)
        tasks: list[asyncio.Task[None]] = []

        def deleter(kind: RowKind) -> Callable[[UUID, float | None], Coroutine[Any, Any, None]]:
            async def delete(session_id: UUID, idle_seconds: float | None) -> None:
                async with limit:
                    await _delete(store, executor, session_id, idle_seconds, result, kind)

            return delete

        # 1. resume admitted idle deletions (failed preparation, lost worker, ...): of Sessions only
        # while their idle expiry is on (0s disables its retries too), of Sandboxes with `sandboxes`
        kinds = [k for k, on in ((RowKind.SESSION, ttl > 0), (RowKind.SANDBOX, sandboxes)) if on]
        for kind in kinds:
            after: UUID | None = None
            while True:
                ids = await store.idle_deletions_to_resume(after, page, [kind])
                for sid in ids:
                    outcome = await store.expire_session(sid, ttl)
                    result.outcomes[outcome.outcome] = result.outcomes.get(outcome.outcome, 0) + 1
                    if outcome.outcome == ExpiryOutcome.RESUMED:
                        tasks.append(asyncio.create_task(deleter(kind)(sid, None)))
                if len(ids) < page:
                    break
                after = ids[-1]
        # 2. new candidates, page by page (a full page continues at once): idle Sessions, then
        # expired Sandboxes
        pages: list[tuple[RowKind, Callable[[tuple[Any, UUID] | None], Awaitable[list[tuple[UUID, Any]]]]]] = []
        if ttl > 0:
            pages.append((RowKind.SESSION, lambda key: store.idle_candidates(ttl, key, page)))
            # Sessions with their own idle TTL (22_fleet.sql), by their own deadline
            pages.append((RowKind.SESSION, lambda key: store.own_ttl_candidates(key, page)))
        if sandboxes:
            pages.append((RowKind.SANDBOX, lambda key: store.sandbox_expiry_candidates(key, page)))
        for kind, next_page in pages:
            await _admit_pages(store, next_page, ttl, page, result, tasks, deleter(kind))
        if tasks:
            await asyncio.gather(*tasks)
        return result


async def _admit_pages(
    store: Store,
    next_page: Callable[[tuple[Any, UUID] | None], Awaitable[list[tuple[UUID, Any]]]],
    ttl: float,
    page: int,
    result: SweepResult,
    tasks: list[asyncio.Task[None]],
    delete: Callable[[UUID, float | None], Coroutine[Any, Any, None]],
) -> None:
    """Admit the deletion of every candidate, page by page, keyed by (clock, id); each admitted
    deletion runs as a task bounded by the sweep's in-flight limit."""
    key = None
    while True:
        candidates = await next_page(key)
        result.scanned += len(candidates)
        for sid, _since in candidates:
            outcome = await store.expire_session(sid, ttl)
            result.outcomes[outcome.outcome] = result.outcomes.get(outcome.outcome, 0) + 1
            if outcome.outcome == ExpiryOutcome.ADMITTED:
                result.admitted += 1
                tasks.append(asyncio.create_task(delete(sid, outcome.idle_seconds)))
        if len(candidates) < page:
            break
        key = candidates[-1][1], candidates[-1][0]


async def _delete(
    store: Store,
    executor: OperationExecutor,
    session_id: UUID,
    idle_seconds: float | None,
    result: SweepResult,
    kind: RowKind = RowKind.SESSION,
) -> None:
    try:
        outcome = await executor.run(session_id)
    except Exception as e:  # the next sweep resumes it
        result.failed += 1
        log.warning("idle deletion failed; a later sweep resumes it: %s", e, extra={"session_id": str(session_id)})
        return
    if outcome.status == OutcomeStatus.COMPLETED and outcome.session is None:
        result.expired += 1
        if kind == RowKind.SANDBOX:
            metrics.SANDBOX_EXPIRED.inc()
            log.debug("expired sandbox", extra={"session_id": str(session_id)})  # the row id of the Sandbox
        else:
            metrics.SESSION_EXPIRED.inc()
            log.debug("expired idle session", extra={"session_id": str(session_id), "idle_time": idle_seconds})
    elif outcome.status == OutcomeStatus.FAILED_PREPARATION:
        result.failed += 1


async def fail_stalled_turns(store: Store, timeout: float) -> int:
    """The periodic stalled-turn check: every turn whose task had no update for `timeout` seconds
    (sessions.stalledTurnTimeout; 0 disables) is failed with the reason stated, its Actor suspended
    by quiescence, the next queued turn started. Pages of 100 until none is left."""
    failed = 0
    if timeout <= 0:
        return 0
    while True:
        n = await store.fail_stalled_turns(timeout)
        failed += n
        if n < 100:
            break
    if failed:
        log.warning("failed %d stalled turn(s): no task update for %.0f s", failed, timeout)
        metrics.TURNS_STALLED.inc(failed)
    return failed
