"""A change of an Agent NOTIFYs sessionq_agent (the Agent list's subscribers: MCP's kagent://agents).

Revision ID: 0014_agent_notify
Revises: 0013_fleet

schema/upgrades/0014_agent_notify.sql: a database made before it gets the trigger function
notify_agent_change and the trigger agents_notify.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0014_agent_notify"
down_revision = "0013_fleet"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
