"""What time travel and between turns left: turns that had no snapshot of their own, tag lookups,
the server-wide keep-warm window shown to operators.

Revision ID: 0020_turns_rest
Revises: 0019_traced_jobs

schema/upgrades/0020_turns_rest.sql: tasks.snapshot_pinned (set by begin_turn_pin; read by
turn_checkpointability: NOT_RETAINED for a turn the next one followed before a suspend), indexes of
checkpoints and turn pins by tag name (describe_tags), worker_info.keep_warm with register_worker
and server_keep_warm, and quiescence_backlog showing boundaries inside the server-wide window warm.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0020_turns_rest"
down_revision = "0019_traced_jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
