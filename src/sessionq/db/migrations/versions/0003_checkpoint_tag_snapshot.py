"""Checkpoints record the tag's own snapshot URI (a real Substrate's tag holds its own copy).

Revision ID: 0003_checkpoint_tag_snapshot
Revises: 0002_sessionq_base

schema/upgrades/0003_checkpoint_tag_snapshot.sql: a database made before it gets the column tag_snapshot_uri,
backfilled with the recorded snapshot_uri, and finish_checkpoint taking the tag's URI.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0003_checkpoint_tag_snapshot"
down_revision = "0002_sessionq_base"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
