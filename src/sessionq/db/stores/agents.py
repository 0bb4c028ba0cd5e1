"""Agents and revisions (schema/10_agents.sql)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from sessionq import errors
from sessionq.db.stores.base import StoreBase
from sessionq.models import (
    Agent,
    ApplyMode,
    Revision,
)


class AgentStore(StoreBase):

    async def apply_agent(
        self,
        namespace: str,
        name: str,
        spec: dict[str, Any],
        spec_hash: str,
        image: str,
        egress: list[dict[str, Any]],
        caller: str,
        admin: bool = False,
        base_revision: UUID | None = None,
        mode: ApplyMode = ApplyMode.APPLY,
    ) -> bool:
        """Create or update an Agent; True when a new revision was made. base_revision: the desired
        revision whose credential values `spec` kept (SQ409 when it is no longer the desired one).
        mode: create refuses an existing Agent (SQ422), update a missing one (SQ404)."""
        row = await self._one(
            "SELECT revision_created FROM sessionq.apply_agent(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (namespace, name, Jsonb(spec), spec_hash, image, Jsonb(egress), caller, admin, base_revision, mode),
        )
        return bool(row["revision_created"])

    # readers see specs redacted (credential header values are write-only)
    _AGENT = "to_jsonb(a) || jsonb_build_object('spec', sessionq.redact_agent_spec(a.spec))"

    async def get_agent(self, namespace: str, name: str) -> Agent:
        """The Agent, its spec's credential header values redacted."""
        rows = await self._rows(
            f"SELECT {self._AGENT} AS a FROM sessionq.agents a WHERE namespace = %s AND name = %s", (namespace, name)
        )
        if not rows:
            raise errors.not_found(f"agent {errors.clip(namespace)}/{errors.clip(name)} not found")
        return Agent.from_json(rows[0]["a"])

    async def stored_agent_spec(self, namespace: str, name: str) -> tuple[UUID, dict[str, Any]] | None:
        """The desired revision and spec of an Agent with its credential values (None: no such
        Agent). Only applying a spec reads them: to keep the values given back as redacted."""
        rows = await self._rows(
            "SELECT desired_revision_id, spec FROM sessionq.agents WHERE namespace = %s AND name = %s",
            (namespace, name),
        )
        return (rows[0]["desired_revision_id"], rows[0]["spec"]) if rows else None

    async def list_agents(self, namespace: str | None, after: tuple[str, str] | None, limit: int) -> list[Agent]:
        """Agents in (namespace, name) order, their specs' credential header values redacted."""
        rows = await self._rows(
            f"SELECT {self._AGENT} AS a FROM sessionq.agents a"
            " WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s)"
            "   AND (%(an)s::text IS NULL OR (namespace, name) > (%(an)s, %(nn)s))"
            " ORDER BY namespace, name LIMIT %(limit)s",
            {"ns": namespace, "an": after[0] if after else None, "nn": after[1] if after else None, "limit": limit},
        )
        return [Agent.from_json(r["a"]) for r in rows]

    async def delete_agent(self, namespace: str, name: str, caller: str, admin: bool = False) -> None:
        await self._rows("SELECT sessionq.delete_agent(%s, %s, %s, %s)", (namespace, name, caller, admin))

    async def agent_revisions(self, namespace: str, name: str) -> list[Revision]:
        rows = await self._rows(
            "SELECT to_jsonb(r) AS r FROM sessionq.revisions r WHERE agent_namespace = %s AND agent_name = %s"
            " ORDER BY number",
            (namespace, name),
        )
        return [Revision.from_json(r["r"]) for r in rows]

    async def get_revision(self, revision_id: UUID) -> Revision:
        rows = await self._rows("SELECT to_jsonb(r) AS r FROM sessionq.revisions r WHERE id = %s", (revision_id,))
        if not rows:
            raise errors.not_found(f"revision {revision_id} not found")
        return Revision.from_json(rows[0]["r"])

    async def finish_revision(self, revision_id: UUID, template_uid: str | None, failure: str | None) -> None:
        await self._rows("SELECT sessionq.finish_revision(%s, %s, %s)", (revision_id, template_uid, failure))
