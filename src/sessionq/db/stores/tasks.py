"""Turns and the task store, and automatic quiescence (schema/30_tasks.sql)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID

from psycopg.types.json import Jsonb

from sessionq.db.notify import Channel
from sessionq.db.stores.base import StoreBase, payload_hash
from sessionq.models import (
    BusyPolicy,
    QuiescenceFailureReason,
    Session,
    Task,
    TaskPhase,
    TurnFailure,
)


@dataclass(frozen=True)
class IdleWork:
    """One look of a quiescence worker (sessionq.claim_idle_work): the Sessions it claimed; `more`:
    another boundary is due now (look again, wake a sibling); `blocked`: nothing claimed though
    unclaimed work waits on something (look again within a second); `due_in`: seconds until an
    uncertain claim or a warm boundary falls due (None: neither waits, or `more`)."""

    claimed: list[Session]
    more: bool
    blocked: bool
    due_in: float | None


@dataclass(frozen=True)
class TurnAdmission:
    """What admit_turn did: the Session's row, and the task of the queued turn when it was queued."""

    session: Session
    queued_task_id: str | None


class TaskStore(StoreBase):
    async def admit_turn(
        self,
        session_id: UUID,
        caller: str,
        share_hash: str | None,
        message: dict[str, Any],
        task_id: str | None,
        ttl: float,
    ) -> Session:
        """Admit a turn with the busy policy reject (the Agent's own when it has one)."""
        return (await self.send_turn(session_id, caller, share_hash, message, task_id, ttl)).session

    async def send_turn(
        self,
        session_id: UUID,
        caller: str,
        share_hash: str | None,
        message: dict[str, Any],
        task_id: str | None,
        ttl: float,
        policy: BusyPolicy | None = None,
        queue_limit: int = 100,
    ) -> TurnAdmission:
        """Admit a message as a turn under its busy policy (None: the Agent's, else reject): dispatched
        now, or queued behind the running turn (queued_task_id: its SUBMITTED task)."""
        value = await self._value(
            "SELECT sessionq.admit_turn(%s, %s, %s, %s, %s, %s, %s, %s)",
            (session_id, caller, share_hash, Jsonb(message), task_id, ttl,
             policy.value if policy is not None else None, queue_limit),
        )
        return TurnAdmission(Session.from_json(value), value.get("queued_task_id"))

    async def queued_turns(self, session_id: UUID) -> list[str]:
        """The task ids of a Session's queued turns, in the order they will run."""
        rows = await self._rows(
            "SELECT task_id FROM sessionq.queued_turns WHERE session_id = %s ORDER BY position", (session_id,)
        )
        return [r["task_id"] for r in rows]

    async def task_create(self, session_id: UUID, task_id: str, task: dict[str, Any], dispatch_id: UUID | None) -> int:
        return int(
            await self._value(
                "SELECT sessionq.task_create(%s, %s, %s, %s, %s)",
                (session_id, task_id, Jsonb(task), dispatch_id, payload_hash(task, None, dispatch_id)),
            )
        )

    async def task_update(
        self,
        session_id: UUID,
        task_id: str,
        task: dict[str, Any],
        expected_version: int,
        event: dict[str, Any] | None,
        dispatch_id: UUID | None,
    ) -> int:
        return await self._task_write("task_update", session_id, task_id, task, expected_version, event, dispatch_id)

    async def task_finish(
        self,
        session_id: UUID,
        task_id: str,
        task: dict[str, Any],
        expected_version: int,
        event: dict[str, Any] | None,
        dispatch_id: UUID | None,
    ) -> int:
        """The turn's final update and its settlement in one transaction (sessionq.task_finish)."""
        return await self._task_write("task_finish", session_id, task_id, task, expected_version, event, dispatch_id)

    async def _task_write(
        self,
        function: Literal["task_update", "task_finish"],
        session_id: UUID,
        task_id: str,
        task: dict[str, Any],
        expected_version: int,
        event: dict[str, Any] | None,
        dispatch_id: UUID | None,
    ) -> int:
        """An update of a task by one of the two procedures that take the same arguments; the version
        it makes."""
        return int(
            await self._value(
                f"SELECT sessionq.{function}(%s, %s, %s, %s, %s, %s, %s)",
                (
                    session_id,
                    task_id,
                    Jsonb(task),
                    expected_version,
                    Jsonb(event) if event is not None else None,
                    dispatch_id,
                    payload_hash(task, event, dispatch_id),
                ),
            )
        )

    async def task_settle(self, session_id: UUID, task_id: str, version: int) -> None:
        await self._rows("SELECT sessionq.task_settle(%s, %s, %s)", (session_id, task_id, version))

    async def fail_dispatch(self, session_id: UUID, dispatch_id: UUID, message: str, issued: bool) -> None:
        await self._rows("SELECT sessionq.fail_dispatch(%s, %s, %s, %s)", (session_id, dispatch_id, message, issued))

    async def record_turn_failure(self, session_id: UUID, dispatch_id: UUID, reason: TurnFailure, message: str) -> None:
        """Show on the Session why the dispatch's turn could not start (sessionq.record_turn_failure)."""
        await self._rows(
            "SELECT sessionq.record_turn_failure(%s, %s, %s, %s)", (session_id, dispatch_id, reason.value, message)
        )

    async def clear_turn_failure(self, session_id: UUID, reason: TurnFailure) -> None:
        """A resume succeeded: the Session no longer shows that failure (sessionq.clear_turn_failure)."""
        await self._rows("SELECT sessionq.clear_turn_failure(%s, %s)", (session_id, reason.value))

    async def get_task(self, task_id: str) -> Task | None:
        value = await self._value("SELECT sessionq.get_task(%s)", (task_id,))
        return Task.from_json(value) if value else None

    async def task_of_dispatch(self, session_id: UUID, dispatch_id: UUID) -> Task | None:
        rows = await self._rows(
            "SELECT to_jsonb(t) AS t FROM sessionq.tasks t WHERE session_id = %s AND dispatch_id = %s",
            (session_id, dispatch_id),
        )
        return Task.from_json(rows[0]["t"]) if rows else None

    async def list_tasks(self, session_id: UUID, state: str | None, after_seq: int | None, limit: int) -> list[Task]:
        rows = await self._rows(
            "SELECT to_jsonb(t) AS t FROM sessionq.tasks t WHERE session_id = %s"
            " AND (%s::text IS NULL OR state = %s) AND (%s::int IS NULL OR seq < %s)"
            " ORDER BY seq DESC LIMIT %s",
            (session_id, state, state, after_seq, after_seq, limit),
        )
        return [Task.from_json(r["t"]) for r in rows]

    async def count_tasks(self, session_id: UUID, state: str | None) -> int:
        return int(
            await self._value(
                "SELECT count(*) FROM sessionq.tasks WHERE session_id = %s AND (%s::text IS NULL OR state = %s)",
                (session_id, state, state),
            )
        )

    async def wait_for_turn(
        self, session_id: UUID, dispatch_id: UUID, timeout: float
    ) -> tuple[Literal["task", "failed", "pending"], Any]:
        """Wait until the turn of a dispatch ends: ("task", Task) once its task is published in a
        final or waiting state, ("failed", message) if the dispatch failed, ("pending", None) on
        timeout. Woken by NOTIFY sessionq_task."""
        woke = asyncio.Event()

        def on_notify(_payload: str | None) -> None:
            woke.set()

        unsubscribe = (
            self.listener.subscribe_key(Channel.TASK, str(session_id), on_notify) if self.listener else None
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                woke.clear()
                task = await self.task_of_dispatch(session_id, dispatch_id)
                if task is not None and task.phase in (TaskPhase.SETTLED, TaskPhase.ABANDONED):
                    return ("task", task)
                session = await self.session_by_id(session_id)
                if session is None:
                    return ("failed", "the session no longer exists")
                failure = session.dispatch_failure or {}
                if failure.get("dispatch_id") == str(dispatch_id):
                    return ("failed", failure.get("message"))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return ("pending", None)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), timeout=min(remaining, 1.0 if self.listener else 0.05))
        finally:
            if unsubscribe:
                unsubscribe()


    async def claim_idle(self, executor: UUID, keep_warm: float = 0.0) -> Session | None:
        """Claim the oldest idle boundary past its keep-warm window (the Agent's keepWarm, else `keep_warm` s)."""
        value = await self._value("SELECT sessionq.claim_idle(%s, %s)", (executor, keep_warm))
        return Session.from_json(value) if value else None

    async def turn_waits_for_input(self, session_id: UUID) -> bool:
        return bool(await self._value("SELECT sessionq.turn_waits_for_input(%s)", (session_id,)))

    async def finish_pause(self, session_id: UUID, boundary: UUID, executor: UUID, ttl: float) -> Session:
        """The claim holder paused the Actor: a new boundary falls due in `ttl` seconds (sessionq.finish_pause)."""
        value = await self._value(
            "SELECT sessionq.finish_pause(%s, %s, %s, %s)", (session_id, boundary, executor, ttl)
        )
        return Session.from_json(value)

    async def idle_work_blocked(self, keep_warm: float = 0.0) -> bool:
        return bool(await self._value("SELECT sessionq.idle_work_blocked(%s)", (keep_warm,)))

    async def finish_idle(
        self, session_id: UUID, boundary: UUID, executor: UUID, snapshot: dict[str, Any] | None
    ) -> Session:
        value = await self._value(
            "SELECT sessionq.finish_idle(%s, %s, %s, %s)", (session_id, boundary, executor, Jsonb(snapshot or {}))
        )
        return Session.from_json(value)

    async def record_quiescence_failure(
        self, session_id: UUID, boundary: UUID, executor: UUID, reason: QuiescenceFailureReason, message: str
    ) -> Session:
        """The idle claim holder's suspend failed for good: record why (the claim stays)."""
        value = await self._value(
            "SELECT sessionq.record_quiescence_failure(%s, %s, %s, %s, %s)",
            (session_id, boundary, executor, reason, message),
        )
        return Session.from_json(value)

    async def idle_attempt_failed(
        self,
        session_id: UUID,
        boundary: UUID,
        executor: UUID,
        reason: QuiescenceFailureReason,
        message: str,
        *,
        not_sent: bool,
        retry_after: float,
    ) -> Session:
        """The idle claim holder's attempt ended without an outcome: record why and make the claim
        uncertain (it stays; a quiescence worker takes it over after `retry_after` seconds)."""
        value = await self._value(
            "SELECT sessionq.idle_attempt_failed(%s, %s, %s, %s, %s, %s, %s)",
            (session_id, boundary, executor, reason, message, not_sent, retry_after),
        )
        return Session.from_json(value)

    async def take_over_uncertain_idle(self, executor: UUID, lease: float) -> Session | None:
        value = await self._value("SELECT sessionq.take_over_uncertain_idle(%s, %s)", (executor, lease))
        return Session.from_json(value) if value else None

    async def mark_lapsed_idle_claims(self, lease: float) -> int:
        return int(await self._value("SELECT sessionq.mark_lapsed_idle_claims(%s)", (lease,)))

    async def idle_work_state(self, keep_warm: float = 0.0) -> tuple[bool, float | None]:
        """(unclaimed idle work is blocked, seconds until an uncertain claim is due or a warm idle
        boundary becomes claimable, whichever comes first; None when neither waits)."""
        value = await self._value("SELECT to_jsonb(w) FROM sessionq.idle_work_state(%s) w", (keep_warm,))
        due = [float(v) for v in (value["retry_in"], value["warm_in"]) if v is not None]
        return bool(value["blocked"]), min(due) if due else None

    async def claim_idle_work(self, executor: UUID, keep_warm: float = 0.0, limit: int = 1) -> IdleWork:
        """Claim up to `limit` idle boundaries and learn what remains, in one statement
        (sessionq.claim_idle_work)."""
        value = await self._value("SELECT sessionq.claim_idle_work(%s, %s, %s)", (executor, keep_warm, limit))
        due = [float(v) for v in (value.get("retry_in"), value.get("warm_in")) if v is not None]
        return IdleWork([Session.from_json(v) for v in value["claimed"] or ()], bool(value["more"]),
                        bool(value["blocked"]), min(due) if due else None)

    async def finish_idle_many(
        self, items: Sequence[tuple[UUID, UUID, UUID, dict[str, Any] | None, dict[str, Any] | None]]
    ) -> dict[UUID, tuple[Session | None, bool | None]]:
        """finish_idle for several claims in one statement: (session, boundary, executor, snapshot,
        turn pin to finish or None) each. Maps each Session to its row, None where that executor no
        longer holds the claim (nothing recorded), and whether its pin was finished (None: no pin)."""
        value = await self._value("SELECT sessionq.finish_idle_many(%s)", (Jsonb([
            {"session": str(s), "boundary": str(b), "executor": str(e), "snapshot": snap or {},
             **({"pin": pin} if pin is not None else {})}
            for s, b, e, snap, pin in items
        ]),))
        return {UUID(k): (Session.from_json(v["row"]) if v["row"] else None, v["pinned"]) for k, v in value.items()}

    async def take_over_idle_claim(self, session_id: UUID, executor: UUID, lease: float) -> Session | None:
        value = await self._value(
            "SELECT sessionq.take_over_idle_claim(%s, %s, %s)", (session_id, executor, lease)
        )
        return Session.from_json(value) if value else None

    async def record_snapshot_completed(
        self, session_id: UUID, generation: int, uri: str, size_bytes: int | None = None
    ) -> bool:
        return bool(
            await self._value(
                "SELECT sessionq.record_snapshot_completed(%s, %s, %s, %s)", (session_id, generation, uri, size_bytes)
            )
        )
