"""Push notification deliveries in a queue of their own (`push`).

Revision ID: 0008_push_queue
Revises: 0007_schema_installed

schema/upgrades/0008_push_queue.sql: a database made before it gets the bridge function that moves
waiting jobs to their task's queue (move_waiting_jobs), deliver_push's queue `push`, and its
waiting jobs moved there.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0008_push_queue"
down_revision = "0007_schema_installed"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
