"""Turn pins: the snapshots of a Session's last settled turns stay pinned for checkpoints and forks.

Revision ID: 0015_turn_snapshots
Revises: 0014_agent_notify

schema/upgrades/0015_turn_snapshots.sql: a database made before it gets the turn_snapshots table and
its procedures, the trigger releasing a deleted Session's pins, the release_turn_snapshot job kind,
revision_referenced seeing the pins and the session_snapshots view.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0015_turn_snapshots"
down_revision = "0014_agent_notify"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
