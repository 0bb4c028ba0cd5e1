"""Checkpoints record the tag's own snapshot URI (a real Substrate's tag holds its own copy).

Revision ID: 0003_checkpoint_tag_snapshot
Revises: 0002_sessionq_base

0002 applies every file of schema/, this one included, to a clean database; this revision brings
a database made before it up to date (the file is idempotent): the column tag_snapshot_uri,
backfilled with the recorded snapshot_uri, and finish_checkpoint taking the tag's URI.
"""

from sessionq.db.migrations.sqlfiles import apply_sql_files

revision = "0003_checkpoint_tag_snapshot"
down_revision = "0002_sessionq_base"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_sql_files(["41_checkpoint_tag_snapshot.sql"])


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
