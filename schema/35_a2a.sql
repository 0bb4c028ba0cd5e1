-- A2A for users: what the caller may see (TaskNotFound hiding), task streams read from the event
-- history, cancel intents, push-notification configs and their deliveries.
--
-- Visibility follows the Session: a missing task, a task of a missing, deleted or expired Session
-- and another user's task answer alike (SQ404, reason TASK_NOT_FOUND). Cancel is an intent: a row
-- in task_cancels and a cancel_task job (06_jobs.sql) that tells the Actor (runtime cancel_turn)
-- and then ends the task CANCELED with finish_cancel. Each event of a task that has push configs
-- queues one delivery per config (push_deliveries) and the deliver_push job, which posts them in
-- event order, one task at a time (push_streams: a lease on the task's delivery stream).

-- a2a_task: the task a caller names, visible to them with the access they need.
CREATE OR REPLACE FUNCTION sessionq.a2a_task(
  p_task text, p_caller text, p_share_hash text, p_need text, p_namespace text DEFAULT NULL, p_agent text DEFAULT NULL
) RETURNS sessionq.tasks LANGUAGE plpgsql AS $$
DECLARE
  t sessionq.tasks;
  v sessionq.sessions;
BEGIN
  SELECT * INTO t FROM sessionq.tasks WHERE id = p_task;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', 'TaskNotFound: no such task or context', 'TASK_NOT_FOUND');
  END IF;
  BEGIN
    v := sessionq.visible_session(t.session_id, p_caller, p_share_hash, p_need);
  EXCEPTION WHEN SQLSTATE 'SQ404' THEN
    PERFORM sessionq.fail('SQ404', 'TaskNotFound: no such task or context', 'TASK_NOT_FOUND');
  END;
  IF p_namespace IS NOT NULL AND (v.agent_namespace <> p_namespace OR v.agent_name <> p_agent) THEN
    PERFORM sessionq.fail('SQ404', 'TaskNotFound: no such task or context', 'TASK_NOT_FOUND');
  END IF;
  RETURN t;
END $$;
COMMENT ON FUNCTION sessionq.a2a_task(text, text, text, text, text, text) IS
  'The task p_task for a caller who needs p_need (read, write, owner) access to its Session (locked FOR UPDATE), of Agent p_namespace/p_agent when given: TaskNotFound (SQ404, reason TASK_NOT_FOUND) when the task is missing, of another Agent, or its Session is missing, deleted, expired or another user''s; PERMISSION_DENIED for a too weak share.';

-- a2a_list_tasks: the caller's visible tasks of one agent, newest first, filtered.
CREATE OR REPLACE FUNCTION sessionq.a2a_list_tasks(
  p_caller text, p_share_hash text, p_namespace text, p_agent text, p_context uuid, p_state text,
  p_updated_after timestamptz, p_before_created timestamptz, p_before_id text, p_limit integer
) RETURNS TABLE (task jsonb, created_at timestamptz, id text, total bigint) LANGUAGE sql STABLE AS $$
  WITH visible AS (
    SELECT t.task, t.created_at, t.id
      FROM sessionq.tasks t JOIN sessionq.sessions s ON s.id = t.session_id
     WHERE s.agent_namespace = p_namespace AND s.agent_name = p_agent
       AND sessionq.access(s, p_caller, p_share_hash) IS NOT NULL
       AND (p_context IS NULL OR t.session_id = p_context)
       AND (p_state IS NULL OR t.state = p_state)
       AND (p_updated_after IS NULL OR t.updated_at > p_updated_after)
  )
  SELECT v.task, v.created_at, v.id, (SELECT count(*) FROM visible)
    FROM visible v
   WHERE p_before_created IS NULL OR (v.created_at, v.id) < (p_before_created, p_before_id)
   ORDER BY v.created_at DESC, v.id DESC
   LIMIT p_limit
$$;
COMMENT ON FUNCTION sessionq.a2a_list_tasks(text, text, text, text, uuid, text, timestamptz, timestamptz, text, integer) IS
  'A2A ListTasks: the tasks of Agent p_namespace/p_agent whose Sessions the caller may see (owner or share), optionally of one context, in one state, updated after a time; newest first, keyset-paged by (created_at, id); total: the count of all that match.';

-- a2a_task_events: the stored history of one task after a sequence number (what a stream replays).
CREATE OR REPLACE FUNCTION sessionq.a2a_task_events(p_session uuid, p_task text, p_after bigint)
RETURNS TABLE (seq bigint, kind text, payload jsonb) LANGUAGE sql STABLE AS $$
  SELECT e.seq, e.kind, e.payload FROM sessionq.events e
   WHERE e.session_id = p_session AND e.task_id = p_task AND e.seq > p_after
   ORDER BY e.seq
$$;
COMMENT ON FUNCTION sessionq.a2a_task_events(uuid, text, bigint) IS
  'The events of a task after sequence p_after, in order (kind task: an A2A Task; event: an A2A StreamResponse). A stream replays these, so a late or reconnecting subscriber misses nothing.';

-- a2a_task_snapshot: the published task and the sequence its stream continues after, read together.
CREATE OR REPLACE FUNCTION sessionq.a2a_task_snapshot(p_task text)
RETURNS TABLE (task jsonb, state text, phase text, session_id uuid, last_seq bigint) LANGUAGE sql STABLE AS $$
  SELECT t.task, t.state, t.phase, t.session_id,
         coalesce((SELECT max(e.seq) FROM sessionq.events e WHERE e.session_id = t.session_id AND e.task_id = t.id), 0)
    FROM sessionq.tasks t WHERE t.id = p_task
$$;
COMMENT ON FUNCTION sessionq.a2a_task_snapshot(text) IS
  'The published task, its state and phase, and the sequence number of its last event, in one snapshot: a subscriber sends the task and then the events after last_seq.';

-- cancel intents -----------------------------------------------------------------------------

CREATE TABLE sessionq.task_cancels (
  task_id      text PRIMARY KEY,
  session_id   uuid NOT NULL,
  requested_by text NOT NULL,
  requested_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at  timestamptz,
  outcome      text CHECK (outcome IN ('canceled', 'already_final')),
  actor_told_at timestamptz
);
COMMENT ON TABLE sessionq.task_cancels IS
  'A2A CancelTask intents: one per task. finished_at is set once the task was ended CANCELED (or had already ended on its own: already_final); actor_told_at once the Actor was told to stop (or had nothing to stop).';
CREATE INDEX task_cancels_untold_idx ON sessionq.task_cancels (session_id) WHERE actor_told_at IS NULL;

CREATE OR REPLACE FUNCTION sessionq.is_terminal_state(p_state text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT p_state IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED')
$$;
COMMENT ON FUNCTION sessionq.is_terminal_state(text) IS 'True for the A2A states no task leaves: COMPLETED, FAILED, CANCELED, REJECTED.';

-- publish_canceled: end a locked task CANCELED (and its turn, when it is the Session's current one).
CREATE OR REPLACE FUNCTION sessionq.publish_canceled(v sessionq.sessions, t sessionq.tasks) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_status jsonb := jsonb_build_object(
    'state', 'TASK_STATE_CANCELED',
    'timestamp', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'message', jsonb_build_object('role', 'ROLE_AGENT', 'messageId', sessionq.uuid_v7()::text, 'contextId', v.id::text,
                                  'taskId', t.id, 'parts', jsonb_build_array(jsonb_build_object('text', 'the task was canceled'))));
  v_task jsonb := jsonb_set(coalesce(t.staged_task, t.task), '{status}', v_status);
  v_current boolean := v.active_task_id = t.id OR v.unsettled_task_id = t.id OR v.dispatch_task_id = t.id;
BEGIN
  UPDATE sessionq.tasks SET task = v_task, state = 'TASK_STATE_CANCELED', staged_task = NULL, staged_event = NULL,
                            version = t.version + 1, published_version = t.version + 1, phase = 'settled',
                            updated_at = clock_timestamp()
   WHERE id = t.id;
  INSERT INTO sessionq.task_versions (task_id, version, payload_hash) VALUES (t.id, t.version + 1, 'canceled');
  PERFORM sessionq.append_event(v.id, t.id, 'event', jsonb_build_object('statusUpdate',
    jsonb_build_object('taskId', t.id, 'contextId', v.id::text, 'status', v_status)));
  IF v_current THEN
    UPDATE sessionq.sessions
       SET active_task_id = NULL, unsettled_task_id = NULL,
           dispatch_id = NULL, dispatch_expires_at = NULL, dispatch_message = NULL, dispatch_task_id = NULL,
           idle_boundary_id = CASE WHEN idle_executor IS NULL THEN sessionq.uuid_v7() ELSE idle_boundary_id END,
           idle_boundary_at = CASE WHEN idle_executor IS NULL THEN clock_timestamp() ELSE idle_boundary_at END,
           updated_at = clock_timestamp()
     WHERE id = v.id;
    PERFORM sessionq.notify('sessionq_idle', jsonb_build_object('session', v.id));
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.publish_canceled(sessionq.sessions, sessionq.tasks) IS
  'Internal: publish a locked task CANCELED (a new version and a status event) and, when it is the Session''s current turn, end the turn (the reservation cleared, an idle boundary marked so the Actor is suspended). Later writes of the Actor to the task are refused (it is settled).';

-- intend_cancel: record the cancel intent of a task running in the Actor and queue its job.
CREATE OR REPLACE FUNCTION sessionq.intend_cancel(p_session uuid, p_task text, p_caller text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO sessionq.task_cancels (task_id, session_id, requested_by) VALUES (p_task, p_session, p_caller)
  ON CONFLICT (task_id) DO NOTHING;
  IF FOUND THEN
    PERFORM sessionq.defer('cancel_task', p_task, jsonb_build_object('task_id', p_task));
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.intend_cancel(uuid, text, text) IS
  'Internal (the Session locked): record a cancel intent for a task running in the Actor and queue the cancel_task job, which ends the task CANCELED and tells the Actor; a second intent for the task joins the first. Used by admit_cancel and by a message with busy policy interrupt (enqueue_turn).';

-- admit_cancel: record a cancel intent (idempotent) and queue its job.
CREATE OR REPLACE FUNCTION sessionq.admit_cancel(p_task text, p_caller text, p_share_hash text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  t sessionq.tasks;
  v sessionq.sessions;
  c sessionq.task_cancels;
  v_state text;
BEGIN
  t := sessionq.a2a_task(p_task, p_caller, p_share_hash, 'write');  -- locks the Session
  SELECT * INTO v FROM sessionq.sessions WHERE id = t.session_id;
  SELECT * INTO t FROM sessionq.tasks WHERE id = t.id FOR UPDATE;
  SELECT * INTO c FROM sessionq.task_cancels WHERE task_id = t.id;
  IF FOUND THEN
    RETURN jsonb_build_object('outcome', CASE WHEN c.finished_at IS NULL THEN 'pending' ELSE 'finished' END);
  END IF;
  v_state := coalesce(t.staged_task #>> '{status,state}', t.state);
  IF sessionq.is_terminal_state(v_state) OR t.phase = 'abandoned' THEN
    PERFORM sessionq.fail('SQ412', format('task %s is %s and cannot be canceled', sessionq.clip(t.id), v_state),
                          'TASK_NOT_CANCELABLE');
  END IF;
  IF v.active_task_id = t.id OR v.unsettled_task_id = t.id OR v.dispatch_task_id = t.id AND v.dispatch_id IS NOT NULL THEN
    -- running in the Actor: the job tells it, then ends the task
    PERFORM sessionq.intend_cancel(v.id, t.id, p_caller);
    RETURN jsonb_build_object('outcome', 'pending');
  END IF;
  -- waiting for input (settled) or queued (30_tasks.sql): nothing runs, end it now
  DELETE FROM sessionq.queued_turns WHERE task_id = t.id;
  PERFORM sessionq.publish_canceled(v, t);
  INSERT INTO sessionq.task_cancels (task_id, session_id, requested_by, finished_at, outcome, actor_told_at)
  VALUES (t.id, v.id, p_caller, clock_timestamp(), 'canceled', clock_timestamp());
  RETURN jsonb_build_object('outcome', 'finished');
END $$;
COMMENT ON FUNCTION sessionq.admit_cancel(text, text, text) IS
  'A2A CancelTask: a task running in the Actor gets a cancel intent and a cancel_task job (intend_cancel); a task waiting for input, or queued behind a running turn, is ended CANCELED at once (a queued one leaves the queue). A repeated cancel joins the first (idempotent). A finished task: TASK_NOT_CANCELABLE (SQ412). Returns {outcome: pending | finished}.';

-- cancel_target: what the cancel_task job needs (NULL when there is nothing left to do).
CREATE OR REPLACE FUNCTION sessionq.cancel_target(p_task text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('task_id', c.task_id, 'session_id', s.id, 'actor_atespace', s.actor_atespace,
                            'actor_name', s.actor_name, 'actor_uid', s.actor_uid)
    FROM sessionq.task_cancels c JOIN sessionq.sessions s ON s.id = c.session_id
   WHERE c.task_id = p_task AND c.actor_told_at IS NULL
$$;
COMMENT ON FUNCTION sessionq.cancel_target(text) IS
  'Internal to the cancel_task job: a cancel whose Actor was not told yet, with its Session''s Actor (atespace, name, uid); NULL when done or absent.';

-- cancel_told: the Actor was told of a cancel; its Session's idle boundary becomes claimable.
CREATE OR REPLACE FUNCTION sessionq.cancel_told(p_task text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_session uuid;
BEGIN
  -- the Session row first, as every writer of task_cancels locks it
  PERFORM 1 FROM sessionq.sessions s JOIN sessionq.task_cancels c ON c.session_id = s.id
   WHERE c.task_id = p_task FOR UPDATE OF s;
  UPDATE sessionq.task_cancels SET actor_told_at = clock_timestamp() WHERE task_id = p_task AND actor_told_at IS NULL
  RETURNING session_id INTO v_session;
  IF v_session IS NOT NULL THEN
    PERFORM sessionq.notify('sessionq_idle', jsonb_build_object('session', v_session));  -- its boundary is claimable
    PERFORM sessionq.start_queued_turn(v_session);  -- 30_tasks.sql: the turn queued behind it may run now
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.cancel_told(text) IS
  'The cancel_task job''s last step: the Actor was told to stop the task (or had nothing to stop). The Session''s idle boundary becomes claimable (claim_idle waits for it): the quiescence workers are woken; a turn queued behind the canceled one is dispatched (start_queued_turn).';

-- finish_cancel: after the Actor was told, end the task CANCELED (unless it ended on its own).
CREATE OR REPLACE FUNCTION sessionq.finish_cancel(p_task text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  c sessionq.task_cancels;
  v sessionq.sessions;
  t sessionq.tasks;
BEGIN
  SELECT * INTO c FROM sessionq.task_cancels WHERE task_id = p_task;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  SELECT * INTO v FROM sessionq.sessions WHERE id = c.session_id FOR UPDATE;
  SELECT * INTO c FROM sessionq.task_cancels WHERE task_id = p_task FOR UPDATE;
  IF c.finished_at IS NOT NULL THEN
    RETURN c.outcome;
  END IF;
  SELECT * INTO t FROM sessionq.tasks WHERE id = p_task FOR UPDATE;
  IF sessionq.is_terminal_state(t.state) OR t.phase = 'abandoned' THEN
    UPDATE sessionq.task_cancels SET finished_at = clock_timestamp(), outcome = 'already_final' WHERE task_id = p_task;
    RETURN 'already_final';
  END IF;
  PERFORM sessionq.publish_canceled(v, t);
  UPDATE sessionq.task_cancels SET finished_at = clock_timestamp(), outcome = 'canceled' WHERE task_id = p_task;
  RETURN 'canceled';
END $$;
COMMENT ON FUNCTION sessionq.finish_cancel(text) IS
  'The cancel_task job''s completion: under the Session row lock, end the task CANCELED (publish_canceled) unless it already reached a final state, and mark the intent finished. Idempotent; returns the outcome.';

-- push notification configs ------------------------------------------------------------------

CREATE TABLE sessionq.push_configs (
  task_id     text NOT NULL,
  id          text NOT NULL CHECK (length(id) BETWEEN 1 AND 128),
  session_id  uuid NOT NULL,
  url         text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
  token       text,
  auth_scheme text,
  auth_credentials text,
  created_by  text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  share_id    uuid REFERENCES sessionq.session_shares (id) ON DELETE CASCADE,
  PRIMARY KEY (task_id, id)
);
COMMENT ON TABLE sessionq.push_configs IS
  'A2A push-notification configs of tasks: where each event of the task is POSTed, with the config''s token and authentication. A config belongs to its creator (created_by): only they read, replace or delete it; its token and credentials are write-only (never returned by the API). A config made through a share (share_id) lives as long as the share: events after the share expired queue nothing for it, and revoking the share deletes it.';
COMMENT ON COLUMN sessionq.push_configs.share_id IS
  'The share its creator wrote the task through (NULL: the Session''s owner made it). Its revocation deletes the config; after its expiry no new event is queued for the config.';

CREATE TABLE sessionq.push_deliveries (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  task_id      text NOT NULL,
  config_id    text NOT NULL,
  event_seq    bigint NOT NULL,
  payload      jsonb NOT NULL,
  state        text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
  attempts     integer NOT NULL DEFAULT 0,
  last_status  integer,
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at  timestamptz,
  UNIQUE (task_id, config_id, event_seq)
);
CREATE INDEX push_deliveries_pending_idx ON sessionq.push_deliveries (task_id, event_seq) WHERE state = 'pending';
COMMENT ON TABLE sessionq.push_deliveries IS
  'Every push notification: one per event of a task and config, delivered in event order by the deliver_push job; attempts, the last HTTP status or error and the outcome are kept for operators.';

CREATE TABLE sessionq.push_streams (
  task_id     text PRIMARY KEY,
  executor    uuid NOT NULL,
  expires_at  timestamptz NOT NULL
);
COMMENT ON TABLE sessionq.push_streams IS
  'A lease on a task''s delivery stream: one deliver_push job at a time posts a task''s notifications, so they arrive in order.';

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
CREATE TRIGGER events_push AFTER INSERT ON sessionq.events
  FOR EACH ROW EXECUTE FUNCTION sessionq.queue_push_deliveries();

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
CREATE TRIGGER push_configs_end AFTER DELETE ON sessionq.push_configs
  FOR EACH ROW EXECUTE FUNCTION sessionq.end_push_deliveries();

-- claim_push_stream: the deliver_push job takes the task's stream (a lease) or learns it is busy.
CREATE OR REPLACE FUNCTION sessionq.claim_push_stream(p_task text, p_executor uuid, p_lease double precision)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO sessionq.push_streams (task_id, executor, expires_at)
  VALUES (p_task, p_executor, clock_timestamp() + make_interval(secs => p_lease))
  ON CONFLICT (task_id) DO UPDATE SET executor = EXCLUDED.executor, expires_at = EXCLUDED.expires_at
   WHERE sessionq.push_streams.expires_at < clock_timestamp() OR sessionq.push_streams.executor = p_executor;
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION sessionq.claim_push_stream(text, uuid, double precision) IS
  'Take (or renew) the lease on a task''s push stream for p_lease seconds; false while another job holds it.';

CREATE OR REPLACE FUNCTION sessionq.release_push_stream(p_task text, p_executor uuid) RETURNS void
LANGUAGE sql AS $$
  DELETE FROM sessionq.push_streams WHERE task_id = p_task AND executor = p_executor
$$;
COMMENT ON FUNCTION sessionq.release_push_stream(text, uuid) IS 'Give a task''s push stream lease back.';

CREATE OR REPLACE FUNCTION sessionq.next_push_delivery(p_task text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT to_jsonb(d) || jsonb_build_object('url', p.url, 'token', p.token, 'auth_scheme', p.auth_scheme,
                                           'auth_credentials', p.auth_credentials)
    FROM sessionq.push_deliveries d JOIN sessionq.push_configs p ON p.task_id = d.task_id AND p.id = d.config_id
   WHERE d.task_id = p_task AND d.state = 'pending'
   ORDER BY d.event_seq, d.id
   LIMIT 1
$$;
COMMENT ON FUNCTION sessionq.next_push_delivery(text) IS
  'Internal to the deliver_push job: the oldest pending delivery of a task with its config (target, token, authentication), or NULL.';

CREATE OR REPLACE FUNCTION sessionq.record_push_attempt(
  p_delivery bigint, p_delivered boolean, p_status integer, p_error text, p_give_up boolean
) RETURNS void LANGUAGE sql AS $$
  UPDATE sessionq.push_deliveries
     SET attempts = attempts + 1, last_status = p_status, last_error = sessionq.clip(p_error, 500),
         state = CASE WHEN p_delivered THEN 'delivered' WHEN p_give_up THEN 'failed' ELSE 'pending' END,
         finished_at = CASE WHEN p_delivered OR p_give_up THEN clock_timestamp() END
   WHERE id = p_delivery AND state = 'pending'
$$;
COMMENT ON FUNCTION sessionq.record_push_attempt(bigint, boolean, integer, text, boolean) IS
  'Record one delivery attempt: delivered, failed for good (p_give_up), or still pending (retried later); keeps the HTTP status or error for operators.';
