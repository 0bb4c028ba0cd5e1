-- Turns: tasks, their versions and the per-Session event history; dispatch reservations;
-- staged final updates and settlement; automatic quiescence (idle boundaries and their claims).
--
-- Every rule runs under the Session row lock that lifecycle admission and idle expiration use
-- (SELECT ... FOR UPDATE on sessionq.sessions). A turn is admitted by the frontend
-- (admit_turn: a dispatch reservation and a dispatch job), executed by the Actor, which
-- reports through the task store (task_create / task_update / task_settle, authenticated as
-- the Actor). A final update is staged; settlement publishes the task and its history in one
-- transaction, marks the idle boundary and wakes the quiescence workers (NOTIFY sessionq_idle).

CREATE TABLE sessionq.tasks (
  id                text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
  session_id        uuid NOT NULL,  -- no foreign key: tasks outlive an idle-expired Session
  seq               integer NOT NULL,
  state             text NOT NULL,
  task              jsonb NOT NULL,
  version           bigint NOT NULL CHECK (version > 0),
  published_version bigint NOT NULL,
  staged_task       jsonb,
  staged_event      jsonb,
  dispatch_id       uuid,
  phase             text NOT NULL DEFAULT 'active' CHECK (phase IN ('active', 'settled', 'abandoned', 'queued')),
  created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  snapshot_pinned   boolean NOT NULL DEFAULT false,
  UNIQUE (session_id, seq),
  CHECK ((staged_task IS NULL) = (version = published_version))
);
CREATE INDEX tasks_dispatch_idx ON sessionq.tasks (dispatch_id) WHERE dispatch_id IS NOT NULL;
COMMENT ON COLUMN sessionq.tasks.snapshot_pinned IS
  'The turn had a snapshot of its own, pinned (a turn pin was begun for it, 40_checkpoints.sql): without a pin now it was released; never set for a turn the next one followed before a suspend (back to back, keep warm), which shares that later snapshot.';
COMMENT ON TABLE sessionq.tasks IS
  'A2A tasks (turns) of Sessions. task is the published A2A Task (protobuf JSON); a final update waits in staged_task until the Actor settles it. phase: active, settled, abandoned (an interrupted turn that must not be continued), or queued (a message admitted with busy policy enqueue or interrupt while another turn ran: SUBMITTED, waiting in queued_turns). Kept after the Session expires.';

-- queued turns: messages admitted while another turn ran (busy policy enqueue or interrupt), each
-- with its task (phase queued, SUBMITTED), dispatched one at a time when the current turn ends.
CREATE TABLE sessionq.queued_turns (
  task_id      text PRIMARY KEY REFERENCES sessionq.tasks (id) ON DELETE CASCADE,
  session_id   uuid NOT NULL,
  position     bigint NOT NULL,
  policy       text NOT NULL CHECK (policy IN ('enqueue', 'interrupt')),
  message      jsonb NOT NULL,
  dispatch_ttl double precision NOT NULL CHECK (dispatch_ttl > 0),
  enqueued_by  text NOT NULL,
  enqueued_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  UNIQUE (session_id, position)
);
COMMENT ON TABLE sessionq.queued_turns IS
  'Turns waiting for the running turn of their Session to end, in order of position (arrival; an interrupting message goes ahead of the waiting ones). The message (A2A Message JSON) is dispatched as the turn of its task (tasks.phase queued) by start_queued_turn when the current turn settles, fails or is canceled and its Actor told. Durable: any replica dispatches them, after any restart.';

CREATE TABLE sessionq.task_versions (
  task_id      text NOT NULL,
  version      bigint NOT NULL,
  payload_hash text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (task_id, version)
);
COMMENT ON TABLE sessionq.task_versions IS
  'One row per committed task version with the hash of the write that made it: an identical retry returns the committed version, anything else with a stale expected version is ABORTED.';

CREATE TABLE sessionq.events (
  session_id  uuid NOT NULL,
  seq         bigint NOT NULL,
  task_id     text,
  kind        text NOT NULL,
  payload     jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (session_id, seq)
);
COMMENT ON TABLE sessionq.events IS
  'The event history of each Session in a per-Session sequence, each with its database timestamp. Forks copy the history with the original timestamps. Kept after the Session expires.';

CREATE OR REPLACE FUNCTION sessionq.notify_task_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM sessionq.notify('sessionq_task', jsonb_build_object('session', NEW.session_id));
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.notify_task_change() IS
  'Trigger: NOTIFY sessionq_task {"session"} when one of its tasks changes (waiting SendMessage calls re-read).';
CREATE TRIGGER tasks_notify AFTER INSERT OR UPDATE ON sessionq.tasks
  FOR EACH ROW EXECUTE FUNCTION sessionq.notify_task_change();

