"""Fleet search page: the page's ids by the statement planned with the filter, the rows by a static one.

Revision ID: 0023_fleet_search_page
Revises: 0022_creation_path

schema/upgrades/0023_fleet_search_page.sql: sessionq.search_session_ids (new), and
sessionq.search_sessions and sessionq.search_session_views reading the rows of its ids.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0023_fleet_search_page"
down_revision = "0022_creation_path"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
