"""Webhook deliveries read past a cursor: no delivery row written in a transition.

Revision ID: 0028_webhook_cursor
Revises: 0027_label_terms

schema/upgrades/0028_webhook_cursor.sql: webhook_subscriptions gains its cursor (cursor_xid,
cursor_seq), its first position (from_xid) and a lease (claimed_by, claimed_until); record_event
writes no delivery row; claim_webhook_round and record_webhook_round replace claim_webhook_batch and
record_webhook_attempts; webhook_deliveries holds only failed deliveries and what waits behind them;
webhook_delivery_log shows both. Rewrites webhook_subscriptions (small).
"""

from sessionq.db.migrations.sqlfiles import apply_upgrade

revision = "0028_webhook_cursor"
down_revision = "0027_label_terms"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_upgrade(revision)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
