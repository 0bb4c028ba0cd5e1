"""procrastinate's schema at the pinned version (3.10).

Revision ID: 0001_procrastinate
Revises:
"""

from importlib import resources

from sessionq.db.migrations.sqlfiles import run_sql

revision = "0001_procrastinate"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The full schema of the installed procrastinate release; pyproject pins procrastinate==3.10.*.
    # A later procrastinate upgrade adds a revision that runs its sql/migrations files.
    run_sql(resources.files("procrastinate.sql").joinpath("schema.sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
