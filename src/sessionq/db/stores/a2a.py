"""A2A for users: task visibility, streams, cancel intents, push notifications (schema/35_a2a.sql)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from sessionq.db.stores.base import StoreBase
from sessionq.models import (
    CancelAdmission,
    CancelOutcome,
    Task,
)


class A2AStore(StoreBase):

    async def a2a_task(
        self, task_id: str, caller: str, share_hash: str | None, tenant: tuple[str, str] | None, need: str = "read"
    ) -> Task:
        """The task (of Agent `tenant`, when given) if the caller may see it with `need` access;
        SQ404 TASK_NOT_FOUND otherwise."""
        value = await self._value(
            "SELECT to_jsonb(sessionq.a2a_task(%s, %s, %s, %s, %s, %s))",
            (task_id, caller, share_hash, need, tenant[0] if tenant else None, tenant[1] if tenant else None),
        )
        return Task.from_json(value)

    async def a2a_list_tasks(
        self,
        caller: str,
        share_hash: str | None,
        namespace: str,
        agent: str,
        context: UUID | None,
        state: str | None,
        updated_after: datetime | None,
        before: tuple[datetime, str] | None,
        limit: int,
    ) -> tuple[list[dict[str, Any]], list[tuple[datetime, str]], int]:
        """(tasks, their (created_at, id) keys, the total that match) of one Agent, newest first."""
        rows = await self._rows(
            "SELECT * FROM sessionq.a2a_list_tasks(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (caller, share_hash, namespace, agent, context, state, updated_after,
             before[0] if before else None, before[1] if before else None, limit),
        )
        total = int(rows[0]["total"]) if rows else 0
        if not rows and before is not None:  # past the last page: the total of all that match
            first = await self._rows(
                "SELECT total FROM sessionq.a2a_list_tasks(%s, %s, %s, %s, %s, %s, %s, NULL, NULL, 1)",
                (caller, share_hash, namespace, agent, context, state, updated_after),
            )
            total = int(first[0]["total"]) if first else 0
        return [r["task"] for r in rows], [(r["created_at"], r["id"]) for r in rows], total

    async def a2a_task_snapshot(self, task_id: str) -> dict[str, Any] | None:
        """{task, state, phase, session_id, last_seq}: the published task and where its stream continues."""
        rows = await self._rows("SELECT * FROM sessionq.a2a_task_snapshot(%s)", (task_id,))
        return rows[0] if rows else None

    async def a2a_task_events(self, session_id: UUID, task_id: str, after: int) -> list[dict[str, Any]]:
        return await self._rows("SELECT * FROM sessionq.a2a_task_events(%s, %s, %s)", (session_id, task_id, after))

    async def admit_cancel(self, task_id: str, caller: str, share_hash: str | None) -> CancelAdmission:
        """Record a cancel intent: PENDING (the cancel_task job ends the task and tells the Actor) or FINISHED."""
        value = await self._value("SELECT sessionq.admit_cancel(%s, %s, %s)", (task_id, caller, share_hash))
        return CancelAdmission(value["outcome"])

    async def cancel_target(self, task_id: str) -> dict[str, Any] | None:
        return await self._value("SELECT sessionq.cancel_target(%s)", (task_id,))

    async def cancel_told(self, task_id: str) -> None:
        await self._rows("SELECT sessionq.cancel_told(%s)", (task_id,))

    async def finish_cancel(self, task_id: str) -> CancelOutcome | None:
        value = await self._value("SELECT sessionq.finish_cancel(%s)", (task_id,))
        return CancelOutcome(value) if value is not None else None

    async def create_push_config(
        self,
        task_id: str,
        caller: str,
        share_hash: str | None,
        config_id: str,
        url: str,
        token: str | None,
        scheme: str | None,
        credentials: str | None,
    ) -> dict[str, Any]:
        return await self._value(
            "SELECT sessionq.create_push_config(%s, %s, %s, %s, %s, %s, %s, %s)",
            (task_id, caller, share_hash, config_id, url, token, scheme, credentials),
        )

    async def list_push_configs(
        self, task_id: str, caller: str, share_hash: str | None, config_id: str | None = None
    ) -> list[dict[str, Any]]:
        rows = await self._rows(
            "SELECT c FROM sessionq.list_push_configs(%s, %s, %s, %s) AS c", (task_id, caller, share_hash, config_id)
        )
        return [r["c"] for r in rows]

    async def delete_push_config(self, task_id: str, caller: str, share_hash: str | None, config_id: str) -> bool:
        return bool(
            await self._value(
                "SELECT sessionq.delete_push_config(%s, %s, %s, %s)", (task_id, caller, share_hash, config_id)
            )
        )

    async def claim_push_stream(self, task_id: str, executor: UUID, lease: float) -> bool:
        return bool(await self._value("SELECT sessionq.claim_push_stream(%s, %s, %s)", (task_id, executor, lease)))

    async def release_push_stream(self, task_id: str, executor: UUID) -> None:
        await self._rows("SELECT sessionq.release_push_stream(%s, %s)", (task_id, executor))

    async def next_push_delivery(self, task_id: str) -> dict[str, Any] | None:
        return await self._value("SELECT sessionq.next_push_delivery(%s)", (task_id,))

    async def record_push_attempt(
        self, delivery: int, delivered: bool, status: int | None, error: str | None, give_up: bool
    ) -> None:
        await self._rows(
            "SELECT sessionq.record_push_attempt(%s, %s, %s, %s, %s)", (delivery, delivered, status, error, give_up)
        )

    async def push_deliveries(self, task_id: str) -> list[dict[str, Any]]:
        """The deliveries of a task in order, for operators and tests."""
        return await self._rows(
            "SELECT id, config_id, event_seq, payload, state, attempts, last_status, last_error, created_at,"
            " finished_at"
            " FROM sessionq.push_deliveries WHERE task_id = %s ORDER BY event_seq, id",
            (task_id,),
        )
