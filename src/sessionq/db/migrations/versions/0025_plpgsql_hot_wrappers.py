"""PL/pgSQL hot wrappers: admit_create, label_pairs and label_keys keep their plans.

Revision ID: 0025_plpgsql_hot_wrappers
Revises: 0024_task_finish

schema/upgrades/0025_plpgsql_hot_wrappers.sql: the three functions as PL/pgSQL with the same
results (PostgreSQL before 18 plans an SQL function's body on every call that is not inlined).
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0025_plpgsql_hot_wrappers"
down_revision = "0024_task_finish"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
