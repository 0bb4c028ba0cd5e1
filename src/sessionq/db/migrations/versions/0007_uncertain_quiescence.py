"""Uncertain quiescence claims are resolved by the quiescence workers.

Revision ID: 0007_uncertain_quiescence
Revises: 0006_session_list_views

0002 applies every file of schema/, this one included, to a clean database; this revision brings
a database made before it up to date: the uncertain claim's columns and procedures
(45_uncertain_quiescence.sql, idempotent; it replaces take_over_idle_claim with its leased form),
finish_idle that ends an uncertain claim, the truthful refusal of a new turn while one is held
(check_turn_blockers) and retry_quiescence's comment.
"""

from sessionq.db.migrations.sqlfiles import apply_functions, apply_sql_files

revision = "0007_uncertain_quiescence"
down_revision = "0006_session_list_views"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_sql_files(["45_uncertain_quiescence.sql"])
    apply_functions("30_tasks.sql", ["finish_idle", "check_turn_blockers", "retry_quiescence"])


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
