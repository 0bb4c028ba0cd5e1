"""Label search through one GIN index: the labels' pairs and keys as one array.

Revision ID: 0027_label_terms
Revises: 0026_plpgsql_quiescence

schema/upgrades/0027_label_terms.sql: sessions.label_terms (sessionq.label_terms) and its index
sessions_label_terms_idx replace the pairs' stored column label_pairs with its index and the keys'
expression index; session_filter_sql compares the terms. Rewrites sessions (the stored column).
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0027_label_terms"
down_revision = "0026_plpgsql_quiescence"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
