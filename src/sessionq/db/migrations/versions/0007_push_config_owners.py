"""Push configs belong to their creators; the console shows a user their own Sessions only.

Revision ID: 0007_push_config_owners
Revises: 0006_session_list_views

0002 applies every file of schema/ to a clean database; this revision brings a database made
before it up to date:

- the push-config procedures of schema/35_a2a.sql: Get/List return the caller's own configs only,
  never a token; Create with an id another user's config holds is ALREADY_EXISTS instead of a
  replace; Delete removes the caller's own config only (a trigger ends its pending deliveries).
  A config made through a share records it (push_configs.share_id): revoking the share deletes the
  config, and once it expired no new event is queued for it.
- existing configs: the owner is the creator (created_by). A config a share holder made before
  this revision has no recorded share, so nothing would end it with the share, and the Session's
  owner could no longer see or delete it: it becomes the Session owner's.
- sessionq.console_sees (schema/80_operator_views.sql): what the web console shows a user who is
  not an admin.
- the job history: failed deliver_push attempts recorded before the delivery named the config by
  its id carried the webhook URL in their message and traceback (`push to <url> failed: ...`);
  the URL is cut out of them.
"""

from sessionq.db.migrations.sqlfiles import apply_functions, run_sql, schema_file

revision = "0007_push_config_owners"
down_revision = "0006_session_list_views"
branch_labels = None
depends_on = None

# the earlier delivery's message, "push to <url, clipped> failed: <error>", without the URL
REDACT_PUSH_ERRORS = r"""
UPDATE sessionq.job_attempts
   SET error_message = regexp_replace(error_message, '^push to .* failed: ', 'push notification failed: ', 'n'),
       traceback = regexp_replace(traceback, 'PushFailed: push to .* failed: ',
                                  'PushFailed: push notification failed: ', 'gn')
 WHERE task_name = 'deliver_push'
   AND (error_message LIKE 'push to %' OR traceback LIKE '%PushFailed: push to %');
"""


PUSH_CONFIG_SHARES = """
ALTER TABLE sessionq.push_configs
  ADD COLUMN IF NOT EXISTS share_id uuid REFERENCES sessionq.session_shares (id) ON DELETE CASCADE;
UPDATE sessionq.push_configs p SET created_by = s.creator
  FROM sessionq.sessions s
 WHERE s.id = p.session_id AND p.share_id IS NULL AND p.created_by <> s.creator;
"""


def push_config_comments() -> str:
    """The table's and the new column's COMMENT ON statements, as schema/35_a2a.sql has them."""
    text = schema_file("35_a2a.sql")
    start = text.index("COMMENT ON TABLE sessionq.push_configs IS")
    return text[start:text.index("\n\n", start)]


def upgrade() -> None:
    run_sql(PUSH_CONFIG_SHARES)
    run_sql(push_config_comments())
    apply_functions("35_a2a.sql", ["queue_push_deliveries", "create_push_config", "list_push_configs",
                                   "delete_push_config", "end_push_deliveries"])
    apply_functions("80_operator_views.sql", ["console_sees"])
    run_sql(REDACT_PUSH_ERRORS)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
