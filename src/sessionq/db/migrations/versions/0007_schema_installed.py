"""The record of the revision a database's schema was installed at from the canonical files.

Revision ID: 0007_schema_installed
Revises: 0006_session_list_views

schema/upgrades/0007_schema_installed.sql: a database made before it gets the table, with no row
(every later upgrade applies to it); 0002 fills it on a clean database.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0007_schema_installed"
down_revision = "0006_session_list_views"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
