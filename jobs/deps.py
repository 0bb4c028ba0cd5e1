"""What jobs need at run time, handed to them through the worker's job context."""

from __future__ import annotations

from dataclasses import dataclass

from procrastinate import JobContext

from sessionq.config import Settings
from sessionq.db.store import Store
from sessionq.domain.operations import OperationExecutor
from sessionq.logs import JOB_ID
from sessionq.runtime.base import Substrate


@dataclass
class Deps:
    settings: Settings
    store: Store
    runtime: Substrate
    executor: OperationExecutor
    url: str = ""  # the direct URL (database.directUrl): leadership locks, listeners; never a pooler


def deps(context: JobContext) -> Deps:
    """The job's dependencies; also tags this job's log lines with its job_id."""
    JOB_ID.set(context.job.id if context.job else None)  # each job runs in its own asyncio task
    d = context.additional_context.get("deps")
    assert isinstance(d, Deps), "the worker must be started with additional_context={'deps': Deps(...)}"
    return d
