"""Push configs belong to their creators; the console shows a user their own Sessions only.

Revision ID: 0007_push_config_owners
Revises: 0006_session_list_views

0002 applies every file of schema/ to a clean database; this revision brings a database made
before it up to date:

- the push-config procedures of schema/35_a2a.sql: Get/List return the caller's own configs only,
  never a token; Create with an id another user's config holds is ALREADY_EXISTS instead of a
  replace; Delete removes the caller's own config only. Existing configs keep their owner, the
  created_by they were made with (the Session's owner or the share holder who created them).
- sessionq.console_sees (schema/80_operator_views.sql): what the web console shows a user who is
  not an admin.
- the job history: failed deliver_push attempts recorded before the delivery named the config by
  its id carried the webhook URL in their message and traceback (`push to <url> failed: ...`);
  the URL is cut out of them.
"""

from sessionq.db.migrations.sqlfiles import apply_functions, run_sql

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


def upgrade() -> None:
    apply_functions("35_a2a.sql", ["create_push_config", "list_push_configs", "delete_push_config"])
    apply_functions("80_operator_views.sql", ["console_sees"])
    run_sql(REDACT_PUSH_ERRORS)


def downgrade() -> None:
    raise NotImplementedError("sessionq migrations are forward-only")
