"""One committing transaction defers a subscription's deliver_webhooks job.

Revision ID: 0030_webhook_job_once
Revises: 0029_lock_order

schema/upgrades/0030_webhook_job_once.sql: sessionq.queue_webhook_jobs defers a subscription's job
only under an advisory lock that no other committing transaction holds (the others queued behind
the first one's uncommitted insert), and sessionq.wake_webhook_jobs, run by the periodic
lifecycle_events_tick, defers the job of a subscription whose committed events no job covers. No
table changes.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0030_webhook_job_once"
down_revision = "0029_lock_order"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
