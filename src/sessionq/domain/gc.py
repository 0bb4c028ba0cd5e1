"""Runtime revision garbage collection: leader-only, in two stages.

Discovery marks revisions that no Agent definition, live Session or checkpoint references
(sessionq.gc_discover; markers are never cleared) and caches how many are eligible (the
``kagent_runtime_revision_gc_pending`` gauge). Collection deletes each eligible revision's actor
template from the runtime with its recorded UID (a template whose UID does not match, or was
never recorded, is never deleted) and records it collected. Every attempt of either stage is
timed into ``kagent_runtime_revision_gc_duration_seconds``; failures carry ``error_type`` and
are logged with the revision, actor_template_atespace, actor_template_name and error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from sessionq.db.leader import leadership
from sessionq.db.store import Store
from sessionq.metrics import REVISION_GC, RevisionGcMetrics
from sessionq.models import Revision
from sessionq.runtime.base import Code, Substrate, SubstrateError

log = logging.getLogger("sessionq.gc")

BATCH = 100
ATTEMPT_DEADLINE = 120.0


class TemplateProtected(Exception):
    """The runtime's template is not provably this revision's: it is never deleted."""


@dataclass
class GcResult:
    leader: bool
    pending: int | None = None
    collected: int = 0
    failed: int = 0


async def collect_revisions(
    store: Store,
    runtime: Substrate,
    url: str,
    holder: str,
    *,
    metrics: RevisionGcMetrics = REVISION_GC,
    deadline: float = ATTEMPT_DEADLINE,
) -> GcResult:
    async with leadership(url, "revision_gc", holder) as leader:
        if not leader:
            metrics.active = False  # a standby replica exports no pending gauge
            return GcResult(leader=False)
        metrics.active = True
        result = GcResult(leader=True)
        started = time.monotonic()
        try:
            async with asyncio.timeout(deadline):
                pending = await store.gc_discover()
        except TimeoutError:
            metrics.observe("discovery", time.monotonic() - started, "DEADLINE_EXCEEDED")
            log.error("revision GC discovery timed out")
            return result
        except Exception as e:  # cancellation (BaseException) is not recorded
            metrics.observe("discovery", time.monotonic() - started, "_OTHER")
            log.error("revision GC discovery failed: %s", e, extra={"error": str(e)})
            return result
        metrics.observe("discovery", time.monotonic() - started)
        metrics.pending = result.pending = pending
        for revision in await store.gc_candidates(BATCH):
            started = time.monotonic()
            try:
                async with asyncio.timeout(deadline):
                    await _collect(store, runtime, revision)
            except Exception as e:
                error_type = _error_type(e)
                metrics.observe("collection", time.monotonic() - started, error_type)
                result.failed += 1
                log.error(
                    "revision GC collection failed",
                    extra={
                        "revision": str(revision.id),
                        "actor_template_atespace": revision.template_atespace,
                        "actor_template_name": revision.template_name,
                        "error": str(e),
                    },
                )
                continue
            metrics.observe("collection", time.monotonic() - started)
            result.collected += 1
        return result


def _error_type(e: Exception) -> str:
    if isinstance(e, SubstrateError):
        return e.code.value
    if isinstance(e, TimeoutError):
        return "DEADLINE_EXCEEDED"
    return "_OTHER"


async def _collect(store: Store, runtime: Substrate, revision: Revision) -> None:
    if revision.template_uid is None:
        try:
            found = await runtime.get_actor_template(revision.template_atespace, revision.template_name)
        except SubstrateError as e:
            if e.code != Code.NOT_FOUND:
                raise
        else:
            raise TemplateProtected(
                f"template {revision.template_name} exists (uid {found.uid}) but this revision recorded no uid"
            )
    else:
        try:
            await runtime.delete_actor_template(
                revision.template_atespace, revision.template_name, revision.template_uid
            )
        except SubstrateError as e:
            if e.code != Code.NOT_FOUND:  # a UID mismatch (FAILED_PRECONDITION) protects the template
                raise
    await store.gc_finish(revision.id)
