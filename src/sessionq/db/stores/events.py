"""Lifecycle events of Sessions (schema/45_events.sql): the pages readers take after a position,
the expiring_soon announcements and the retention purge. The events themselves are written by the
schema's triggers, in the transaction of each transition."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from sessionq import errors
from sessionq.db.stores.base import StoreBase
from sessionq.models import EventKind, LifecycleEvent, WebhookSubscription

_POSITION = re.compile(r"^([0-9]{1,20})-([0-9]{1,19})$")
_COLUMNS = ("seq, (xid::text)::bigint AS xid, session_id, kind, owner, agent_namespace, agent_name,"
            " operation_id, task_id, payload, created_at")


@dataclass(frozen=True)
class Position:
    """Where a reader stands in the events: after the event (xid, seq)."""

    xid: int
    seq: int

    @classmethod
    def parse(cls, text: str) -> Position:
        """A position from an event id (`<xid>-<seq>`, the SSE id and page token); INVALID_ARGUMENT
        when it is not one."""
        m = _POSITION.match(text.strip())
        if m is None or int(m.group(2)) > 2**63 - 1 or int(m.group(1)) > 2**63 - 1:
            raise errors.invalid(f"{errors.clip(text)!r} is not an event id")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.xid}-{self.seq}"


class EventStore(StoreBase):

    async def event_page(
        self,
        caller: str,
        share_hash: str | None,
        admin: bool,
        *,
        session_id: UUID | None = None,
        kinds: Sequence[EventKind] | None = None,
        after: Position | None = None,
        limit: int = 100,
    ) -> list[LifecycleEvent]:
        """Up to `limit` events the caller may see, after `after`, in position order: only those of
        transactions older than every running one, so a later page never holds an earlier event."""
        rows = await self._rows(
            f"SELECT {_COLUMNS} FROM sessionq.event_page(%s, %s, %s, %s, %s, %s::text::xid8, %s, %s)",
            (caller, share_hash, admin, session_id, list(kinds) if kinds else None,
             None if after is None else str(after.xid), None if after is None else after.seq, limit),
        )
        return [LifecycleEvent.from_json(r) for r in rows]

    async def event_position_known(self, position: Position) -> bool:
        """Whether the position is that of a kept event or of one already purged."""
        return bool(await self._value(
            "SELECT sessionq.event_position_known(%s::text::xid8, %s)", (str(position.xid), position.seq)))

    async def announce_expiring(self, ttl: float, lead: float, limit: int = 1000) -> int:
        """Record expiring_soon for Sessions whose idle TTL ends within `lead` seconds."""
        return int(await self._value("SELECT sessionq.announce_expiring(%s, %s, %s)", (ttl, lead, limit)))

    async def purge_lifecycle_events(self, retention: float, limit: int = 1000) -> int:
        """Delete events older than `retention` seconds among the `limit` oldest; how many went."""
        return int(await self._value("SELECT sessionq.purge_lifecycle_events(%s, %s)", (retention, limit)))

    async def wake_webhook_jobs(self) -> int:
        """Defer the job of each subscription with committed events past its cursor and no job
        waiting or executor holding it (the periodic safety net of the jobs deferred at commit)."""
        return int(await self._value("SELECT sessionq.wake_webhook_jobs()"))

    async def create_webhook(
        self, owner: str, is_global: bool, url: str, event_types: Sequence[EventKind], agent: tuple[str, str] | None,
        secret: str,
    ) -> WebhookSubscription:
        value = await self._value(
            "SELECT sessionq.create_webhook(%s, %s, %s, %s, %s, %s, %s)",
            (owner, is_global, url, [k.value for k in event_types], agent[0] if agent else None,
             agent[1] if agent else None, secret),
        )
        return WebhookSubscription.from_json(value)

    async def list_webhooks(
        self, caller: str, admin: bool, after: UUID | None, limit: int
    ) -> list[WebhookSubscription]:
        rows = await self._rows("SELECT w FROM sessionq.list_webhooks(%s, %s, %s, %s) w", (caller, admin, after, limit))
        return [WebhookSubscription.from_json(r["w"]) for r in rows]

    async def delete_webhook(self, webhook_id: UUID, caller: str, admin: bool) -> None:
        await self._rows("SELECT sessionq.delete_webhook(%s, %s, %s)", (webhook_id, caller, admin))

    async def claim_webhook_round(
        self, subscription_id: UUID, executor: UUID, lease: float, limit: int, start: str | None
    ) -> dict[str, Any] | None:
        """The subscription's next deliveries under `executor`'s lease (sessionq.claim_webhook_round:
        {url, secret, start, cursor, held, events}, or {busy} or {done}); None when the subscription
        is gone or disabled."""
        row = await self._value("SELECT sessionq.claim_webhook_round(%s, %s, %s, %s, %s::xid8)",
                                (subscription_id, executor, lease, limit, start))
        return row if isinstance(row, dict) else None

    async def record_webhook_round(
        self, subscription_id: UUID, executor: UUID, cursor: list[Any] | None, outcomes: list[dict[str, Any]],
        disable_after: int, release: bool,
    ) -> str:
        """Record a round's outcomes and move the cursor (sessionq.record_webhook_round): 'recorded',
        'disabled' (a run of `disable_after` failures) or 'lost' (the lease was lost: nothing recorded)."""
        xid, seq = cursor if cursor else (None, None)
        return str(await self._value(
            "SELECT sessionq.record_webhook_round(%s, %s, %s::xid8, %s, %s, %s, %s)",
            (subscription_id, executor, xid, seq, Jsonb(outcomes), disable_after, release)))

