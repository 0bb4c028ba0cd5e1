"""Push configs belong to their creators; the console shows a user their own Sessions only.

Revision ID: 0009_push_config_owners
Revises: 0008_push_queue

schema/upgrades/0009_push_config_owners.sql: a database made before it gets the push-config
procedures that keep a config its creator's (Get/List the caller's own, never a token; Create with
another user's id ALREADY_EXISTS; Delete the caller's own; a share holder's config lives as long as
its share), sessionq.console_sees, configs share holders made before given to the Session's owner,
and the webhook URLs cut out of recorded delivery errors.
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0009_push_config_owners"
down_revision = "0008_push_queue"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
