"""Between turns: a message to a busy Session follows its busy policy (queued turns).

Revision ID: 0016_between_turns
Revises: 0015_turn_snapshots

schema/upgrades/0016_between_turns.sql: a database made before it gets the task phase queued, the
queued_turns table, admit_turn with a busy policy and a queue bound, and the procedures that start
and end queued turns.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0016_between_turns"
down_revision = "0015_turn_snapshots"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
