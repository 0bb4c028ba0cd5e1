"""The coalesced Session reads (get_sessions, get_session_views) and an access rule PostgreSQL inlines.

Revision ID: 0005_coalesced_session_reads
Revises: 0004_suspend_after_cancel_told

0002 applies every file of schema/, this one included, to a clean database; this revision brings
a database made before it up to date (the file is idempotent): the batch reads that the store's
GetSession coalescer runs, and sessionq.access in its inlinable form (with share_permission), as
schema/20_sessions.sql defines them.
"""

from sessionq.db.migrations.sqlfiles import apply_functions, apply_sql_files

revision = "0005_coalesced_session_reads"
down_revision = "0004_suspend_after_cancel_told"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_functions("20_sessions.sql", ["share_permission", "access"])
    apply_sql_files(["43_coalesced_session_reads.sql"])


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
