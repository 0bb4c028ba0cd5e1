"""The fetch of an execute_operation job takes its Session's row NOWAIT.

Revision ID: 0029_fetch_nowait
Revises: 0028_webhook_cursor

schema/upgrades/0029_fetch_nowait.sql: sessionq.fetch_job_begun leaves a Session whose row another
transaction holds to the job's own begin (a retried CreateSession holding the row, deferring the
job, deadlocked with it). No table changes.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0029_fetch_nowait"
down_revision = "0028_webhook_cursor"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
