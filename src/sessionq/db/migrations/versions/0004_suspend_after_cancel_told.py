"""A cancelled turn's Actor is suspended only after the cancel_task job told it of the cancel.

Revision ID: 0004_suspend_after_cancel_told
Revises: 0003_checkpoint_tag_snapshot

schema/upgrades/0004_suspend_after_cancel_told.sql: a database made before it gets claim_idle skipping a Session
with a cancel its Actor was not told of yet, and cancel_told waking the quiescence workers.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0004_suspend_after_cancel_told"
down_revision = "0003_checkpoint_tag_snapshot"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
