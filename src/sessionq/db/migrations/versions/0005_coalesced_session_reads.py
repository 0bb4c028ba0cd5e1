"""The coalesced Session reads: get_sessions and get_session_views.

Revision ID: 0005_coalesced_session_reads
Revises: 0004_suspend_after_cancel_told

0002 applies every file of schema/, this one included, to a clean database; this revision brings
a database made before it up to date (the file is idempotent): the batch reads that the store's
GetSession coalescer runs.
"""

from sessionq.db.migrations.sqlfiles import apply_sql_files

revision = "0005_coalesced_session_reads"
down_revision = "0004_suspend_after_cancel_told"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_sql_files(["43_coalesced_session_reads.sql"])


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
