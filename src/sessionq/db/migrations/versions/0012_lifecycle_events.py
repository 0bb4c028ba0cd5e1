"""Lifecycle events of Sessions (schema/45_events.sql).

Revision ID: 0012_lifecycle_events
Revises: 0011_turn_failure

schema/upgrades/0012_lifecycle_events.sql: a database made before it gets the events table, the
triggers that derive an event from each transition of a Session or checkpoint, and the procedures
that read, announce and purge them.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0012_lifecycle_events"
down_revision = "0011_turn_failure"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
