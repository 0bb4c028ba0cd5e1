"""sessionq base schema: every file of schema/ in name order.

Revision ID: 0002_sessionq_base
Revises: 0001_procrastinate

The schema is unreleased and requires a clean database (as the requirements say of the
reference system): until the first release this revision applies all of schema/. After the
first release, every change gets a revision of its own.
"""

from importlib import resources

from sessionq.db.migrations.sqlfiles import apply_sql_files

revision = "0002_sessionq_base"
down_revision = "0001_procrastinate"
branch_labels = None
depends_on = None


def upgrade() -> None:
    names = sorted(f.name for f in resources.files("sessionq.schema").iterdir() if f.name.endswith(".sql"))
    apply_sql_files(names)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
