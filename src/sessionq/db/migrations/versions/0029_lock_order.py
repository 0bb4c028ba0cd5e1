"""Two waits that closed deadlocks, taken out.

Revision ID: 0029_lock_order
Revises: 0028_webhook_cursor

schema/upgrades/0029_lock_order.sql: sessionq.fetch_job_begun takes the Session's row NOWAIT (a
retried CreateSession holding the row and deferring the job deadlocked with the fetch); the
deliver_webhooks jobs are deferred at commit by the deferred trigger lifecycle_events_webhooks
(sessionq.queue_webhook_jobs), not by record_event (a transaction of several transitions deadlocked
with a transition it waited for). No table changes.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0029_lock_order"
down_revision = "0028_webhook_cursor"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
