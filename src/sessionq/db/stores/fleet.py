"""The fleet: labels, a Session's own idle TTL, search and count, bulk actions (schema/22_fleet.sql)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from sessionq.db.stores.base import StoreBase
from sessionq.models import (
    Admission,
    BulkAction,
    BulkActionItem,
    BulkActionKind,
    FleetSessionView,
    Session,
    SessionView,
)

_VIEW_FIELDS = SessionView._fields


class FleetStore(StoreBase):
    async def admit_create_labeled(
        self, caller: str, request_id: str, namespace: str, agent: str, name: str, labels: dict[str, str],
        idle_ttl: float | None,
    ) -> Admission:
        """CreateSession with labels and an own idle TTL (None: sessions.idleTtl; 0: never), both
        written in the admission's transaction."""
        return await self._admit(
            "SELECT * FROM sessionq.admit_create_labeled(%s, %s, %s, %s, %s, %s, %s)",
            (caller, request_id, namespace, agent, name, Jsonb(labels), idle_ttl),
        )

    async def set_session_labels(
        self, session_id: UUID, caller: str, share_hash: str | None, set_labels: dict[str, str], remove: list[str],
        replace: bool = False,
    ) -> Session:
        row = await self._value(
            "SELECT sessionq.set_session_labels(%s, %s, %s, %s, %s, %s)",
            (session_id, caller, share_hash, Jsonb(set_labels), remove, replace),
        )
        return Session.from_json(row)

    async def set_session_idle_ttl(
        self, session_id: UUID, caller: str, share_hash: str | None, idle_ttl: float | None
    ) -> Session:
        row = await self._value(
            "SELECT sessionq.set_session_idle_ttl(%s, %s, %s, %s)", (session_id, caller, share_hash, idle_ttl)
        )
        return Session.from_json(row)

    async def fleet_session(self, session_id: UUID, caller: str, share_hash: str | None) -> tuple[Session, str | None]:
        """A Session the caller may see (get_session's rule) with its Actor's state."""
        row = await self._one(
            "SELECT to_jsonb(s) AS s, sessionq.actor_state(s) AS actor_state"
            " FROM sessionq.sessions s WHERE s.id = (sessionq.get_session(%s, %s, %s) ->> 'id')::uuid",
            (session_id, caller, share_hash),
        )
        return Session.from_json(row["s"]), row["actor_state"]

    async def search_sessions(
        self, caller: str, share_hash: str | None, all_creators: bool, filter_: dict[str, Any], after: UUID | None,
        limit: int,
    ) -> list[tuple[Session, str | None]]:
        """A page of the Sessions the filter matches among those the caller may read (its own, the
        one its share token grants; everyone's with all_creators), id order after `after`, each
        with its Actor's state."""
        rows = await self._rows(
            "SELECT p AS s, sessionq.actor_state(jsonb_populate_record(NULL::sessionq.sessions, p)) AS actor_state"
            " FROM sessionq.search_sessions(%s, %s, %s, %s, %s, %s) p",
            (caller, share_hash, all_creators, Jsonb(filter_), after, limit),
        )
        return [(Session.from_json(r["s"]), r["actor_state"]) for r in rows]

    async def search_session_views(
        self, caller: str, share_hash: str | None, all_creators: bool, filter_: dict[str, Any], after: UUID | None,
        limit: int,
    ) -> list[FleetSessionView]:
        """search_sessions' page as what SearchSessions shows of each row (sessionq.search_session_views:
        the same rows, plain columns, no JSON of the rows)."""
        rows = await self._rows(
            "SELECT * FROM sessionq.search_session_views(%s, %s, %s, %s, %s, %s)",
            (caller, share_hash, all_creators, Jsonb(filter_), after, limit),
        )
        return [FleetSessionView(SessionView(*(r[f] for f in _VIEW_FIELDS)), r["labels"], r["idle_ttl"],
                                 r["actor_state"], r["active_us"]) for r in rows]

    async def count_sessions(
        self, caller: str, share_hash: str | None, all_creators: bool, filter_: dict[str, Any]
    ) -> int:
        return int(await self._value(
            "SELECT sessionq.count_sessions(%s, %s, %s, %s)", (caller, share_hash, all_creators, Jsonb(filter_))
        ))

    async def start_bulk_action(
        self, caller: str, request_id: str, all_creators: bool, kind: BulkActionKind, filter_: dict[str, Any],
        idle_ttl: float | None,
    ) -> BulkAction:
        row = await self._value(
            "SELECT sessionq.start_bulk_action(%s, %s, %s, %s, %s, %s)",
            (caller, request_id, all_creators, kind, Jsonb(filter_), idle_ttl),
        )
        return BulkAction.from_json(row)

    async def bulk_step(self, bulk_id: UUID, limit: int) -> BulkAction | None:
        row = await self._value("SELECT sessionq.bulk_step(%s, %s)", (bulk_id, limit))
        return BulkAction.from_json(row) if row else None

    async def get_bulk_action(self, bulk_id: UUID, caller: str) -> BulkAction:
        return BulkAction.from_json(await self._value("SELECT sessionq.get_bulk_action(%s, %s)", (bulk_id, caller)))

    async def list_bulk_action_items(
        self, bulk_id: UUID, caller: str, after: UUID | None, limit: int
    ) -> list[BulkActionItem]:
        rows = await self._rows(
            "SELECT i FROM sessionq.list_bulk_action_items(%s, %s, %s, %s) i", (bulk_id, caller, after, limit)
        )
        return [BulkActionItem.from_json(r["i"]) for r in rows]
