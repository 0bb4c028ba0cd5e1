"""The store: the only place that talks to sessionq's tables. One method per procedure.

Every method is one short transaction (autocommit calls of a stored procedure); no method is
ever awaited while a runtime call is in flight, and no transaction spans a runtime call. `Store`
is one object for its callers, composed of one part per domain (`db/stores/`, each the procedures
of one schema file) over the shared plumbing (`db/stores/base.py`).
"""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from sessionq.db.connection import DatabaseHealth, Listener, make_pool
from sessionq.db.kept_reads import KeptReads
from sessionq.db.notify import Channel
from sessionq.db.stores.a2a import A2AStore
from sessionq.db.stores.agents import AgentStore
from sessionq.db.stores.checkpoints import CheckpointStore
from sessionq.db.stores.events import EventStore
from sessionq.db.stores.expiry import ExpiryStore
from sessionq.db.stores.fleet import FleetStore
from sessionq.db.stores.gauges import GaugeStore
from sessionq.db.stores.gc import GcStore
from sessionq.db.stores.sessions import SessionStore
from sessionq.db.stores.tasks import TaskStore
from sessionq.db.stores.usage import UsageStore


class Store(
    AgentStore, SessionStore, TaskStore, A2AStore, CheckpointStore, ExpiryStore, GcStore, GaugeStore, EventStore,
    FleetStore, UsageStore,
):
    def __init__(
        self, pool: AsyncConnectionPool, listener: Listener | None = None, *, coalesce_reads: bool = True
    ) -> None:
        self.pool = pool
        self.listener = listener
        self.health: DatabaseHealth = getattr(pool, "health", None) or DatabaseHealth()
        # the point reads of Sessions, coalesced on a connection kept between statements
        self.reads: KeptReads | None = KeptReads(pool) if coalesce_reads else None

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        listen: bool = True,
        name: str = "sessionq",
        direct_url: str | None = None,
        coalesce_reads: bool = True,
    ) -> Store:
        """The pool, and with `listen` the LISTEN connection that wakes waiters; both report their
        connection attempts to one DatabaseHealth, so calls fail fast while the database is gone.
        The pool connects to `url` (which may be a pooler in transaction mode: every store method
        is one transaction), the LISTEN connection to `direct_url` (default: `url`)."""
        pool = make_pool(url, min_size=1, max_size=pool_size, name=name, direct_url=direct_url)
        await pool.open(wait=True, timeout=30)
        listener = None
        if listen:
            listener = Listener(
                direct_url or url,
                [Channel.SESSION, Channel.TASK, Channel.CHECKPOINT, Channel.EVENT, Channel.AGENT],
                # a notification reaches only the waiters of its Session (thousands of open A2A
                # streams must not each decode every task notification)
                keyed=(Channel.SESSION, Channel.TASK, Channel.EVENT),
                health=pool.health,
            )
            await listener.start()
        return cls(pool, listener, coalesce_reads=coalesce_reads)

    async def close(self, timeout: float = 5.0) -> None:
        """Stop listening and close the pool, waiting up to `timeout` for its background tasks
        (0: do not wait, as a forced stop does)."""
        if self.listener:
            await self.listener.stop()
        if self.reads is not None:
            await self.reads.close()
        await self.pool.close(timeout=timeout)
