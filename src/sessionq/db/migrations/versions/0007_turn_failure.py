"""Why a turn could not start, on the Session (record_turn_failure, clear_turn_failure).

Revision ID: 0007_turn_failure
Revises: 0006_session_list_views

0002 applies every file of schema/, these functions included, to a clean database; this revision
brings a database made before it up to date: the two functions of schema/30_tasks.sql, and the
column comment of sessions.failure_reason that names the new reason (RestoreFailed).
"""

from sessionq.db.migrations.sqlfiles import apply_functions, run_sql, schema_file

revision = "0007_turn_failure"
down_revision = "0006_session_list_views"
branch_labels = None
depends_on = None


def _failure_reason_comment() -> str:
    text = schema_file("20_sessions.sql")
    start = text.index("COMMENT ON COLUMN sessionq.sessions.failure_reason IS")
    return text[start:text.index("\n", start)]


def upgrade() -> None:
    apply_functions("30_tasks.sql", ["record_turn_failure", "clear_turn_failure"])
    run_sql(_failure_reason_comment())


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
