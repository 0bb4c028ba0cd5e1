"""A cancelled turn's Actor is suspended only after the cancel_task job told it of the cancel.

Revision ID: 0004_suspend_after_cancel_told
Revises: 0003_checkpoint_tag_snapshot

0002 applies every file of schema/, this one included, to a clean database; this revision brings
a database made before it up to date (the file is idempotent): claim_idle skips a Session with a
cancel its Actor was not told of yet, and cancel_told wakes the quiescence workers.
"""

from sessionq.db.migrations.sqlfiles import apply_sql_files

revision = "0004_suspend_after_cancel_told"
down_revision = "0003_checkpoint_tag_snapshot"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_sql_files(["42_suspend_after_cancel_told.sql"])


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
