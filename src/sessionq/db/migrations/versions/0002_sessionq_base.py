"""sessionq base schema: the canonical files of schema/, on a clean database.

Revision ID: 0002_sessionq_base
Revises: 0001_procrastinate

Applies every file of schema/ in name order (each domain's tables and functions as they are now)
and records the schema as installed at the head revision, so that the later revisions, whose
changes the files already hold, skip their upgrade files on this database.
"""

from sessionq.db.migrate import head
from sessionq.db.migrations.sqlfiles import install_canonical

revision = "0002_sessionq_base"
down_revision = "0001_procrastinate"
branch_labels = None
depends_on = None


def upgrade() -> None:
    current_head = head()
    assert current_head is not None
    install_canonical(current_head)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
