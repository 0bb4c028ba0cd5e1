"""Uncertain quiescence claims are resolved by the quiescence workers.

Revision ID: 0010_uncertain_quiescence
Revises: 0009_push_config_owners

schema/upgrades/0010_uncertain_quiescence.sql: a database made before it gets the uncertain claim's
columns and procedures (take_over_idle_claim in its leased form), finish_idle that ends an
uncertain claim, the truthful refusal of a new turn while one is held (check_turn_blockers) and
retry_quiescence's comment.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0010_uncertain_quiescence"
down_revision = "0009_push_config_owners"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
