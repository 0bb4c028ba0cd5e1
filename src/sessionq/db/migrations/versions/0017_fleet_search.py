"""The fleet's search and count over what the caller may read.

Revision ID: 0017_fleet_search
Revises: 0016_between_turns

schema/upgrades/0017_fleet_search.sql: a database made before it gets session_filter_sql,
search_sessions and count_sessions with the caller's share token hash (their old signatures
dropped), and the bulk action's procedures that call them.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0017_fleet_search"
down_revision = "0016_between_turns"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
