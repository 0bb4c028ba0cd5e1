"""Traced jobs: a traced call's W3C trace context travels with the jobs and notifications it makes.

Revision ID: 0018_traced_jobs
Revises: 0016_between_turns

schema/upgrades/0018_traced_jobs.sql: sessionq.defer and sessionq.notify add the transaction-local
setting sessionq.traceparent to the job's args and the notification's payload.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0018_traced_jobs"
down_revision = "0016_between_turns"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
