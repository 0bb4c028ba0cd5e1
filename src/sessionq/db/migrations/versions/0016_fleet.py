"""The fleet: labels, an idle TTL per Session, search and count, bulk actions (schema/22_fleet.sql).

Revision ID: 0016_fleet
Revises: 0011_turn_failure

schema/upgrades/0016_fleet.sql: a database made before it gets sessions.labels and sessions.idle_ttl
with their indexes, the fleet procedures and the bulk action tables, the idle sweep's own-TTL
candidates and recheck, a fork's copy of labels, and the run_bulk_action job kind.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0016_fleet"
down_revision = "0011_turn_failure"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
