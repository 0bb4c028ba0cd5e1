"""Creation path: an execute_operation job begins its operation in the statement that fetches it.

Revision ID: 0022_creation_path
Revises: 0021_snapshot_bytes

schema/upgrades/0022_creation_path.sql: sessionq.fetch_job_begun (sessionq.fetch_job and, for an
execute_operation job, sessionq.begin_operation in one transaction).
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0022_creation_path"
down_revision = "0021_snapshot_bytes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
