-- Upgrade 0009_push_config_owners: push configs belong to their creators; the console shows a user
-- their own Sessions only.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- Existing configs keep their creator (created_by). A config a share holder made before has no
-- recorded share, so nothing would end it with the share and the Session's owner could no longer
-- see or delete it: it becomes the Session owner's. Failed deliver_push attempts recorded before
-- the delivery named the config by its id carried the webhook URL in their message and traceback
-- ("push to <url> failed: ..."): the URL is cut out of them.

ALTER TABLE sessionq.push_configs
  ADD COLUMN IF NOT EXISTS share_id uuid REFERENCES sessionq.session_shares (id) ON DELETE CASCADE;
UPDATE sessionq.push_configs p SET created_by = s.creator
  FROM sessionq.sessions s
 WHERE s.id = p.session_id AND p.share_id IS NULL AND p.created_by <> s.creator;
COMMENT ON TABLE sessionq.push_configs IS
  'A2A push-notification configs of tasks: where each event of the task is POSTed, with the config''s token and authentication. A config belongs to its creator (created_by): only they read, replace or delete it; its token and credentials are write-only (never returned by the API). A config made through a share (share_id) lives as long as the share: events after the share expired queue nothing for it, and revoking the share deletes it.';
COMMENT ON COLUMN sessionq.push_configs.share_id IS
  'The share its creator wrote the task through (NULL: the Session''s owner made it). Its revocation deletes the config; after its expiry no new event is queued for the config.';

CREATE OR REPLACE FUNCTION sessionq.queue_push_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_payload jsonb;
  v_count integer;
BEGIN
  IF NEW.task_id IS NULL THEN
    RETURN NULL;
  END IF;
  v_payload := CASE WHEN NEW.kind = 'task' THEN jsonb_build_object('task', NEW.payload) ELSE NEW.payload END;
  INSERT INTO sessionq.push_deliveries (task_id, config_id, event_seq, payload)
  SELECT NEW.task_id, p.id, NEW.seq, v_payload FROM sessionq.push_configs p
   WHERE p.task_id = NEW.task_id
     -- a config made through a share gets the events of the share's lifetime only
     AND (p.share_id IS NULL OR EXISTS (SELECT 1 FROM sessionq.session_shares sh WHERE sh.id = p.share_id
                                          AND (sh.expires_at IS NULL OR sh.expires_at > clock_timestamp())))
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS v_count = ROW_COUNT;
  IF v_count > 0 THEN
    PERFORM sessionq.defer('deliver_push', NEW.task_id, jsonb_build_object('task_id', NEW.task_id));
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.queue_push_deliveries() IS
  'Trigger: an event of a task with push configs queues one delivery per config (as an A2A StreamResponse) and the deliver_push job, in the same transaction as the event. A config made through a share that has expired gets none.';

