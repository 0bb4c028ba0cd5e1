"""Lifecycle events' jobs: deliver_webhooks (queue ``push``, one waiting job per subscription:
queueing lock webhook:<subscription>) and the periodic work (a periodic task
every minute, queue ``periodic``): record expiring_soon for Sessions whose idle TTL ends within
events.expiringSoonLead, purge events older than events.retention in batches (at most
MAX_BATCHES of BATCH a tick, so one tick never holds locks or runs for long; the next tick goes
on), and defer the deliver_webhooks job of a subscription whose events no job covers (a deferral
left to a transaction that then rolled back). All are idempotent: two ticks at once announce a
Session once (its row is locked while announced), delete each event once, and leave one job
waiting per subscription."""

from __future__ import annotations

import logging
from uuid import UUID

from procrastinate import App, JobContext, RetryStrategy
from sessionq.jobs.deps import deps

from sessionq.db.store import Store
from sessionq.domain import push, webhooks

log = logging.getLogger(__name__)

TASK = "lifecycle_events_tick"
PERIODIC_ID = "sessionq-lifecycle-events"
BATCH = 1000
MAX_BATCHES = 20


async def tick(store: Store, idle_ttl: float, lead: float, retention: float, *, batch: int = BATCH,
               max_batches: int = MAX_BATCHES) -> tuple[int, int, int]:
    """(expiring_soon events recorded, events purged, subscriptions whose job was deferred)."""
    announced = 0
    for _ in range(max_batches):
        n = await store.announce_expiring(idle_ttl, lead, batch)
        announced += n
        if n < batch:
            break
    purged = 0
    for _ in range(max_batches):
        n = await store.purge_lifecycle_events(retention, batch)
        purged += n
        if n < batch:
            break
    return announced, purged, await store.wake_webhook_jobs()


async def deliver_webhooks(context: JobContext, subscription_id: str) -> int:
    """POST the subscription's pending deliveries, in order per Session, each within
    webhooks.timeout; a failed attempt raises at the end, and procrastinate retries with backoff."""
    d = deps(context)
    cfg = d.settings.webhooks
    return await webhooks.deliver_subscription(
        d.store,
        UUID(subscription_id),
        policy=push.TargetPolicy(allow_private=cfg.allow_private_targets, allow_loopback=cfg.allow_loopback),
        timeout=cfg.timeout,
        max_attempts=cfg.max_attempts,
        disable_after=cfg.disable_after_failures,
    )


def register(app: App) -> None:
    # a failed attempt waits 1, 3, 5, ... s (the job's attempts, across its deliveries); each delivery
    # is given up after webhooks.maxAttempts, so the job ends once its stream is empty
    app.task(name="deliver_webhooks", queue="push", pass_context=True,
             retry=RetryStrategy(max_attempts=100_000, wait=1, linear_wait=2))(deliver_webhooks)

    @app.periodic(cron="* * * * *", periodic_id=PERIODIC_ID)
    @app.task(name=TASK, queue="periodic", pass_context=True, queueing_lock=PERIODIC_ID)
    async def lifecycle_events_tick(context: JobContext, timestamp: int) -> dict[str, int]:
        d = deps(context)
        announced, purged, woken = await tick(d.store, d.settings.sessions.idle_ttl,
                                              d.settings.events.expiring_soon_lead, d.settings.events.retention)
        if purged:
            log.info("purged %d lifecycle event(s) older than events.retention (%gs)", purged,
                     d.settings.events.retention)
        if woken:
            log.info("deferred the deliver_webhooks job of %d subscription(s) with events no job covered", woken)
        return {"announced": announced, "purged": purged, "webhooks_woken": woken}
