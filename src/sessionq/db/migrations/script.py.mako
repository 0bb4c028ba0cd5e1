"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
"""

from sessionq.migrations.sqlfiles import apply_sql_files

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_sql_files([])


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