CREATE OR REPLACE FUNCTION sessionq.create_push_config(
  p_task text, p_caller text, p_share_hash text, p_id text, p_url text, p_token text, p_scheme text, p_credentials text
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  t sessionq.tasks;
  p sessionq.push_configs;
  v_share uuid;
BEGIN
  t := sessionq.a2a_task(p_task, p_caller, p_share_hash, 'write');
  -- the share a caller who is not the Session's owner writes through: the config lives as long as it
  SELECT sh.id INTO v_share
    FROM sessionq.sessions s JOIN sessionq.session_shares sh ON sh.session_id = s.id
   WHERE s.id = t.session_id AND s.creator <> p_caller AND sh.token_hash = p_share_hash;
  -- a config id names one config of the task: its creator may replace it, nobody else
  INSERT INTO sessionq.push_configs (task_id, id, session_id, url, token, auth_scheme, auth_credentials, created_by,
                                     share_id)
  VALUES (t.id, p_id, t.session_id, p_url, p_token, p_scheme, p_credentials, p_caller, v_share)
  ON CONFLICT (task_id, id) DO UPDATE
     SET url = EXCLUDED.url, token = EXCLUDED.token, auth_scheme = EXCLUDED.auth_scheme,
         auth_credentials = EXCLUDED.auth_credentials, share_id = EXCLUDED.share_id
   WHERE sessionq.push_configs.created_by = EXCLUDED.created_by
  RETURNING * INTO p;
  IF p.id IS NULL THEN
    PERFORM sessionq.fail('SQ422', format('task %s already has a push notification config %s of another user; choose another id',
                                          sessionq.clip(t.id), sessionq.clip(p_id)));
  END IF;
  -- the receiver learns the task as it stands now (then every later event)
  INSERT INTO sessionq.push_deliveries (task_id, config_id, event_seq, payload)
  SELECT t.id, p.id, e.seq, jsonb_build_object('task', tt.task)
    FROM sessionq.tasks tt, LATERAL (SELECT max(seq) AS seq FROM sessionq.events
                                      WHERE session_id = tt.session_id AND task_id = tt.id) e
   WHERE tt.id = t.id AND e.seq IS NOT NULL
  ON CONFLICT DO NOTHING;
  IF FOUND THEN
    PERFORM sessionq.defer('deliver_push', t.id, jsonb_build_object('task_id', t.id));
  END IF;
  RETURN to_jsonb(p) - 'auth_credentials' - 'token' - 'share_id';
END $$;
COMMENT ON FUNCTION sessionq.create_push_config(text, text, text, text, text, text, text, text) IS
  'A2A CreateTaskPushNotificationConfig: add a push config of a task the caller may write (TaskNotFound otherwise), owned by the caller; the same id again replaces the caller''s own config, while an id another user''s config of the task holds is ALREADY_EXISTS (SQ422) and changes nothing. A share holder''s config records the share (share_id): it lives as long as the share. Queues a first notification with the task as it stands. Returns the config without its token and credentials (write-only).';

CREATE OR REPLACE FUNCTION sessionq.list_push_configs(p_task text, p_caller text, p_share_hash text, p_id text)
RETURNS SETOF jsonb LANGUAGE plpgsql AS $$
DECLARE
  t sessionq.tasks;
BEGIN
  t := sessionq.a2a_task(p_task, p_caller, p_share_hash, 'read');
  RETURN QUERY SELECT to_jsonb(p) - 'auth_credentials' - 'token' - 'share_id' FROM sessionq.push_configs p
                WHERE p.task_id = t.id AND p.created_by = p_caller AND (p_id IS NULL OR p.id = p_id)
                ORDER BY p.created_at, p.id;
END $$;
COMMENT ON FUNCTION sessionq.list_push_configs(text, text, text, text) IS
  'A2A Get/ListTaskPushNotificationConfigs: the caller''s own push configs of a visible task (one id, or all), without token and credentials; another user''s configs (the Session owner''s or a share holder''s) are not listed, as if absent. TaskNotFound for a task the caller cannot see.';

CREATE OR REPLACE FUNCTION sessionq.delete_push_config(p_task text, p_caller text, p_share_hash text, p_id text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  t sessionq.tasks;
BEGIN
  t := sessionq.a2a_task(p_task, p_caller, p_share_hash, 'write');
  DELETE FROM sessionq.push_configs WHERE task_id = t.id AND id = p_id AND created_by = p_caller;
  RETURN FOUND;  -- its pending deliveries end failed (end_push_deliveries)
END $$;
COMMENT ON FUNCTION sessionq.delete_push_config(text, text, text, text) IS
  'A2A DeleteTaskPushNotificationConfig: remove the caller''s own config of a task the caller may write (its pending deliveries end failed); false when the caller has no such config (another user''s config is left alone).';

CREATE OR REPLACE FUNCTION sessionq.end_push_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq.push_deliveries SET state = 'failed', last_error = 'the config was deleted', finished_at = clock_timestamp()
   WHERE task_id = OLD.task_id AND config_id = OLD.id AND state = 'pending';
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.end_push_deliveries() IS
  'Trigger: a deleted push config (by its creator, or with the share it was made through) ends its pending deliveries failed (''the config was deleted'').';
DROP TRIGGER IF EXISTS push_configs_end ON sessionq.push_configs;
CREATE TRIGGER push_configs_end AFTER DELETE ON sessionq.push_configs
  FOR EACH ROW EXECUTE FUNCTION sessionq.end_push_deliveries();

-- console_sees: what the web console shows a viewer who is not an admin.
CREATE OR REPLACE FUNCTION sessionq.console_sees(p_session uuid, p_viewer text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT p_viewer IS NULL
      OR EXISTS (SELECT 1 FROM sessionq.sessions s
                  WHERE s.id = p_session AND sessionq.access(s, p_viewer, NULL, s.kind) = 'owner')
$$;
COMMENT ON FUNCTION sessionq.console_sees(uuid, text) IS
  'Whether the web console shows Session (or Sandbox) p_session, and what hangs off it (its operation, claims, turns, checkpoints, jobs), to p_viewer: an admin (NULL) sees every row; anyone else what the API shows them without a share token: their own live rows (sessionq.access: owner), never another user''s nor a DELETED tombstone.';

UPDATE sessionq.job_attempts
   SET error_message = regexp_replace(error_message, '^push to .* failed: ', 'push notification failed: ', 'n'),
       traceback = regexp_replace(traceback, 'PushFailed: push to .* failed: ',
                                  'PushFailed: push notification failed: ', 'gn')
 WHERE task_name = 'deliver_push'
   AND (error_message LIKE 'push to %' OR traceback LIKE '%PushFailed: push to %');
