"""Task finish: a turn's final update and its settlement in one transaction.

Revision ID: 0024_task_finish
Revises: 0023_fleet_search_page

schema/upgrades/0024_task_finish.sql: sessionq.task_finish (sessionq.task_update of a final or
waiting state, then sessionq.task_settle at the version it made), for the task store's UpdateTask
sent with the settle header.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0024_task_finish"
down_revision = "0023_fleet_search_page"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
