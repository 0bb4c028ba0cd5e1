"""PL/pgSQL quiescence-path functions: turn_busy, idle_work_blocked, turn_waits_for_input,
checkpoint_in_progress and record_resume keep their plans.

Revision ID: 0026_plpgsql_quiescence
Revises: 0025_plpgsql_hot_wrappers

schema/upgrades/0026_plpgsql_quiescence.sql: the five functions as PL/pgSQL with the same
results (PostgreSQL before 18 plans an SQL function's body on every call that is not inlined).
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0026_plpgsql_quiescence"
down_revision = "0025_plpgsql_hot_wrappers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
