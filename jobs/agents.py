"""Job: prepare an Agent revision in the runtime (queue ``agents``)."""

from __future__ import annotations

from uuid import UUID

from procrastinate import JobContext
from sessionq.jobs.deps import deps

from sessionq.domain.agents import prepare_revision as prepare
from sessionq.models import RevisionState


async def prepare_revision(context: JobContext, revision_id: str) -> RevisionState:
    d = deps(context)
    return await prepare(d.store, d.runtime, UUID(revision_id))
