"""Usage per Session (schema/45_usage.sql)."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from sessionq.db.stores.base import StoreBase

log = logging.getLogger("sessionq.usage")


class UsageStore(StoreBase):
    async def record_resume(self, session_id: UUID, seconds: float) -> None:
        """Usage: the Session's Actor was resumed by a call that took `seconds`. Best effort: a
        failure to record it is logged, never the resume's failure."""
        try:
            await self._rows("SELECT sessionq.record_resume(%s, %s)", (session_id, seconds))
        except Exception as e:  # the turn or the Resume goes on; only the usage figure misses it
            log.warning("cannot record the usage of a resume of session %s: %s", session_id, e)

    async def get_session_usage(self, session_id: UUID, caller: str, share_hash: str | None) -> dict[str, Any]:
        return dict(await self._value(
            "SELECT sessionq.get_session_usage(%s, %s, %s)", (session_id, caller, share_hash)
        ))

    async def agent_usage(self) -> list[dict[str, Any]]:
        """Usage summed per Agent over its live Sessions (the metrics' gauges)."""
        return await self._rows(
            "SELECT a.*, b.snapshot_bytes, b.snapshots_sized FROM sessionq.agent_usage() a"
            " LEFT JOIN sessionq.agent_snapshot_usage() b USING (agent_namespace, agent_name)"
        )
