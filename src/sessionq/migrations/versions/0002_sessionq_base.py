"""sessionq base: agents, revisions, sessions, shares, tasks and quiescence, the job wrapper.

Revision ID: 0002_sessionq_base
Revises: 0001_procrastinate
"""

from sessionq.migrations.sqlfiles import apply_sql_files

revision = "0002_sessionq_base"
down_revision = "0001_procrastinate"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_sql_files(["00_base.sql", "05_jobs.sql", "10_agents.sql", "20_sessions.sql", "30_tasks.sql"])


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
