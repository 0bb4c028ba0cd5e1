"""Why a turn could not start, on the Session (record_turn_failure, clear_turn_failure).

Revision ID: 0011_turn_failure
Revises: 0010_uncertain_quiescence

schema/upgrades/0011_turn_failure.sql: a database made before it gets the two functions and the
column comment of sessions.failure_reason that names the new reason (RestoreFailed).
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0011_turn_failure"
down_revision = "0010_uncertain_quiescence"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
