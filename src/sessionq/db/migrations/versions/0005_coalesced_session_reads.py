"""The coalesced Session reads (get_sessions, get_session_views) and an access rule PostgreSQL inlines.

Revision ID: 0005_coalesced_session_reads
Revises: 0004_suspend_after_cancel_told

schema/upgrades/0005_coalesced_session_reads.sql: a database made before it gets the batch reads that the store's
GetSession coalescer runs, and sessionq.access in its inlinable form (with share_permission).
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0005_coalesced_session_reads"
down_revision = "0004_suspend_after_cancel_told"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
