"""Runtime revision garbage collection (schema/60_gc.sql)."""

from __future__ import annotations

from uuid import UUID

from sessionq.db.stores.base import StoreBase
from sessionq.models import (
    Revision,
)


class GcStore(StoreBase):
    async def gc_discover(self) -> int:
        return int(await self._value("SELECT sessionq.gc_discover()"))

    async def gc_candidates(self, limit: int) -> list[Revision]:
        rows = await self._rows("SELECT r FROM sessionq.gc_claim(%s) r", (limit,))
        return [Revision.from_json(r["r"]) for r in rows]

    async def gc_finish(self, revision_id: UUID) -> bool:
        return bool(await self._value("SELECT sessionq.gc_finish(%s)", (revision_id,)))
