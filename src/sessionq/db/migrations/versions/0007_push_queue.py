"""Push notification deliveries in a queue of their own (`push`).

Revision ID: 0007_push_queue
Revises: 0006_session_list_views

0002 applies every file of schema/, this one included, to a clean database; this revision brings
a database made before it up to date: the bridge function that moves waiting jobs to their task's
queue (schema/05_procrastinate.sql, move_waiting_jobs), then deliver_push's queue and its waiting
jobs (schema/07_push_queue.sql, idempotent).
"""

from sessionq.db.migrations.sqlfiles import apply_functions, apply_sql_files

revision = "0007_push_queue"
down_revision = "0006_session_list_views"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_functions("05_procrastinate.sql", ["move_waiting_jobs"])
    apply_sql_files(["07_push_queue.sql"])


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
