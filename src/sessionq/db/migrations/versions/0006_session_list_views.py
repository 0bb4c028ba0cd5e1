"""ListSessions' pages as plain columns (list_session_views).

Revision ID: 0006_session_list_views
Revises: 0005_coalesced_session_reads

schema/upgrades/0006_session_list_views.sql: a database made before it gets the one page read (session_page)
that list_sessions reads, and the page read that ListSessions answers from without JSON.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0006_session_list_views"
down_revision = "0005_coalesced_session_reads"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
