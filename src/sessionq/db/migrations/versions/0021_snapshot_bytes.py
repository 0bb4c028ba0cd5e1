"""Snapshot bytes: a snapshot's size, as the runtime reports it, in the Session's usage.

Revision ID: 0021_snapshot_bytes
Revises: 0020_turns_rest

schema/upgrades/0021_snapshot_bytes.sql: sessions.snapshot_bytes, session_usage.snapshot_bytes and
snapshots_sized, recorded with the snapshot (record_idle_outcome, complete_operation,
record_snapshot_completed) and shown by get_session_usage and agent_usage.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0021_snapshot_bytes"
down_revision = "0020_turns_rest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
