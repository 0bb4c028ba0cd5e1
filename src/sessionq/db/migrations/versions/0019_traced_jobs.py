"""Traced jobs: a traced call's W3C trace context travels with the jobs and notifications it makes.

Revision ID: 0019_traced_jobs
Revises: 0018_batched_quiescence

schema/upgrades/0019_traced_jobs.sql: sessionq.defer and sessionq.notify add the transaction-local
setting sessionq.traceparent to the job's args and the notification's payload.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0019_traced_jobs"
down_revision = "0018_batched_quiescence"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
