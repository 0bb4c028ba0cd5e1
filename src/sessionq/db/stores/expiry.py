"""Idle expiry and Sandbox expiry (schema/50_expiry.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sessionq.db.stores.base import StoreBase
from sessionq.models import (
    ExpiryOutcome,
    RowKind,
)


@dataclass(frozen=True)
class Expiry:
    outcome: ExpiryOutcome
    generation: UUID | None
    idle_seconds: float | None


class ExpiryStore(StoreBase):

    async def idle_candidates(self, ttl: float, after: tuple[Any, UUID] | None, limit: int) -> list[tuple[UUID, Any]]:
        rows = await self._rows(
            "SELECT id, idle_since FROM sessionq.idle_candidates(%s, %s, %s, %s)",
            (ttl, after[0] if after else None, after[1] if after else None, limit),
        )
        return [(r["id"], r["idle_since"]) for r in rows]

    async def own_ttl_candidates(self, after: tuple[Any, UUID] | None, limit: int) -> list[tuple[UUID, Any]]:
        """One page of Sessions past their own idle TTL (id, deadline) in deadline order after `after`."""
        rows = await self._rows(
            "SELECT id, deadline FROM sessionq.own_ttl_candidates(%s, %s, %s)",
            (after[0] if after else None, after[1] if after else None, limit),
        )
        return [(r["id"], r["deadline"]) for r in rows]

    async def sandbox_expiry_candidates(
        self, after: tuple[Any, UUID] | None, limit: int
    ) -> list[tuple[UUID, Any]]:
        """One page of expired Sandboxes (id, expires_at) in expiry order after `after`."""
        rows = await self._rows(
            "SELECT id, expires_at FROM sessionq.sandbox_expiry_candidates(%s, %s, %s)",
            (after[0] if after else None, after[1] if after else None, limit),
        )
        return [(r["id"], r["expires_at"]) for r in rows]

    async def idle_deletions_to_resume(
        self, after: UUID | None, limit: int, kinds: Sequence[RowKind] = (RowKind.SESSION, RowKind.SANDBOX)
    ) -> list[UUID]:
        rows = await self._rows(
            "SELECT s AS id FROM sessionq.idle_deletions_to_resume(%s, %s, %s) s", (after, limit, list(kinds))
        )
        return [r["id"] for r in rows]

    async def expire_session(self, session_id: UUID, ttl: float) -> Expiry:
        row = await self._one("SELECT * FROM sessionq.expire_session(%s, %s)", (session_id, ttl))
        return Expiry(ExpiryOutcome(row["outcome"]), row["generation"], row["idle_seconds"])

    async def fail_stalled_turns(self, timeout: float, limit: int = 100) -> int:
        """End turns whose task had no update for `timeout` seconds (sessionq.fail_stalled_turns)."""
        return int(await self._value("SELECT sessionq.fail_stalled_turns(%s, %s)", (timeout, limit)))
