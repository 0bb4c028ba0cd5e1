"""ListSessions' pages as plain columns (list_session_views).

Revision ID: 0006_session_list_views
Revises: 0005_coalesced_session_reads

0002 applies every file of schema/, this one included, to a clean database; this revision brings
a database made before it up to date: the one page read (session_page) that list_sessions now reads
as schema/20_sessions.sql defines them, and the page read that ListSessions answers from without
JSON (the file is idempotent).
"""

from sessionq.db.migrations.sqlfiles import apply_functions, apply_sql_files

revision = "0006_session_list_views"
down_revision = "0005_coalesced_session_reads"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_functions("20_sessions.sql", ["session_page", "list_sessions"])
    apply_sql_files(["44_session_list_views.sql"])


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
