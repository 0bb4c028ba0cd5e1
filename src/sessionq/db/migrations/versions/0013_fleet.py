"""The fleet: labels, an idle TTL per Session, search and count, bulk actions (schema/22_fleet.sql).

Revision ID: 0013_fleet
Revises: 0012_lifecycle_events

schema/upgrades/0013_fleet.sql: a database made before it gets sessions.labels and sessions.idle_ttl
with their indexes, the fleet procedures and the bulk action tables, the idle sweep's own-TTL
candidates and recheck, a fork's copy of labels, and the run_bulk_action job kind.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0013_fleet"
down_revision = "0012_lifecycle_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