-- append_event: add one event to a locked Session's history (the idle clock moves with it).
CREATE OR REPLACE FUNCTION sessionq.append_event(p_session uuid, p_task text, p_kind text, p_payload jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_seq bigint;
  v_now timestamptz := clock_timestamp();
BEGIN
  UPDATE sessionq.sessions SET last_event_seq = last_event_seq + 1, last_event_at = v_now
   WHERE id = p_session RETURNING last_event_seq INTO v_seq;
  INSERT INTO sessionq.events (session_id, seq, task_id, kind, payload, created_at)
  VALUES (p_session, v_seq, p_task, p_kind, p_payload, v_now);
  RETURN v_seq;
END $$;
COMMENT ON FUNCTION sessionq.append_event(uuid, text, text, jsonb) IS
  'Internal: append an event to the Session''s history with the next sequence number and the database time; moves last_event_at (the idle clock). Call with the Session row locked.';

CREATE OR REPLACE FUNCTION sessionq.is_boundary_state(p_state text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT p_state IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED',
                     'TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED')
$$;
COMMENT ON FUNCTION sessionq.is_boundary_state(text) IS
  'True for the states that end a turn: terminal (COMPLETED, FAILED, CANCELED, REJECTED) and waiting (INPUT_REQUIRED, AUTH_REQUIRED).';

-- check_turn_blockers: work that blocks a new turn's execution.
CREATE OR REPLACE FUNCTION sessionq.check_turn_blockers(v sessionq.sessions) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF v.state = 'DELETING' THEN
    PERFORM sessionq.fail('SQ412', format('session %s is being deleted and admits no new turn', v.id));
  END IF;
  IF v.state = 'CREATING' THEN
    PERFORM sessionq.fail('SQ409', format('session %s is still being created; retry shortly', v.id));
  END IF;
  IF v.operation <> 'NONE' THEN
    PERFORM sessionq.fail('SQ409', format('session %s has a pending %s operation; retry after it completes', v.id, lower(v.operation)));
  END IF;
  IF v.state = 'SUSPENDED' THEN
    PERFORM sessionq.fail('SQ412', format('session %s is suspended; resume it before sending a message', v.id));
  END IF;
  IF v.state <> 'READY' THEN
    PERFORM sessionq.fail('SQ412', format('session %s is %s', v.id, v.state));
  END IF;
  IF v.idle_executor IS NOT NULL AND v.idle_uncertain_at IS NOT NULL THEN
    -- an uncertain quiescence claim (idle_uncertain_at) blocks new work until resolved (Q-10);
    -- the hint: its next attempt and a little more, at most half a minute (a worker holding it over
    -- has a lease of minutes but usually answers within a second)
    PERFORM sessionq.fail('SQ409', format(
      'session %s is confirming that its last suspend reached the runtime (the runtime did not answer); retry in about %s s',
      v.id, ceil(least(greatest(extract(epoch FROM v.idle_retry_at - clock_timestamp()), 0), 30)) + 2),
      'KAGENT_SESSION_BUSY');
  END IF;
  IF v.unsettled_task_id IS NOT NULL THEN
    PERFORM sessionq.fail('SQ409', format('the previous turn of session %s is still finishing (task %s is not settled)', v.id, v.unsettled_task_id),
                          'KAGENT_SEND_NOT_ACCEPTED');
  END IF;
  IF v.active_task_id IS NULL AND v.idle_executor IS NOT NULL
     AND v.dispatch_id IS NOT NULL AND v.dispatch_expires_at > clock_timestamp() THEN
    PERFORM sessionq.fail('SQ409', format(
      'a turn of session %s is waiting for its last suspend to be recorded; retry shortly', v.id), 'KAGENT_SESSION_BUSY');
  END IF;
  IF v.active_task_id IS NOT NULL OR v.dispatch_id IS NOT NULL AND v.dispatch_expires_at > clock_timestamp() THEN
    PERFORM sessionq.fail('SQ409', format('a turn is already running on session %s', v.id), 'KAGENT_SEND_NOT_ACCEPTED');
  END IF;
  IF EXISTS (SELECT 1 FROM sessionq.queued_turns q WHERE q.session_id = v.id) THEN
    PERFORM sessionq.fail('SQ409', format('a turn is already running on session %s and others wait after it', v.id),
                          'KAGENT_SEND_NOT_ACCEPTED');
  END IF;
  PERFORM sessionq.check_checkpoint_blockers(v);  -- a checkpoint being created (40_checkpoints.sql)
END $$;
COMMENT ON FUNCTION sessionq.check_turn_blockers(sessionq.sessions) IS
  'Raise unless a locked Session can take a new turn: READY, no pending operation, no uncertain quiescence claim (its last suspend is being confirmed: ABORTED with KAGENT_SESSION_BUSY and when to retry), no running, unsettled or queued turn (ABORTED with KAGENT_SEND_NOT_ACCEPTED: the busy policy reject; a dispatched turn waiting for a quiescence claim to be recorded says so), no checkpoint being created.';

-- busy_policy: what a message to a busy Session does (the request's choice, else its Agent's, else reject).
CREATE OR REPLACE FUNCTION sessionq.busy_policy(v sessionq.sessions, p_policy text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_policy text := p_policy;
BEGIN
  IF v_policy IS NULL THEN
    SELECT r.spec ->> 'busyPolicy' INTO v_policy FROM sessionq.revisions r WHERE r.id = v.revision_id;
  END IF;
  v_policy := coalesce(v_policy, 'reject');
  IF v_policy NOT IN ('reject', 'enqueue', 'interrupt') THEN
    PERFORM sessionq.fail('SQ400', format('busyPolicy %s is not one of reject, enqueue, interrupt', sessionq.clip(v_policy)),
                          'INVALID_PARAMS');
  END IF;
  RETURN v_policy;
END $$;
COMMENT ON FUNCTION sessionq.busy_policy(sessionq.sessions, text) IS
  'The busy policy of a message to a Session: p_policy (the message''s metadata busyPolicy), else the busyPolicy of the Agent spec of the Session''s revision, else reject. An unknown name is INVALID_ARGUMENT.';

-- turn_busy: is a turn running, dispatched, unsettled or waiting in the queue? PL/pgSQL so that its
-- plan is kept (PostgreSQL before 18 plans an SQL function's body on every call that is not
-- inlined, and one that reads a table never is): admit_turn asks it once per message.
CREATE OR REPLACE FUNCTION sessionq.turn_busy(v sessionq.sessions) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN v.active_task_id IS NOT NULL OR v.unsettled_task_id IS NOT NULL
      OR v.dispatch_id IS NOT NULL AND v.dispatch_expires_at > clock_timestamp()
      OR EXISTS (SELECT 1 FROM sessionq.queued_turns q WHERE q.session_id = v.id);
END $$;
COMMENT ON FUNCTION sessionq.turn_busy(sessionq.sessions) IS
  'True while a turn of the Session runs, is dispatched, is unsettled or waits in queued_turns: a new message then follows its busy policy.';

-- admit_turn: record a user message as a turn with a dispatch reservation and queue its dispatch.
CREATE OR REPLACE FUNCTION sessionq.admit_turn(
  p_session uuid, p_caller text, p_share_hash text, p_message jsonb, p_task_id text, p_ttl double precision,
  p_policy text DEFAULT NULL, p_queue_limit integer DEFAULT 100
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  t sessionq.tasks;
  v_policy text;
BEGIN
  v := sessionq.visible_session(p_session, p_caller, p_share_hash, 'write');
  v_policy := sessionq.busy_policy(v, p_policy);
  -- a lapsed reservation does not hold the queue back
  PERFORM sessionq.start_queued_turn(v.id);
  SELECT * INTO v FROM sessionq.sessions WHERE id = v.id;
  IF v_policy <> 'reject' AND p_task_id IS NULL AND v.state = 'READY' AND v.operation = 'NONE'
     AND sessionq.turn_busy(v) THEN
    RETURN sessionq.enqueue_turn(v, p_caller, p_message, p_ttl, v_policy, p_queue_limit);
  END IF;
  PERFORM sessionq.check_turn_blockers(v);
  IF p_task_id IS NOT NULL THEN
    SELECT * INTO t FROM sessionq.tasks WHERE id = p_task_id AND session_id = v.id;
    IF NOT FOUND THEN
      PERFORM sessionq.fail('SQ404', format('task %s not found', sessionq.clip(p_task_id)), 'TaskNotFound');
    END IF;
    IF t.phase = 'abandoned' THEN
      PERFORM sessionq.fail('SQ412', format(
        'task %s was interrupted and cannot be continued; start a new session (send without a context or task ID)', sessionq.clip(t.id)));
    END IF;
    IF t.state NOT IN ('TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED') THEN
      PERFORM sessionq.fail('SQ412', format('task %s is %s and is not waiting for input', sessionq.clip(t.id), t.state));
    END IF;
  END IF;
  UPDATE sessionq.sessions s
     SET dispatch_id = sessionq.uuid_v7(),
         dispatch_expires_at = clock_timestamp() + make_interval(secs => p_ttl),
         dispatch_message = p_message,
         dispatch_task_id = p_task_id,
         dispatch_failure = NULL,
         actor_paused_at = CASE WHEN s.idle_executor IS NULL THEN NULL ELSE s.actor_paused_at END,  -- the dispatch resumes it
         -- a new turn supersedes idle work nobody claimed yet; claimed work blocks the dispatch until recorded
         idle_boundary_id = CASE WHEN s.idle_executor IS NULL THEN NULL ELSE s.idle_boundary_id END,
         idle_boundary_at = CASE WHEN s.idle_executor IS NULL THEN NULL ELSE s.idle_boundary_at END,
         updated_at = clock_timestamp()
   WHERE s.id = v.id
  RETURNING * INTO v;
  -- the job delivers whatever turn is current when it runs: a job still waiting covers this one
  PERFORM sessionq.defer('dispatch_turn', v.id::text, jsonb_build_object('session_id', v.id));
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.admit_turn(uuid, text, text, jsonb, text, double precision, text, integer) IS
  'Admit a user message as a turn under the Session row lock: write access, READY, no pending operation or checkpoint; a continuation names a waiting task (an abandoned one is refused: start a new session). While another turn runs, is dispatched, unsettled or queued, the busy policy decides (busy_policy: p_policy, else the Agent''s, else reject): reject refuses (ABORTED, KAGENT_SEND_NOT_ACCEPTED), enqueue and interrupt queue a new conversation turn (enqueue_turn; a continuation is refused as with reject). Otherwise records the dispatch reservation and queues dispatch_turn. Returns the Session row, with queued_task_id when the message was queued.';

-- enqueue_turn: a message to a busy Session becomes a queued turn with a SUBMITTED task.
CREATE OR REPLACE FUNCTION sessionq.enqueue_turn(
  v sessionq.sessions, p_caller text, p_message jsonb, p_ttl double precision, p_policy text, p_limit integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_count integer;
  v_position bigint;
  v_task_id text := sessionq.uuid_v7()::text;
  v_task jsonb;
  v_seq integer;
  v_running text;
  r sessionq.tasks;
BEGIN
  SELECT count(*), CASE WHEN p_policy = 'interrupt' THEN coalesce(min(q.position), 0) - 1
                        ELSE coalesce(max(q.position), 0) + 1 END
    INTO v_count, v_position
    FROM sessionq.queued_turns q WHERE q.session_id = v.id;
  IF v_count >= p_limit THEN
    PERFORM sessionq.fail('SQ429', format(
      'session %s already has %s queued turns, the most it takes (sessions.maxQueuedTurns); retry after one has run',
      v.id, v_count), 'KAGENT_TURN_QUEUE_FULL');
  END IF;
  v_task := jsonb_build_object(
    'id', v_task_id, 'contextId', v.id::text,
    'status', jsonb_build_object('state', 'TASK_STATE_SUBMITTED',
                                 'timestamp', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
    'history', jsonb_build_array(p_message || jsonb_build_object('taskId', v_task_id)));
  SELECT coalesce(max(seq), 0) + 1 INTO v_seq FROM sessionq.tasks WHERE session_id = v.id;
  INSERT INTO sessionq.tasks (id, session_id, seq, state, task, version, published_version, phase)
  VALUES (v_task_id, v.id, v_seq, 'TASK_STATE_SUBMITTED', v_task, 1, 1, 'queued');
  INSERT INTO sessionq.task_versions (task_id, version, payload_hash) VALUES (v_task_id, 1, 'queued');
  PERFORM sessionq.append_event(v.id, v_task_id, 'task', v_task);
  INSERT INTO sessionq.queued_turns (task_id, session_id, position, policy, message, dispatch_ttl, enqueued_by)
  VALUES (v_task_id, v.id, v_position, p_policy, p_message || jsonb_build_object('taskId', v_task_id), p_ttl, p_caller);
  IF p_policy = 'interrupt' THEN
    -- the running turn is canceled as A2A CancelTask would (a turn whose final update is staged is finishing anyway)
    v_running := coalesce(v.active_task_id, CASE WHEN v.dispatch_id IS NOT NULL THEN v.dispatch_task_id END);
    IF v_running IS NOT NULL THEN
      SELECT * INTO r FROM sessionq.tasks WHERE id = v_running FOR UPDATE;
      IF r.staged_task IS NULL AND NOT sessionq.is_terminal_state(r.state) AND r.phase <> 'abandoned' THEN
        PERFORM sessionq.intend_cancel(v.id, r.id, p_caller);  -- 35_a2a.sql
      END IF;
    END IF;
  END IF;
  RETURN to_jsonb(v) || jsonb_build_object('queued_task_id', v_task_id);
END $$;
COMMENT ON FUNCTION sessionq.enqueue_turn(sessionq.sessions, text, jsonb, double precision, text, integer) IS
  'Internal to admit_turn (the Session locked and busy): store the message as a queued turn, its task SUBMITTED (phase queued, one event), behind the waiting ones (enqueue) or ahead of them (interrupt, which also records a cancel intent for the running turn unless it is already finishing). More than p_limit waiting: RESOURCE_EXHAUSTED (KAGENT_TURN_QUEUE_FULL), nothing written. Returns the Session row with queued_task_id.';

-- start_queued_turn: the current turn ended; dispatch the next queued one.
CREATE OR REPLACE FUNCTION sessionq.start_queued_turn(p_session uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  q sessionq.queued_turns;
BEGIN
  SELECT * INTO v FROM sessionq.sessions WHERE id = p_session FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  SELECT * INTO q FROM sessionq.queued_turns WHERE session_id = v.id ORDER BY position LIMIT 1;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF v.state <> 'READY' OR v.operation <> 'NONE' THEN
    -- a lifecycle change came first: queued turns end as turns that never started
    PERFORM sessionq.drop_queued_turns(v.id, format('the session is %s', lower(CASE WHEN v.operation <> 'NONE'
                                                     THEN v.operation || ' pending' ELSE v.state END)));
    RETURN NULL;
  END IF;
  IF v.active_task_id IS NOT NULL OR v.unsettled_task_id IS NOT NULL
     OR v.dispatch_id IS NOT NULL AND v.dispatch_expires_at > clock_timestamp()
     OR EXISTS (SELECT 1 FROM sessionq.task_cancels c  -- 35_a2a.sql: a canceled turn may still run in the Actor
                 WHERE c.session_id = v.id AND c.actor_told_at IS NULL
                   AND c.finished_at > clock_timestamp() - interval '10 minutes') THEN
    RETURN NULL;  -- still busy: the end of that turn (or cancel_told) starts the next
  END IF;
  DELETE FROM sessionq.queued_turns WHERE task_id = q.task_id;
  -- the Actor adds the message to the task's history itself when it takes the turn
  UPDATE sessionq.tasks SET task = jsonb_set(task, '{history}', '[]'::jsonb), updated_at = clock_timestamp()
   WHERE id = q.task_id;
  UPDATE sessionq.sessions s
     SET dispatch_id = sessionq.uuid_v7(),
         dispatch_expires_at = clock_timestamp() + make_interval(secs => q.dispatch_ttl),
         dispatch_message = q.message,
         dispatch_task_id = q.task_id,
         dispatch_failure = NULL,
         idle_boundary_id = CASE WHEN s.idle_executor IS NULL THEN NULL ELSE s.idle_boundary_id END,
         idle_boundary_at = CASE WHEN s.idle_executor IS NULL THEN NULL ELSE s.idle_boundary_at END,
         updated_at = clock_timestamp()
   WHERE s.id = v.id;
  PERFORM sessionq.defer('dispatch_turn', v.id::text, jsonb_build_object('session_id', v.id));
  RETURN q.task_id;
END $$;
COMMENT ON FUNCTION sessionq.start_queued_turn(uuid) IS
  'Lock the Session and, when nothing runs, is dispatched or unsettled and no canceled turn waits for its Actor to be told, dispatch the first queued turn (position order) as the turn of its task: the reservation (its dispatch_ttl), unclaimed idle work superseded, dispatch_turn queued. A Session no longer READY, or with an operation pending, ends every queued turn (drop_queued_turns). Called when a turn settles, fails or is canceled, when a cancel was told, and at admission. Returns the dispatched task id or NULL.';

-- drop_queued_turns: end every queued turn of a Session as a turn that never started.
CREATE OR REPLACE FUNCTION sessionq.drop_queued_turns(p_session uuid, p_reason text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  t sessionq.tasks;
  v_task jsonb;
  n integer := 0;
BEGIN
  FOR t IN SELECT tk.* FROM sessionq.queued_turns q JOIN sessionq.tasks tk ON tk.id = q.task_id
            WHERE q.session_id = p_session ORDER BY q.position FOR UPDATE OF tk LOOP
    v_task := jsonb_set(t.task, '{status}', jsonb_build_object(
      'state', 'TASK_STATE_FAILED',
      'timestamp', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
      'message', jsonb_build_object('role', 'ROLE_AGENT', 'messageId', sessionq.uuid_v7()::text,
                                    'contextId', p_session::text, 'taskId', t.id,
                                    'parts', jsonb_build_array(jsonb_build_object('text', 'the turn never ran: ' || p_reason)))));
    UPDATE sessionq.tasks SET task = v_task, state = 'TASK_STATE_FAILED', version = t.version + 1,
                              published_version = t.version + 1, phase = 'abandoned', updated_at = clock_timestamp()
     WHERE id = t.id;
    INSERT INTO sessionq.task_versions (task_id, version, payload_hash) VALUES (t.id, t.version + 1, 'abandoned');
    IF EXISTS (SELECT 1 FROM sessionq.sessions WHERE id = p_session) THEN
      PERFORM sessionq.append_event(p_session, t.id, 'task', v_task);
    END IF;
    DELETE FROM sessionq.queued_turns WHERE task_id = t.id;
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION sessionq.drop_queued_turns(uuid, text) IS
  'End every queued turn of a Session (locked by the caller) as deletion, expiry and lifecycle changes end a turn that never started: its task published FAILED with p_reason, abandoned (never continued), its queue entry removed. Returns how many.';

-- task_create: the Actor stores a new task of the current dispatch.
CREATE OR REPLACE FUNCTION sessionq.task_create(
  p_session uuid, p_task_id text, p_task jsonb, p_dispatch uuid, p_hash text
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  t sessionq.tasks;
  v_state text := coalesce(p_task #>> '{status,state}', 'TASK_STATE_SUBMITTED');
  v_seq integer;
BEGIN
  SELECT * INTO v FROM sessionq.sessions WHERE id = p_session FOR UPDATE;
  IF NOT FOUND OR v.state = 'DELETED' THEN
    PERFORM sessionq.fail('SQ404', format('session %s not found', p_session));
  END IF;
  SELECT * INTO t FROM sessionq.tasks WHERE id = p_task_id;
  IF FOUND AND t.session_id = p_session THEN
    IF EXISTS (SELECT 1 FROM sessionq.task_versions tv
                WHERE tv.task_id = p_task_id AND tv.version = 1 AND tv.payload_hash = p_hash) THEN
      RETURN 1;  -- a retry of the same creation
    END IF;
    PERFORM sessionq.fail('SQ409', format('task %s already exists with a different payload', sessionq.clip(p_task_id)));
  END IF;
  IF v.state = 'DELETING' THEN
    PERFORM sessionq.fail('SQ412', format('session %s is being deleted and admits no task writes', v.id));
  END IF;
  IF v.unsettled_task_id IS NOT NULL THEN
    PERFORM sessionq.fail('SQ409', format('task %s of session %s is not settled yet', v.unsettled_task_id, v.id));
  END IF;
  IF p_dispatch IS NULL OR v.dispatch_id IS DISTINCT FROM p_dispatch OR v.dispatch_task_id IS NOT NULL THEN
    PERFORM sessionq.fail('SQ412', format('dispatch %s is not the current turn of session %s', p_dispatch, v.id));
  END IF;
  IF v.idle_executor IS NOT NULL THEN
    PERFORM sessionq.fail('SQ409', format('session %s is being quiesced; retry', v.id));
  END IF;
  IF t.id IS NOT NULL THEN
    -- checked last: only the holder of the current dispatch learns that an id is taken
    PERFORM sessionq.fail('SQ422', format('task id %s is already in use; choose another', sessionq.clip(p_task_id)));
  END IF;
  SELECT coalesce(max(seq), 0) + 1 INTO v_seq FROM sessionq.tasks WHERE session_id = v.id;
  INSERT INTO sessionq.tasks (id, session_id, seq, state, task, version, published_version, dispatch_id)
  VALUES (p_task_id, v.id, v_seq, v_state, p_task, 1, 1, p_dispatch);
  INSERT INTO sessionq.task_versions (task_id, version, payload_hash) VALUES (p_task_id, 1, p_hash);
  PERFORM sessionq.append_event(v.id, p_task_id, 'task', p_task);
  UPDATE sessionq.sessions SET active_task_id = p_task_id, dispatch_task_id = p_task_id, updated_at = clock_timestamp()
   WHERE id = v.id;
  RETURN 1;
END $$;
COMMENT ON FUNCTION sessionq.task_create(uuid, text, jsonb, uuid, text) IS
  'Task store CreateTask: store version 1 of a new task of the current dispatch reservation and its first event. An identical retry returns 1; another payload under the same id is ABORTED. Refused for DELETING or deleted Sessions, while a task is unsettled, or while idle work is claimed.';

-- task_update: a versioned update; a final one is staged until settlement.
CREATE OR REPLACE FUNCTION sessionq.task_update(
  p_session uuid, p_task_id text, p_task jsonb, p_expected bigint, p_event jsonb, p_dispatch uuid, p_hash text
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  t sessionq.tasks;
  v_state text := coalesce(p_task #>> '{status,state}', 'TASK_STATE_WORKING');
  v_version bigint;
BEGIN
  IF p_expected IS NULL OR p_expected <= 0 THEN
    PERFORM sessionq.fail('SQ400', 'expected_version must be greater than 0');
  END IF;
  SELECT * INTO v FROM sessionq.sessions WHERE id = p_session FOR UPDATE;
  IF NOT FOUND OR v.state = 'DELETED' THEN
    PERFORM sessionq.fail('SQ404', format('session %s not found', p_session));
  END IF;
  SELECT * INTO t FROM sessionq.tasks WHERE id = p_task_id AND session_id = p_session FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('task %s not found', sessionq.clip(p_task_id)));
  END IF;
  IF t.version > p_expected THEN
    IF EXISTS (SELECT 1 FROM sessionq.task_versions tv
                WHERE tv.task_id = p_task_id AND tv.version = p_expected + 1 AND tv.payload_hash = p_hash) THEN
      RETURN p_expected + 1;  -- a retry of a committed write: same answer, no new event
    END IF;
    PERFORM sessionq.fail('SQ409', format('task %s is at version %s; version %s is stale', sessionq.clip(p_task_id), t.version, p_expected));
  END IF;
  IF t.version < p_expected THEN
    PERFORM sessionq.fail('SQ409', format('task %s is at version %s, not %s', sessionq.clip(p_task_id), t.version, p_expected));
  END IF;
  IF v.state = 'DELETING' THEN
    PERFORM sessionq.fail('SQ412', format('session %s is being deleted and admits no task writes', v.id));
  END IF;
  IF t.staged_task IS NOT NULL THEN
    PERFORM sessionq.fail('SQ409', format('task %s has a staged final update; settle it first', sessionq.clip(p_task_id)));
  END IF;
  IF t.phase = 'abandoned' THEN
    PERFORM sessionq.fail('SQ412', format('task %s was interrupted and cannot be continued; start a new session', sessionq.clip(p_task_id)));
  END IF;
  IF t.phase IN ('settled', 'queued') THEN
    -- only the continuation (or the queued turn) that the current dispatch carries may reopen a settled waiting task
    IF p_dispatch IS NULL OR v.dispatch_id IS DISTINCT FROM p_dispatch OR v.dispatch_task_id IS DISTINCT FROM p_task_id THEN
      PERFORM sessionq.fail('SQ412', format('task %s is %s', sessionq.clip(p_task_id), t.phase));
    END IF;
    IF v.unsettled_task_id IS NOT NULL THEN
      PERFORM sessionq.fail('SQ409', format('task %s of session %s is not settled yet', v.unsettled_task_id, v.id));
    END IF;
    IF v.idle_executor IS NOT NULL THEN
      PERFORM sessionq.fail('SQ409', format('session %s is being quiesced; retry', v.id));
    END IF;
  END IF;
  v_version := t.version + 1;
  INSERT INTO sessionq.task_versions (task_id, version, payload_hash) VALUES (p_task_id, v_version, p_hash);
  IF p_dispatch IS NOT NULL AND t.dispatch_id IS DISTINCT FROM p_dispatch THEN
    UPDATE sessionq.tasks SET dispatch_id = p_dispatch WHERE id = p_task_id;  -- a continuation's turn
  END IF;
  IF sessionq.is_boundary_state(v_state) THEN
    UPDATE sessionq.tasks SET staged_task = p_task, staged_event = p_event, version = v_version,
                              phase = 'active', updated_at = clock_timestamp()
     WHERE id = p_task_id;
    UPDATE sessionq.sessions SET unsettled_task_id = p_task_id, active_task_id = p_task_id, updated_at = clock_timestamp()
     WHERE id = v.id;
  ELSE
    UPDATE sessionq.tasks SET task = p_task, state = v_state, version = v_version, published_version = v_version,
                              phase = 'active', updated_at = clock_timestamp()
     WHERE id = p_task_id;
    PERFORM sessionq.append_event(v.id, p_task_id, CASE WHEN p_event IS NULL THEN 'task' ELSE 'event' END,
                                  coalesce(p_event, p_task));
    UPDATE sessionq.sessions SET active_task_id = p_task_id, updated_at = clock_timestamp() WHERE id = v.id;
  END IF;
  RETURN v_version;
END $$;
COMMENT ON FUNCTION sessionq.task_update(uuid, text, jsonb, bigint, jsonb, uuid, text) IS
  'Task store UpdateTask under optimistic concurrency: expected_version must be current (an identical retry of a committed write returns its version; otherwise stale: ABORTED). A final or waiting state is staged (published at settlement); other updates publish with their event. A settled waiting task or a queued one is written only by the dispatch that carries it.';

-- task_settle: native execution stopped; publish the staged update and mark the idle boundary.
CREATE OR REPLACE FUNCTION sessionq.task_settle(p_session uuid, p_task_id text, p_version bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  t sessionq.tasks;
BEGIN
  SELECT * INTO v FROM sessionq.sessions WHERE id = p_session FOR UPDATE;
  IF NOT FOUND OR v.state = 'DELETED' THEN
    PERFORM sessionq.fail('SQ404', format('session %s not found', p_session));
  END IF;
  SELECT * INTO t FROM sessionq.tasks WHERE id = p_task_id AND session_id = p_session FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('task %s not found', sessionq.clip(p_task_id)));
  END IF;
  IF t.staged_task IS NULL THEN
    IF t.phase IN ('settled', 'abandoned') AND t.published_version = p_version THEN
      RETURN;  -- a retried settlement: already published, nothing moves
    END IF;
    PERFORM sessionq.fail('SQ409', format('task %s has no staged update at version %s', sessionq.clip(p_task_id), p_version));
  END IF;
  IF t.version <> p_version THEN
    PERFORM sessionq.fail('SQ409', format('task %s is staged at version %s, not %s', sessionq.clip(p_task_id), t.version, p_version));
  END IF;
  UPDATE sessionq.tasks
     SET task = t.staged_task, state = coalesce(t.staged_task #>> '{status,state}', t.state),
         published_version = t.version, staged_task = NULL, staged_event = NULL, phase = 'settled',
         updated_at = clock_timestamp()
   WHERE id = p_task_id;
  PERFORM sessionq.append_event(v.id, p_task_id, CASE WHEN t.staged_event IS NULL THEN 'task' ELSE 'event' END,
                                coalesce(t.staged_event, t.staged_task));
  UPDATE sessionq.sessions
     SET active_task_id = NULL, unsettled_task_id = NULL,
         dispatch_id = NULL, dispatch_expires_at = NULL, dispatch_message = NULL, dispatch_task_id = NULL,
         idle_boundary_id = sessionq.uuid_v7(), idle_boundary_at = clock_timestamp(),
         updated_at = clock_timestamp()
   WHERE id = v.id;
  PERFORM sessionq.notify('sessionq_idle', jsonb_build_object('session', v.id));
  PERFORM sessionq.start_queued_turn(v.id);  -- a queued turn supersedes the idle boundary
END $$;
COMMENT ON FUNCTION sessionq.task_settle(uuid, text, bigint) IS
  'Task store SettleTask: the Actor''s native execution stopped at p_version. Publishes the staged task and its event atomically, ends the turn, marks the idle boundary and wakes quiescence workers, or dispatches the next queued turn (start_queued_turn). Does not wait for suspension; a retry is a no-op.';

-- task_finish: the final update of a turn and its settlement in one transaction.
CREATE OR REPLACE FUNCTION sessionq.task_finish(
  p_session uuid, p_task_id text, p_task jsonb, p_expected bigint, p_event jsonb, p_dispatch uuid, p_hash text
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_version bigint;
BEGIN
  IF NOT sessionq.is_boundary_state(coalesce(p_task #>> '{status,state}', 'TASK_STATE_WORKING')) THEN
    PERFORM sessionq.fail('SQ400', 'only an update to a final or waiting state can settle the task');
  END IF;
  v_version := sessionq.task_update(p_session, p_task_id, p_task, p_expected, p_event, p_dispatch, p_hash);
  PERFORM sessionq.task_settle(p_session, p_task_id, v_version);
  RETURN v_version;
END $$;
COMMENT ON FUNCTION sessionq.task_finish(uuid, text, jsonb, bigint, jsonb, uuid, text) IS
  'Task store UpdateTask sent with the settle header: an update to a final or waiting state (anything else is INVALID_ARGUMENT) that also settles the task at the version it makes, in one transaction: task_update then task_settle, with their rules and answers. An identical retry returns the committed version and settles nothing twice.';

-- fail_dispatch: the dispatch job could not run the turn; end it so the Session is usable again.
CREATE OR REPLACE FUNCTION sessionq.fail_dispatch(p_session uuid, p_dispatch uuid, p_message text, p_issued boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  t sessionq.tasks;
  v_task jsonb;
BEGIN
  SELECT * INTO v FROM sessionq.sessions WHERE id = p_session FOR UPDATE;
  IF NOT FOUND OR v.dispatch_id IS DISTINCT FROM p_dispatch THEN
    RETURN;  -- already ended or superseded
  END IF;
  IF v.dispatch_task_id IS NOT NULL THEN
    SELECT * INTO t FROM sessionq.tasks WHERE id = v.dispatch_task_id FOR UPDATE;
  END IF;
  IF t.id IS NOT NULL AND t.phase <> 'settled' OR t.id IS NOT NULL AND v.active_task_id = t.id THEN
    -- the turn started in the Actor and did not finish: it is abandoned, never resumed
    v_task := jsonb_set(coalesce(t.staged_task, t.task), '{status}',
                        jsonb_build_object('state', 'TASK_STATE_FAILED', 'timestamp',
                                           to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                                           'message', jsonb_build_object('role', 'ROLE_AGENT', 'messageId', sessionq.uuid_v7()::text,
                                             'contextId', v.id::text, 'taskId', t.id,
                                             'parts', jsonb_build_array(jsonb_build_object('text', 'the turn was interrupted: ' || p_message)))));
    UPDATE sessionq.tasks SET task = v_task, state = 'TASK_STATE_FAILED', staged_task = NULL, staged_event = NULL,
                              version = t.version + 1, published_version = t.version + 1, phase = 'abandoned',
                              updated_at = clock_timestamp()
     WHERE id = t.id;
    INSERT INTO sessionq.task_versions (task_id, version, payload_hash) VALUES (t.id, t.version + 1, 'abandoned');
    PERFORM sessionq.append_event(v.id, t.id, 'task', v_task);
  END IF;
  UPDATE sessionq.sessions
     SET dispatch_id = NULL, dispatch_expires_at = NULL, dispatch_message = NULL, dispatch_task_id = NULL,
         dispatch_failure = jsonb_build_object('dispatch_id', p_dispatch, 'message', p_message, 'task_id', t.id),
         active_task_id = NULL, unsettled_task_id = NULL,
         -- the Actor may have been resumed: let the quiescence workers suspend it
         idle_boundary_id = CASE WHEN p_issued AND idle_executor IS NULL THEN sessionq.uuid_v7() ELSE idle_boundary_id END,
         idle_boundary_at = CASE WHEN p_issued AND idle_executor IS NULL THEN clock_timestamp() ELSE idle_boundary_at END,
         updated_at = clock_timestamp()
   WHERE id = v.id;
  PERFORM sessionq.notify('sessionq_task', jsonb_build_object('session', v.id));
  IF p_issued THEN
    PERFORM sessionq.notify('sessionq_idle', jsonb_build_object('session', v.id));
  END IF;
  PERFORM sessionq.start_queued_turn(v.id);
END $$;
COMMENT ON FUNCTION sessionq.fail_dispatch(uuid, uuid, text, boolean) IS
  'End a dispatch that could not complete: an unfinished task of it is published FAILED and marked abandoned (it can never be continued), the reservation is cleared with the failure recorded for the waiting caller, and, if the Actor may have been resumed (p_issued), an idle boundary is marked; then the next queued turn is dispatched (start_queued_turn).';

-- record_turn_failure: why a turn could not start, shown on the Session until a resume succeeds.
CREATE OR REPLACE FUNCTION sessionq.record_turn_failure(p_session uuid, p_dispatch uuid, p_reason text, p_message text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq.sessions
     SET failure_reason = p_reason, failure_message = sessionq.clip(p_message, 1000), updated_at = clock_timestamp()
   WHERE id = p_session AND dispatch_id = p_dispatch AND operation = 'NONE' AND failed_operation_id IS NULL;
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION sessionq.record_turn_failure(uuid, uuid, text, text) IS
  'Record on the Session why the turn of dispatch p_dispatch could not start (failure_reason p_reason, e.g. RestoreFailed, and the message, clipped): while that dispatch is current and no operation is pending or failed (their failure stays). Clients see it as the Session''s Failure until clear_turn_failure, an admission or a completion. True when recorded.';

-- clear_turn_failure: a resume succeeded; the Session no longer shows why an earlier one failed.
CREATE OR REPLACE FUNCTION sessionq.clear_turn_failure(p_session uuid, p_reason text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq.sessions
     SET failure_reason = NULL, failure_message = NULL, updated_at = clock_timestamp()
   WHERE id = p_session AND failure_reason = p_reason AND operation = 'NONE' AND failed_operation_id IS NULL;
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION sessionq.clear_turn_failure(uuid, text) IS
  'Clear the turn failure p_reason that record_turn_failure recorded (a later resume succeeded); a failure of an operation is never touched. True when cleared.';

-- keep_warm_of: how long a Session's Actor stays running after a turn before it may be suspended.
-- An SQL function, unlike its neighbours: it is only ever called once per row inside one statement
-- (claim_idle_work, idle_work_blocked, idle_work_state, quiescence_backlog), where its plan is made
-- once for the statement; as PL/pgSQL each row cost ~1.2 us more (PostgreSQL 15), and those
-- statements read every warm idle boundary (docs/performance.md, upgrade 0026).
CREATE OR REPLACE FUNCTION sessionq.keep_warm_of(p_revision uuid, p_default double precision) RETURNS double precision
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT rtrim(r.spec ->> 'keepWarm', 's')::double precision FROM sessionq.revisions r
                    WHERE r.id = p_revision AND r.spec ? 'keepWarm'),
                  greatest(coalesce(p_default, 0), 0))
$$;
COMMENT ON FUNCTION sessionq.keep_warm_of(uuid, double precision) IS
  'The keep-warm window of a Session pinned to revision p_revision, in seconds: its Agent spec''s keepWarm (stored as "<seconds>s"), else p_default (sessions.keepWarm). An idle boundary becomes claimable that long after it was marked; a turn admitted meanwhile supersedes it and finds the Actor running.';

-- claim_idle: a quiescence worker takes the oldest eligible idle boundary. A Session with a cancel
-- whose Actor was not told yet is skipped: finish_cancel marks the idle boundary before the
-- cancel_task job tells the Actor (A2A CancelTask), and suspending first would stop the process the
-- job must tell. The wait is bounded (10 minutes): a cancel_task job that gave up never records the
-- telling (cancel_told, 35_a2a.sql, wakes the quiescence workers when it does).
CREATE OR REPLACE FUNCTION sessionq.claim_idle(p_executor uuid, p_keep_warm double precision DEFAULT 0) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s
   WHERE s.idle_boundary_id IS NOT NULL AND s.idle_executor IS NULL
     AND s.state = 'READY' AND s.operation = 'NONE'
     AND s.idle_boundary_at <= clock_timestamp() - make_interval(secs => sessionq.keep_warm_of(s.revision_id, p_keep_warm))
     AND s.dispatch_id IS NULL AND s.active_task_id IS NULL AND s.unsettled_task_id IS NULL
     AND NOT sessionq.checkpoint_in_progress(s.id)  -- 40_checkpoints.sql
     AND NOT EXISTS (SELECT 1 FROM sessionq.task_cancels c  -- 35_a2a.sql: ended, the Actor not told yet
                      WHERE c.session_id = s.id AND c.actor_told_at IS NULL
                        AND c.finished_at > clock_timestamp() - interval '10 minutes')
   ORDER BY s.idle_boundary_at
   LIMIT 1
   FOR UPDATE SKIP LOCKED;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  UPDATE sessionq.sessions SET idle_executor = p_executor, idle_claimed_at = clock_timestamp()
   WHERE id = v.id RETURNING * INTO v;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.claim_idle(uuid, double precision) IS
  'Claim the oldest idle boundary past its keep-warm window (keep_warm_of: the Agent''s keepWarm, else p_keep_warm seconds) of a READY Session with nothing running, dispatched, unsettled, pending or being checkpointed, and no cancel ended in the last 10 minutes whose Actor was not told of it yet (FOR UPDATE SKIP LOCKED, so replicas never take the same one). NULL when none is eligible now.';

-- idle_work_blocked: after an empty claim, is unclaimed idle work waiting on something? PL/pgSQL so
-- that its plan is kept (an SQL function that reads a table is planned on every call before
-- PostgreSQL 18): idle_work_state asks it once per empty claim.
CREATE OR REPLACE FUNCTION sessionq.idle_work_blocked(p_keep_warm double precision DEFAULT 0) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM sessionq.sessions s
                  WHERE s.idle_boundary_id IS NOT NULL AND s.idle_executor IS NULL AND s.state = 'READY'
                    AND s.idle_boundary_at <= clock_timestamp()
                                              - make_interval(secs => sessionq.keep_warm_of(s.revision_id, p_keep_warm)));
END $$;
COMMENT ON FUNCTION sessionq.idle_work_blocked(double precision) IS
  'True when unclaimed idle boundaries of READY Sessions past their keep-warm window exist that the last claim could not take (blocked by a dispatch, a checkpoint, an operation or a row lock): workers then retry within a second. Suspended or deleted Sessions, claimed work and boundaries still inside their window (idle_work_state times those) do not count.';

-- finish_idle: record the outcome of a claimed idle boundary (the exact snapshot).
CREATE OR REPLACE FUNCTION sessionq.finish_idle(p_session uuid, p_boundary uuid, p_executor uuid, p_snapshot jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v jsonb;
BEGIN
  v := sessionq.record_idle_outcome(p_session, p_boundary, p_executor, p_snapshot);  -- below
  IF v IS NULL THEN
    PERFORM sessionq.fail('SQ409', format('executor %s does not hold the idle claim of session %s', p_executor, p_session));
  END IF;
  RETURN v;
END $$;
COMMENT ON FUNCTION sessionq.finish_idle(uuid, uuid, uuid, jsonb) IS
  'Record a quiescence outcome by the claim holder: the exact snapshot (generation, uri, status, bytes: its size, optional) and the end of the idle claim (an uncertain one included); a paused Actor is paused no longer. A recorded snapshot clears the last quiescence failure. Retried on database failure without repeating the runtime call.';

-- record_quiescence_failure: the quiescence failure record (Session.last_quiescence_failure).
CREATE OR REPLACE FUNCTION sessionq.record_quiescence_failure(
  p_session uuid, p_boundary uuid, p_executor uuid, p_reason text, p_message text
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  IF p_reason NOT IN ('SuspendFailed', 'PauseFailed', 'RuntimeUnavailable') THEN
    PERFORM sessionq.fail('SQ400', format('unknown quiescence failure reason %s', p_reason));
  END IF;
  UPDATE sessionq.sessions s
     SET quiescence_failure = jsonb_build_object(
           'task_id', coalesce((SELECT t.id FROM sessionq.tasks t WHERE t.session_id = s.id ORDER BY t.seq DESC LIMIT 1), ''),
           'reason', p_reason, 'message', sessionq.clip(p_message, 500), 'failed_at', clock_timestamp()),
         updated_at = clock_timestamp()
   WHERE s.id = p_session AND s.idle_boundary_id = p_boundary AND s.idle_executor = p_executor
  RETURNING * INTO v;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s does not hold the idle claim of session %s', p_executor, p_session));
  END IF;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.record_quiescence_failure(uuid, uuid, uuid, text, text) IS
  'By the idle claim holder whose suspend failed for good (SuspendFailed: it and its retries failed; RuntimeUnavailable: the Actor is gone or replaced; PauseFailed is kagent''s for a failed pause, which sessionq does not issue): record the quiescence failure record of the latest turn (task_id, reason, message, failed_at), shown as Session.last_quiescence_failure. The idle claim stays (Q-10: the suspend may have been issued); a later recorded snapshot clears the record.';

-- turn_waits_for_input: does the Session's last turn wait for the user (INPUT_REQUIRED, AUTH_REQUIRED)?
-- PL/pgSQL so that its plan is kept (an SQL function that reads a table is planned on every call
-- before PostgreSQL 18): a quiescence worker asks it once per claimed Session.
CREATE OR REPLACE FUNCTION sessionq.turn_waits_for_input(p_session uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN coalesce((SELECT t.phase = 'settled' AND t.state IN ('TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED')
                     FROM sessionq.tasks t WHERE t.session_id = p_session AND t.phase <> 'queued'
                    ORDER BY t.seq DESC LIMIT 1), false);
END $$;
COMMENT ON FUNCTION sessionq.turn_waits_for_input(uuid) IS
  'True when the Session''s latest turn settled waiting for the user (INPUT_REQUIRED or AUTH_REQUIRED): with sessions.pausedRuntimeTtl the quiescence workers pause its Actor rather than suspend it.';

-- finish_pause: the claim holder paused the Actor; the boundary falls due again when the TTL passes.
CREATE OR REPLACE FUNCTION sessionq.finish_pause(p_session uuid, p_boundary uuid, p_executor uuid, p_ttl double precision)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  UPDATE sessionq.sessions s
     SET idle_boundary_id = sessionq.uuid_v7(),
         idle_boundary_at = clock_timestamp() + make_interval(secs => greatest(p_ttl, 0)),
         idle_executor = NULL, idle_claimed_at = NULL, idle_uncertain_at = NULL, idle_retry_at = NULL,
         idle_attempts = 0, idle_unsent = false, actor_paused_at = clock_timestamp(),
         updated_at = clock_timestamp()
   WHERE s.id = p_session AND s.idle_boundary_id = p_boundary AND s.idle_executor = p_executor
  RETURNING * INTO v;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s does not hold the idle claim of session %s', p_executor, p_session));
  END IF;
  PERFORM sessionq.notify('sessionq_idle', jsonb_build_object('session', v.id));  -- the workers time the new boundary
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.finish_pause(uuid, uuid, uuid, double precision) IS
  'By the idle claim holder that paused the Actor (its last turn waits for input, sessions.pausedRuntimeTtl = p_ttl seconds): end the claim, record actor_paused_at and mark a new idle boundary that falls due when the TTL passes (idle_boundary_at in the future; the workers'' timer, idle_work_state''s warm_in, wakes them then). A turn before that supersedes it and resumes the paused Actor; otherwise the boundary is claimed and the Actor suspended with its snapshot.';

-- An explicit Resume that returns a Session to READY marks an idle boundary and wakes the workers
-- (it leaves the Actor running until the workers suspend it). A creation leaves the Actor suspended.
CREATE OR REPLACE FUNCTION sessionq.quiesce_after_resume(p_session sessionq.sessions, p_kind text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF p_session.state = 'READY' AND p_kind = 'RESUME' THEN
    IF p_session.idle_boundary_id IS NULL THEN
      UPDATE sessionq.sessions SET idle_boundary_id = sessionq.uuid_v7(), idle_boundary_at = clock_timestamp()
       WHERE id = p_session.id;
    END IF;
    PERFORM sessionq.notify('sessionq_idle', jsonb_build_object('session', p_session.id));
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.quiesce_after_resume(sessionq.sessions, text) IS
  'Part of on_operation_completed: a completed RESUME that left the Session READY marks an idle boundary (unless one is marked) and wakes the quiescence workers, which suspend the Actor again.';

-- Explicit lifecycle changes wait for running turns, unsettled cleanup and claimed idle work.
CREATE OR REPLACE FUNCTION sessionq.check_turn_lifecycle_blockers(p_session sessionq.sessions, p_kind text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF p_session.unsettled_task_id IS NOT NULL THEN
    PERFORM sessionq.fail('SQ409', format('the last turn of session %s is still finishing (task %s is not settled); retry',
                                          p_session.id, p_session.unsettled_task_id), 'KAGENT_SESSION_BUSY');
  END IF;
  IF p_session.idle_executor IS NOT NULL THEN
    PERFORM sessionq.fail('SQ409', format('session %s is being quiesced; retry after it is recorded', p_session.id),
                          'KAGENT_SESSION_BUSY');
  END IF;
  IF p_session.actor_paused_at IS NOT NULL THEN
    PERFORM sessionq.fail('SQ409', format(
      'the actor of session %s is paused waiting for input; answer the task, or retry after it is suspended (in about %s s)',
      p_session.id, ceil(greatest(extract(epoch FROM p_session.idle_boundary_at - clock_timestamp()), 0)) + 1),
      'KAGENT_SESSION_BUSY');
  END IF;
  IF p_kind = 'SUSPEND' AND (p_session.active_task_id IS NOT NULL
                             OR p_session.dispatch_id IS NOT NULL AND p_session.dispatch_expires_at > clock_timestamp()) THEN
    PERFORM sessionq.fail('SQ409', format('a turn is running on session %s; it cannot be suspended now', p_session.id));
  END IF;
  IF p_kind = 'SUSPEND' AND EXISTS (SELECT 1 FROM sessionq.queued_turns q WHERE q.session_id = p_session.id) THEN
    PERFORM sessionq.fail('SQ409', format('turns are queued on session %s; it cannot be suspended now', p_session.id));
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.check_turn_lifecycle_blockers(sessionq.sessions, text) IS
  'Part of check_lifecycle_blockers: ABORTED while the last turn is unsettled, while idle work is claimed or the Actor is paused waiting for input (KAGENT_SESSION_BUSY), and for a SUSPEND while a turn runs, is dispatched or queued.';

-- task reads for the task store and the A2A frontend
CREATE OR REPLACE FUNCTION sessionq.get_task(p_task_id text) RETURNS jsonb
LANGUAGE sql STABLE AS $$ SELECT to_jsonb(t) FROM sessionq.tasks t WHERE t.id = p_task_id $$;
COMMENT ON FUNCTION sessionq.get_task(text) IS 'One task row (published task, version, phase) by id.';

-- record_snapshot_completed: a pending snapshot generation became durable.
CREATE OR REPLACE FUNCTION sessionq.record_snapshot_completed(p_session uuid, p_generation bigint, p_uri text,
                                                              p_bytes bigint DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_bytes bigint := sessionq.check_snapshot_bytes(p_bytes);  -- 45_usage.sql
BEGIN
  UPDATE sessionq.sessions SET snapshot_uri = p_uri, snapshot_status = 'COMPLETED',
                               snapshot_bytes = coalesce(snapshot_bytes, v_bytes), updated_at = clock_timestamp()
   WHERE id = p_session AND snapshot_generation = p_generation AND snapshot_status = 'IN_PROGRESS';
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION sessionq.record_snapshot_completed(uuid, bigint, text, bigint) IS
  'Record that the exact pending snapshot generation is now COMPLETED (with its URI, and its size in bytes when the runtime gave one: counted into the Session''s usage). False when the Session has moved on to another generation.';

-- retry_quiescence: an operator's way to resolve a quiescence claim at once (Q-10 keeps such claims,
-- because the suspend may have been issued; the quiescence workers resolve uncertain ones by
-- themselves, with a backoff). A new attempt takes the claim over, reads the Actor back under the
-- recorded UID and suspends it only if it is still running.
CREATE OR REPLACE FUNCTION sessionq.retry_quiescence(p_session uuid) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sessionq.sessions WHERE id = p_session AND idle_executor IS NOT NULL) THEN
    PERFORM sessionq.fail('SQ412', format('session %s has no claimed idle work', p_session));
  END IF;
  RETURN sessionq.defer('retry_quiescence', p_session::text, jsonb_build_object('session_id', p_session));
END $$;
COMMENT ON FUNCTION sessionq.retry_quiescence(uuid) IS
  'Operator: queue a new attempt at the claimed idle work of a Session now (the quiescence workers also resolve uncertain claims by themselves). The attempt takes the claim over, reads the Actor back under the recorded UID, suspends it only if the read-back shows it was not suspended, then records the snapshot.';

-- idle_attempt_failed: the claim holder's attempt ended without an outcome.
CREATE OR REPLACE FUNCTION sessionq.idle_attempt_failed(
  p_session uuid, p_boundary uuid, p_executor uuid, p_reason text, p_message text, p_unsent boolean,
  p_retry_after double precision
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  PERFORM sessionq.record_quiescence_failure(p_session, p_boundary, p_executor, p_reason, p_message);
  UPDATE sessionq.sessions s
     SET idle_uncertain_at = coalesce(s.idle_uncertain_at, clock_timestamp()),
         idle_retry_at = clock_timestamp() + make_interval(secs => greatest(p_retry_after, 0)),
         idle_attempts = s.idle_attempts + 1,
         idle_unsent = p_unsent
   WHERE s.id = p_session AND s.idle_boundary_id = p_boundary AND s.idle_executor = p_executor
  RETURNING * INTO v;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.idle_attempt_failed(uuid, uuid, uuid, text, text, boolean, double precision) IS
  'By the idle claim holder whose attempt ended without an outcome: record the quiescence failure (record_quiescence_failure: the holder only, known reasons) and make the claim uncertain: it stays (Q-10) and a quiescence worker may take it over after p_retry_after seconds; p_unsent says the attempt certainly never reached the runtime. Returns the row.';

-- take_over_uncertain_idle: a quiescence worker takes over one uncertain claim that is due.
CREATE OR REPLACE FUNCTION sessionq.take_over_uncertain_idle(p_executor uuid, p_lease double precision)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s
   WHERE s.idle_uncertain_at IS NOT NULL AND s.idle_retry_at <= clock_timestamp()
   ORDER BY s.idle_retry_at
   LIMIT 1
   FOR UPDATE SKIP LOCKED;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  UPDATE sessionq.sessions
     SET idle_executor = p_executor, idle_claimed_at = clock_timestamp(),
         idle_retry_at = clock_timestamp() + make_interval(secs => p_lease)
   WHERE id = v.id RETURNING * INTO v;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.take_over_uncertain_idle(uuid, double precision) IS
  'A quiescence worker takes over the uncertain idle claim due longest (FOR UPDATE SKIP LOCKED: racing workers never take the same one): it becomes the holder (the previous holder can no longer record), with a lease of p_lease seconds after which another worker may take it over. The boundary and the uncertainty stay. NULL when none is due.';

-- take_over_idle_claim: the operator's retry (retry_quiescence job) takes a claim over at once.
CREATE OR REPLACE FUNCTION sessionq.take_over_idle_claim(p_session uuid, p_executor uuid, p_lease double precision)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  UPDATE sessionq.sessions
     SET idle_executor = p_executor, idle_claimed_at = clock_timestamp(),
         idle_uncertain_at = coalesce(idle_uncertain_at, clock_timestamp()),
         idle_retry_at = clock_timestamp() + make_interval(secs => p_lease)
   WHERE id = p_session AND idle_executor IS NOT NULL
  RETURNING * INTO v;
  RETURN CASE WHEN FOUND THEN to_jsonb(v) END;
END $$;
COMMENT ON FUNCTION sessionq.take_over_idle_claim(uuid, uuid, double precision) IS
  'Internal to the retry_quiescence job: give a claimed idle boundary a new executor with a lease of p_lease seconds (no quiescence worker takes it over meanwhile); the claim is uncertain from then on until recorded. NULL when nothing is claimed.';

-- mark_lapsed_idle_claims: claims whose holder outlived its lease become uncertain.
CREATE OR REPLACE FUNCTION sessionq.mark_lapsed_idle_claims(p_lease double precision) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  n integer;
BEGIN
  UPDATE sessionq.sessions s
     SET idle_uncertain_at = clock_timestamp(), idle_retry_at = clock_timestamp()
   WHERE s.idle_executor IS NOT NULL AND s.idle_uncertain_at IS NULL
     AND s.idle_claimed_at < clock_timestamp() - make_interval(secs => p_lease);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END $$;
COMMENT ON FUNCTION sessionq.mark_lapsed_idle_claims(double precision) IS
  'The quiescence workers'' recovery scan: an idle claim held longer than p_lease seconds with neither an outcome nor a failure recorded (its worker died, or could not reach the database) becomes uncertain and due at once, so a worker takes it over and reads the Actor back. Returns how many.';

-- idle_work_state: after an empty claim, when should a worker look again?
CREATE OR REPLACE FUNCTION sessionq.idle_work_state(
  p_keep_warm double precision DEFAULT 0, OUT blocked boolean, OUT retry_in double precision, OUT warm_in double precision
) LANGUAGE sql STABLE AS $$
  SELECT sessionq.idle_work_blocked(p_keep_warm),
         (SELECT extract(epoch FROM min(s.idle_retry_at) - clock_timestamp())::double precision
            FROM sessionq.sessions s WHERE s.idle_uncertain_at IS NOT NULL),
         (SELECT extract(epoch FROM min(s.idle_boundary_at + make_interval(secs => sessionq.keep_warm_of(s.revision_id, p_keep_warm)))
                                    - clock_timestamp())::double precision
            FROM sessionq.sessions s
           WHERE s.idle_boundary_id IS NOT NULL AND s.idle_executor IS NULL AND s.state = 'READY'
             AND s.idle_boundary_at > clock_timestamp() - make_interval(secs => sessionq.keep_warm_of(s.revision_id, p_keep_warm)))
$$;
COMMENT ON FUNCTION sessionq.idle_work_state(double precision) IS
  'After an empty claim: blocked (idle_work_blocked: unclaimed idle work waits on something, look again within a second), retry_in (seconds until the next uncertain idle claim may be taken over, 0 or less when one is due now; NULL when none is uncertain) and warm_in (seconds until the next idle boundary inside its keep-warm window becomes claimable; NULL when none is warm): the workers'' timers.';

-- claim_idle_work: the quiescence workers' one statement per look (claim_idle and idle_work_state
-- in one round trip, for up to p_limit boundaries at once).
CREATE OR REPLACE FUNCTION sessionq.claim_idle_work(
  p_executor uuid, p_keep_warm double precision DEFAULT 0, p_limit integer DEFAULT 1
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_claimed jsonb;
  v_seen bigint;
  w record;
BEGIN
  -- one row more than the limit is locked (until this statement ends) to learn whether more is due
  WITH c AS (
    SELECT s.id, s.idle_boundary_at FROM sessionq.sessions s
     WHERE s.idle_boundary_id IS NOT NULL AND s.idle_executor IS NULL
       AND s.state = 'READY' AND s.operation = 'NONE'
       AND s.idle_boundary_at <= clock_timestamp() - make_interval(secs => sessionq.keep_warm_of(s.revision_id, p_keep_warm))
       AND s.dispatch_id IS NULL AND s.active_task_id IS NULL AND s.unsettled_task_id IS NULL
       AND NOT sessionq.checkpoint_in_progress(s.id)  -- 40_checkpoints.sql
       AND NOT EXISTS (SELECT 1 FROM sessionq.task_cancels x  -- 35_a2a.sql: ended, the Actor not told yet
                        WHERE x.session_id = s.id AND x.actor_told_at IS NULL
                          AND x.finished_at > clock_timestamp() - interval '10 minutes')
     ORDER BY s.idle_boundary_at
     LIMIT greatest(p_limit, 1) + 1
     FOR UPDATE SKIP LOCKED
  ), u AS (
    UPDATE sessionq.sessions s SET idle_executor = p_executor, idle_claimed_at = clock_timestamp()
      FROM (SELECT id FROM c ORDER BY idle_boundary_at LIMIT greatest(p_limit, 1)) t
     WHERE s.id = t.id
    RETURNING s.*
  )
  SELECT (SELECT jsonb_agg(to_jsonb(u) ORDER BY u.idle_boundary_at) FROM u), (SELECT count(*) FROM c)
    INTO v_claimed, v_seen;
  IF v_seen > greatest(p_limit, 1) THEN
    RETURN jsonb_build_object('claimed', v_claimed, 'more', true, 'blocked', false);
  END IF;
  -- nothing more to claim now: when to look again (this transaction's claims no longer count as unclaimed)
  SELECT * INTO w FROM sessionq.idle_work_state(p_keep_warm);
  RETURN jsonb_build_object('claimed', coalesce(v_claimed, '[]'::jsonb), 'more', false,
                            'blocked', v_claimed IS NULL AND w.blocked, 'retry_in', w.retry_in, 'warm_in', w.warm_in);
END $$;
COMMENT ON FUNCTION sessionq.claim_idle_work(uuid, double precision, integer) IS
  'The quiescence workers'' look for work in one statement: claim up to p_limit of the oldest eligible idle boundaries (claim_idle''s rules, FOR UPDATE SKIP LOCKED, all for executor p_executor) and say what remains. Returns {claimed: [Session rows, oldest boundary first], more: another eligible boundary was there, unlocked (look again at once, and wake a sibling), blocked: nothing claimed although unclaimed boundaries past their window exist (idle_work_blocked: look again within a second), retry_in, warm_in: idle_work_state''s timers (absent when more)}.';

-- record_idle_outcome: finish_idle's record, NULL when p_executor does not hold the claim.
CREATE OR REPLACE FUNCTION sessionq.record_idle_outcome(p_session uuid, p_boundary uuid, p_executor uuid, p_snapshot jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  UPDATE sessionq.sessions s
     SET idle_boundary_id = NULL, idle_boundary_at = NULL, idle_executor = NULL, idle_claimed_at = NULL,
         idle_uncertain_at = NULL, idle_retry_at = NULL, idle_attempts = 0, idle_unsent = false,
         actor_paused_at = NULL,
         snapshot_generation = coalesce((p_snapshot ->> 'generation')::bigint, s.snapshot_generation),
         snapshot_uri = CASE WHEN p_snapshot ? 'generation' THEN p_snapshot ->> 'uri' ELSE s.snapshot_uri END,
         snapshot_status = coalesce(p_snapshot ->> 'status', s.snapshot_status),
         snapshot_event_seq = CASE WHEN p_snapshot ? 'generation' THEN s.last_event_seq ELSE s.snapshot_event_seq END,
         snapshot_bytes = sessionq.recorded_snapshot_bytes(s.snapshot_generation, s.snapshot_bytes, p_snapshot),  -- 45_usage.sql
         quiescence_failure = CASE WHEN p_snapshot ? 'generation' THEN NULL ELSE s.quiescence_failure END,
         updated_at = clock_timestamp()
   WHERE s.id = p_session AND s.idle_boundary_id = p_boundary AND s.idle_executor = p_executor
  RETURNING * INTO v;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF v.snapshot_status = 'IN_PROGRESS' THEN
    -- the runtime is still writing it: look again until it is durable (never fall back to an older one)
    PERFORM sessionq.defer('refresh_snapshot', v.id::text,
                           jsonb_build_object('session_id', v.id, 'generation', v.snapshot_generation),
                           clock_timestamp() + interval '1 second');
  END IF;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.record_idle_outcome(uuid, uuid, uuid, jsonb) IS
  'Internal to finish_idle and finish_idle_many: record the quiescence outcome of the claim p_executor holds (the exact snapshot with its size when the runtime gave one, the end of the claim; an IN_PROGRESS snapshot queues refresh_snapshot). The row, or NULL when p_executor does not hold the idle claim of p_boundary.';

-- finish_idle_many: the outcomes of several claims in one statement (the quiescence workers batch them).
CREATE OR REPLACE FUNCTION sessionq.finish_idle_many(p_items jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  i jsonb;
  v_pin jsonb;
  v_pinned boolean;
  out jsonb := '{}'::jsonb;
BEGIN
  -- in Session id order, so that two batches never wait on each other's rows crosswise
  FOR i IN SELECT e FROM jsonb_array_elements(p_items) e ORDER BY e ->> 'session' LOOP
    v_pin := i -> 'pin';
    v_pinned := NULL;
    IF v_pin IS NOT NULL THEN
      -- the turn pin this attempt tagged, first (40_checkpoints.sql), as its holder only
      PERFORM 1 FROM sessionq.sessions WHERE id = (i ->> 'session')::uuid FOR UPDATE;
      v_pinned := EXISTS (SELECT 1 FROM sessionq.turn_snapshots t
                           WHERE t.id = (v_pin ->> 'id')::uuid AND t.executor_id = (v_pin ->> 'executor')::uuid
                             AND t.state = 'PINNING');
      IF v_pinned THEN
        PERFORM sessionq.finish_turn_pin((v_pin ->> 'id')::uuid, (v_pin ->> 'executor')::uuid, v_pin ->> 'failure',
                                         v_pin ->> 'tag_uri', (v_pin ->> 'keep')::integer);
      END IF;
    END IF;
    out := out || jsonb_build_object(i ->> 'session', jsonb_build_object(
             'row', sessionq.record_idle_outcome((i ->> 'session')::uuid, (i ->> 'boundary')::uuid,
                                                (i ->> 'executor')::uuid, coalesce(i -> 'snapshot', '{}'::jsonb)),
             'pinned', v_pinned));
  END LOOP;
  RETURN out;
END $$;
COMMENT ON FUNCTION sessionq.finish_idle_many(jsonb) IS
  'finish_idle for several claims in one transaction: p_items is an array of {session, boundary, executor, snapshot, pin}, pin (optional) being the turn pin the attempt tagged, {id, executor, failure, tag_uri, keep}: finished first as finish_turn_pin does when that executor still holds it. Returns an object from each Session id to {row: the Session, or null where that executor does not hold the idle claim (nothing recorded for it; the others are), pinned: whether the pin was finished (false: it was not held, its tag should go; null: no pin)}.';
