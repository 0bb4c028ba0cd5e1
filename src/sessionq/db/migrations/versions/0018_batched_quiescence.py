"""Batched quiescence: the quiescence workers claim, suspend and record several Sessions at once.

Revision ID: 0018_batched_quiescence
Revises: 0017_fleet_search

schema/upgrades/0018_batched_quiescence.sql: a database made before it gets claim_idle_work,
record_idle_outcome, finish_idle_many, and finish_idle built on record_idle_outcome.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0018_batched_quiescence"
down_revision = "0017_fleet_search"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
