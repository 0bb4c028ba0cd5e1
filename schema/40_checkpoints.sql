-- Checkpoints and forks.
--
-- A checkpoint pins the snapshot recorded after a turn: admission (admit_checkpoint) checks
-- the turn boundary under the Session row lock and records a CREATING checkpoint; the
-- create_checkpoint job tags the snapshot in the runtime (tag checkpoint-<id>) with an
-- executor claim, then completes it READY. A CREATING checkpoint blocks turns, explicit
-- lifecycle changes and idle work of its Session. A fork (admit_fork) is a Session creation
-- from a READY checkpoint: it copies the history with new task ids and the original
-- timestamps, and its generated pinned_checkpoint_id column holds a RESTRICT foreign key on
-- the checkpoint while the fork is live.

CREATE TABLE sessionq.checkpoints (
  id                  uuid PRIMARY KEY DEFAULT sessionq.uuid_v7(),
  session_id          uuid NOT NULL,  -- no foreign key: checkpoints outlive their source Session
  creator             text NOT NULL,
  request_id          text NOT NULL CHECK (length(request_id) BETWEEN 1 AND 128),
  head_task_id        text NOT NULL,
  history_sequence    bigint NOT NULL,
  state               text NOT NULL DEFAULT 'CREATING' CHECK (state IN ('CREATING', 'READY', 'FAILED', 'DELETING')),
  name                text NOT NULL CHECK (length(name) <= 200),
  default_name        text NOT NULL,
  agent_namespace     text NOT NULL,
  agent_name          text NOT NULL,
  revision_id         uuid REFERENCES sessionq.revisions (id),
  actor_atespace      text NOT NULL,
  actor_name          text NOT NULL,
  actor_uid           text NOT NULL,
  snapshot_generation bigint NOT NULL,
  snapshot_uri        text NOT NULL,
  tag_snapshot_uri    text,
  tag_name            text NOT NULL,
  executor_id         uuid,
  executor_expires_at timestamptz,
  failure_message     text,
  created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
  CONSTRAINT checkpoints_request_unique UNIQUE (creator, request_id)
);
CREATE INDEX checkpoints_session_idx ON sessionq.checkpoints (session_id, id);
CREATE INDEX checkpoints_creating_idx ON sessionq.checkpoints (session_id) WHERE state = 'CREATING';
CREATE INDEX checkpoints_tag_idx ON sessionq.checkpoints (tag_name);  -- describe_tags
COMMENT ON TABLE sessionq.checkpoints IS
  'Checkpoints: a pin on the snapshot recorded after turn head_task_id (history through history_sequence), held in the runtime as tag tag_name. They outlive their source Session and keep its revision pinned (revision_id) until deleted.';
COMMENT ON COLUMN sessionq.checkpoints.snapshot_generation IS 'The exact snapshot generation the tag must hold; a fork retry checks the tag still holds it.';
COMMENT ON COLUMN sessionq.checkpoints.tag_snapshot_uri IS
  'The URI of the tag''s own copy of the snapshot, as the runtime answered when the tag was made (NULL until READY). A fork checks the tag still holds it (with snapshot_generation). Rows made before this column hold snapshot_uri.';
COMMENT ON COLUMN sessionq.checkpoints.snapshot_uri IS
  'The URI of the Actor''s snapshot recorded after the head turn (the one the tag copies).';

ALTER TABLE sessionq.sessions
  ADD CONSTRAINT sessions_pinned_checkpoint_fk FOREIGN KEY (pinned_checkpoint_id)
  REFERENCES sessionq.checkpoints (id) ON DELETE RESTRICT;

CREATE OR REPLACE FUNCTION sessionq.notify_checkpoint_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM sessionq.notify('sessionq_checkpoint', jsonb_build_object('checkpoint', coalesce(NEW.id, OLD.id)));
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.notify_checkpoint_change() IS
  'Trigger: NOTIFY sessionq_checkpoint {"checkpoint"} after every change (waiting API calls re-read).';
CREATE TRIGGER checkpoints_notify AFTER INSERT OR UPDATE OR DELETE ON sessionq.checkpoints
  FOR EACH ROW EXECUTE FUNCTION sessionq.notify_checkpoint_change();

-- queue_checkpoint: make sure the job of a CREATING or DELETING checkpoint is waiting.
CREATE OR REPLACE FUNCTION sessionq.queue_checkpoint(p_checkpoint uuid, p_at timestamptz DEFAULT NULL)
RETURNS bigint LANGUAGE sql AS $$
  SELECT sessionq.defer(CASE c.state WHEN 'DELETING' THEN 'delete_checkpoint' ELSE 'create_checkpoint' END,
                        c.id::text, jsonb_build_object('checkpoint_id', c.id), p_at)
    FROM sessionq.checkpoints c WHERE c.id = p_checkpoint AND c.state IN ('CREATING', 'DELETING')
$$;
COMMENT ON FUNCTION sessionq.queue_checkpoint(uuid, timestamptz) IS
  'Queue the job of a CREATING (create_checkpoint) or DELETING (delete_checkpoint) checkpoint, due at p_at (NULL: now), under queueing lock checkpoint:<id>; a job already waiting runs no later than that. Nothing for a checkpoint in another state.';

-- checkpoint_in_progress is PL/pgSQL so that its plan is kept (an SQL function that reads a table is
-- planned on every call before PostgreSQL 18): a turn's admission, an operation and the expiry sweep
-- ask it once. The quiescence claim's statement asks it per unclaimed idle boundary it reads, where
-- its plan was made once for the statement anyway and PL/pgSQL costs ~1 us more per row.
CREATE OR REPLACE FUNCTION sessionq.checkpoint_in_progress(p_session uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM sessionq.checkpoints c WHERE c.session_id = p_session AND c.state = 'CREATING');
END $$;
COMMENT ON FUNCTION sessionq.checkpoint_in_progress(uuid) IS
  'True while a checkpoint of the Session is being created: it blocks turns, explicit lifecycle changes and idle work.';

CREATE OR REPLACE FUNCTION sessionq.check_checkpoint_blockers(v sessionq.sessions) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF sessionq.checkpoint_in_progress(v.id) THEN
    PERFORM sessionq.fail('SQ409', format('a checkpoint of session %s is being created; retry after it is ready', v.id),
                          'KAGENT_SESSION_BUSY');
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.check_checkpoint_blockers(sessionq.sessions) IS
  'Raise ABORTED (KAGENT_SESSION_BUSY) while a checkpoint of the Session is being created: it blocks turns, explicit lifecycle changes and idle work.';

-- admit_checkpoint: check the turn boundary and record a CREATING checkpoint (or answer a retry).
CREATE OR REPLACE FUNCTION sessionq.admit_checkpoint(
  p_session uuid, p_caller text, p_request_id text, p_expected_head text
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  c sessionq.checkpoints;
  head sessionq.tasks;
  expected sessionq.tasks;
  v_id uuid;
BEGIN
  IF p_request_id IS NULL OR length(p_request_id) NOT BETWEEN 1 AND 128 THEN
    PERFORM sessionq.fail('SQ400', 'request_id must be 1 to 128 characters');
  END IF;
  v := sessionq.visible_session(p_session, p_caller, NULL, 'owner');
  SELECT * INTO c FROM sessionq.checkpoints WHERE creator = p_caller AND request_id = p_request_id;
  IF FOUND THEN
    IF c.session_id <> p_session OR c.head_task_id <> p_expected_head THEN
      PERFORM sessionq.fail('SQ422', format('request_id %s was already used for checkpoint %s with different parameters',
                                            sessionq.clip(p_request_id), c.id));
    END IF;
    IF c.state = 'CREATING' THEN  -- a retry joins the creation, and makes sure a job drives it now
      PERFORM sessionq.queue_checkpoint(c.id);
    END IF;
    RETURN to_jsonb(c);  -- a retry: the same checkpoint
  END IF;
  IF v.state = 'DELETING' THEN
    PERFORM sessionq.fail('SQ412', format('session %s is being deleted', v.id));
  END IF;
  IF v.operation <> 'NONE' THEN
    PERFORM sessionq.fail('SQ409', format('session %s has a pending %s operation; retry after it completes', v.id, lower(v.operation)));
  END IF;
  IF sessionq.checkpoint_in_progress(v.id) THEN
    PERFORM sessionq.fail('SQ409', format('another checkpoint of session %s is being created; retry', v.id), 'KAGENT_SESSION_BUSY');
  END IF;
  SELECT * INTO expected FROM sessionq.tasks WHERE id = p_expected_head AND session_id = v.id;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('task %s not found in session %s', sessionq.clip(p_expected_head), v.id));
  END IF;
  SELECT * INTO head FROM sessionq.tasks WHERE session_id = v.id ORDER BY seq DESC LIMIT 1;
  IF v.active_task_id IS NOT NULL OR v.unsettled_task_id IS NOT NULL
     OR v.dispatch_id IS NOT NULL AND v.dispatch_expires_at > clock_timestamp()
     OR EXISTS (SELECT 1 FROM sessionq.tasks t WHERE t.session_id = v.id
                 AND t.state NOT IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED')) THEN
    -- running, unsettled and waiting (INPUT_REQUIRED / AUTH_REQUIRED) turns are not checkpointable
    PERFORM sessionq.fail('SQ412', 'checkpoint requires all tasks to be terminal');
  END IF;
  IF head.id <> expected.id THEN
    PERFORM sessionq.fail('SQ412', 'conversation advanced beyond the expected task', 'KAGENT_CHECKPOINT_CONVERSATION_ADVANCED');
  END IF;
  IF v.idle_boundary_id IS NOT NULL OR v.snapshot_status IS DISTINCT FROM 'COMPLETED'
     OR v.snapshot_event_seq IS DISTINCT FROM v.last_event_seq OR v.actor_uid IS NULL THEN
    PERFORM sessionq.fail('SQ412', 'snapshot for the expected task is not ready', 'KAGENT_CHECKPOINT_SNAPSHOT_PENDING');
  END IF;
  v_id := sessionq.uuid_v7();
  INSERT INTO sessionq.checkpoints (id, session_id, creator, request_id, head_task_id, history_sequence, name, default_name,
                                    agent_namespace, agent_name, revision_id, actor_atespace, actor_name, actor_uid,
                                    snapshot_generation, snapshot_uri, tag_name)
  VALUES (v_id, v.id, p_caller, p_request_id, head.id, v.last_event_seq,
          v.agent_name || ' turn ' || v.last_event_seq, v.agent_name || ' turn ' || v.last_event_seq,
          v.agent_namespace, v.agent_name, v.revision_id, v.actor_atespace, v.actor_name, v.actor_uid,
          v.snapshot_generation, v.snapshot_uri, 'checkpoint-' || v_id)
  ON CONFLICT ON CONSTRAINT checkpoints_request_unique DO NOTHING
  RETURNING * INTO c;
  IF NOT FOUND THEN  -- a concurrent request with the same id won
    SELECT * INTO c FROM sessionq.checkpoints WHERE creator = p_caller AND request_id = p_request_id;
    RETURN to_jsonb(c);
  END IF;
  PERFORM sessionq.queue_checkpoint(c.id);
  RETURN to_jsonb(c);
END $$;
COMMENT ON FUNCTION sessionq.admit_checkpoint(uuid, text, text, text) IS
  'CreateCheckpoint admission under the Session row lock. Idempotent by (caller, request id). FAILED_PRECONDITION: a turn not terminal (waiting turns included), conversation advanced beyond the expected task (KAGENT_CHECKPOINT_CONVERSATION_ADVANCED), snapshot of the head turn not recorded and durable yet (KAGENT_CHECKPOINT_SNAPSHOT_PENDING). Records a CREATING checkpoint and queues create_checkpoint.';

-- claim_checkpoint: one attempt at a time tags the snapshot.
CREATE OR REPLACE FUNCTION sessionq.claim_checkpoint(p_checkpoint uuid, p_executor uuid, p_lifetime double precision)
RETURNS TABLE (status text, previous_executor uuid, expires_at timestamptz, checkpoint jsonb)
LANGUAGE plpgsql AS $$
DECLARE
  c sessionq.checkpoints;
  v_prev uuid;
BEGIN
  SELECT * INTO c FROM sessionq.checkpoints WHERE id = p_checkpoint FOR UPDATE;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'gone'::text, NULL::uuid, NULL::timestamptz, NULL::jsonb;
    RETURN;
  END IF;
  IF c.state NOT IN ('CREATING', 'DELETING') THEN
    RETURN QUERY SELECT 'done'::text, c.executor_id, c.executor_expires_at, to_jsonb(c);
    RETURN;
  END IF;
  IF c.executor_id IS NOT NULL AND c.executor_expires_at > clock_timestamp() THEN
    RETURN QUERY SELECT 'busy'::text, c.executor_id, c.executor_expires_at, to_jsonb(c);
    RETURN;
  END IF;
  v_prev := c.executor_id;
  UPDATE sessionq.checkpoints SET executor_id = p_executor,
         executor_expires_at = clock_timestamp() + make_interval(secs => p_lifetime), updated_at = clock_timestamp()
   WHERE id = p_checkpoint RETURNING * INTO c;
  RETURN QUERY SELECT 'claimed'::text, v_prev, c.executor_expires_at, to_jsonb(c);
END $$;
COMMENT ON FUNCTION sessionq.claim_checkpoint(uuid, uuid, double precision) IS
  'Claim the runtime work of a CREATING or DELETING checkpoint for one attempt (like claim_operation): claimed, busy, done or gone.';

CREATE OR REPLACE FUNCTION sessionq.release_checkpoint(p_checkpoint uuid, p_executor uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq.checkpoints SET executor_expires_at = least(executor_expires_at, clock_timestamp())
   WHERE id = p_checkpoint AND executor_id = p_executor;
  PERFORM sessionq.run_waiting_job(sessionq.job_lock('create_checkpoint', p_checkpoint::text));  -- a waiting job may claim now
END $$;
COMMENT ON FUNCTION sessionq.release_checkpoint(uuid, uuid) IS
  'End a failed attempt on a checkpoint: the claim lapses now (a job waiting for it to lapse becomes due now), the executor id stays recorded.';

-- finish_checkpoint: record the outcome of the claim holder: READY, FAILED, or removed after deletion.
CREATE OR REPLACE FUNCTION sessionq.finish_checkpoint(
  p_checkpoint uuid, p_executor uuid, p_failure text, p_tag_snapshot_uri text DEFAULT NULL
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  c sessionq.checkpoints;
BEGIN
  SELECT * INTO c FROM sessionq.checkpoints WHERE id = p_checkpoint AND executor_id = p_executor FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s does not hold the claim of checkpoint %s', p_executor, p_checkpoint));
  END IF;
  -- a job waiting for this claim to lapse runs now (and ends), so it never holds the queueing lock
  -- that a later DeleteCheckpoint defers under
  PERFORM sessionq.run_waiting_job(sessionq.job_lock('create_checkpoint', c.id::text));
  IF c.state = 'DELETING' THEN
    DELETE FROM sessionq.checkpoints WHERE id = c.id;  -- the tag is gone: the pin is released
    RETURN NULL;
  END IF;
  UPDATE sessionq.checkpoints
     SET state = CASE WHEN p_failure IS NULL THEN 'READY' ELSE 'FAILED' END,
         tag_snapshot_uri = CASE WHEN p_failure IS NULL THEN coalesce(p_tag_snapshot_uri, snapshot_uri) END,
         failure_message = p_failure, executor_id = NULL, executor_expires_at = NULL, updated_at = clock_timestamp()
   WHERE id = c.id RETURNING * INTO c;
  -- the Session's idle work and turns may go on
  PERFORM sessionq.notify('sessionq_idle', jsonb_build_object('session', c.session_id));
  RETURN to_jsonb(c);
END $$;
COMMENT ON FUNCTION sessionq.finish_checkpoint(uuid, uuid, text, text) IS
  'Complete a checkpoint''s runtime work by its claim holder: CREATING -> READY with the tag''s own snapshot URI p_tag_snapshot_uri (NULL: the recorded snapshot_uri), or FAILED with p_failure; DELETING -> the row is removed, releasing its revision pin. ABORTED (SQ409) when p_executor does not hold the claim.';

CREATE OR REPLACE FUNCTION sessionq.get_checkpoint(p_checkpoint uuid, p_caller text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
  c sessionq.checkpoints;
BEGIN
  SELECT * INTO c FROM sessionq.checkpoints WHERE id = p_checkpoint AND creator = p_caller;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('checkpoint %s not found', p_checkpoint));
  END IF;
  RETURN to_jsonb(c);
END $$;
COMMENT ON FUNCTION sessionq.get_checkpoint(uuid, text) IS
  'A checkpoint of the caller (its creator); another user''s answers NOT_FOUND like a missing one.';

CREATE OR REPLACE FUNCTION sessionq.list_checkpoints(p_session uuid, p_caller text, p_after uuid, p_limit integer)
RETURNS SETOF jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s WHERE s.id = p_session;
  IF sessionq.access(v, p_caller, NULL) IS DISTINCT FROM 'owner'
     AND NOT EXISTS (SELECT 1 FROM sessionq.checkpoints c WHERE c.session_id = p_session AND c.creator = p_caller) THEN
    -- a missing, deleted or another user's Session answers as GetSession does
    PERFORM sessionq.fail('SQ404', format('session %s not found', p_session));
  END IF;
  RETURN QUERY
    SELECT to_jsonb(c) FROM sessionq.checkpoints c
     WHERE c.session_id = p_session AND c.creator = p_caller AND (p_after IS NULL OR c.id > p_after)
     ORDER BY c.id LIMIT p_limit;
END $$;
COMMENT ON FUNCTION sessionq.list_checkpoints(uuid, text, uuid, integer) IS
  'The caller''s checkpoints of one of their Sessions, in id order after p_after; also after the Session is gone (deleted or expired) while the caller has checkpoints of it (they outlive it). NOT_FOUND, as GetSession answers, for a missing or another user''s Session and for a gone one with no checkpoint of the caller.';

CREATE OR REPLACE FUNCTION sessionq.rename_checkpoint(p_checkpoint uuid, p_caller text, p_name text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  c sessionq.checkpoints;
BEGIN
  UPDATE sessionq.checkpoints
     SET name = CASE WHEN coalesce(p_name, '') = '' THEN default_name ELSE p_name END, updated_at = clock_timestamp()
   WHERE id = p_checkpoint AND creator = p_caller AND state <> 'DELETING'
  RETURNING * INTO c;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('checkpoint %s not found', p_checkpoint));
  END IF;
  RETURN to_jsonb(c);
END $$;
COMMENT ON FUNCTION sessionq.rename_checkpoint(uuid, text, text) IS
  'Rename a checkpoint; an empty name restores the default "<agent> turn <n>".';

-- admit_checkpoint_delete: start removing the tag; refused while a live fork pins the checkpoint.
CREATE OR REPLACE FUNCTION sessionq.admit_checkpoint_delete(p_checkpoint uuid, p_caller text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  c sessionq.checkpoints;
  v_fork uuid;
BEGIN
  SELECT * INTO c FROM sessionq.checkpoints WHERE id = p_checkpoint AND creator = p_caller FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('checkpoint %s not found', p_checkpoint));
  END IF;
  IF c.state = 'CREATING' THEN
    PERFORM sessionq.fail('SQ409', format('checkpoint %s is still being created; retry after it is ready', c.id));
  END IF;
  SELECT id INTO v_fork FROM sessionq.sessions WHERE pinned_checkpoint_id = c.id LIMIT 1;
  IF FOUND THEN
    PERFORM sessionq.fail('SQ412', format('checkpoint %s is pinned by live session %s, forked from it; delete that session first',
                                          c.id, v_fork));
  END IF;
  IF c.state <> 'DELETING' THEN
    UPDATE sessionq.checkpoints SET state = 'DELETING', executor_id = NULL, executor_expires_at = NULL,
                                    updated_at = clock_timestamp()
     WHERE id = c.id RETURNING * INTO c;
  END IF;
  PERFORM sessionq.queue_checkpoint(c.id);
  RETURN to_jsonb(c);
END $$;
COMMENT ON FUNCTION sessionq.admit_checkpoint_delete(uuid, text) IS
  'DeleteCheckpoint admission: FAILED_PRECONDITION while a live fork pins it; marks it DELETING and queues delete_checkpoint (removes the tag, then the row). A retry joins.';

-- admit_fork: a Session creation from a READY checkpoint, with the history copied.
CREATE OR REPLACE FUNCTION sessionq.admit_fork(p_checkpoint uuid, p_caller text, p_request_id text)
RETURNS TABLE (outcome text, generation uuid, session jsonb) LANGUAGE plpgsql AS $$
DECLARE
  c sessionq.checkpoints;
  v sessionq.sessions;
  v_id uuid;
  t record;
  v_new_task text;
BEGIN
  IF p_request_id IS NULL OR length(p_request_id) NOT BETWEEN 1 AND 128 THEN
    PERFORM sessionq.fail('SQ400', 'request_id must be 1 to 128 characters');
  END IF;
  SELECT * INTO c FROM sessionq.checkpoints WHERE id = p_checkpoint AND creator = p_caller FOR SHARE;
  LOOP
    -- a new request id inserts first, so the common path never searches the caller's other Sessions
    IF c.state = 'READY' THEN
      v_id := sessionq.uuid_v7();
      INSERT INTO sessionq.sessions AS s (id, creator, request_kind, request_id, request_fingerprint, agent_namespace, agent_name,
                                          revision_id, name, state, operation, operation_id, actor_atespace, actor_name,
                                          actor_template, source_checkpoint_id)
      SELECT v_id, p_caller, 'fork', p_request_id, c.id::text, c.agent_namespace, c.agent_name, c.revision_id, c.name,
             'CREATING', 'CREATE', sessionq.uuid_v7(), r.template_atespace, 'session-' || v_id,
             r.template_atespace || '/' || r.template_name, c.id
        FROM sessionq.revisions r WHERE r.id = c.revision_id
      ON CONFLICT ON CONSTRAINT sessions_request_unique DO NOTHING
      RETURNING * INTO v;
      IF FOUND THEN
        -- replay the pinned history: own task ids and context id, original timestamps
        FOR t IN SELECT * FROM sessionq.tasks WHERE session_id = c.session_id
                   AND seq <= (SELECT coalesce(max(e.seq), 0) FROM sessionq.tasks e WHERE e.session_id = c.session_id
                                AND e.id = c.head_task_id)
                 ORDER BY seq LOOP
          v_new_task := sessionq.uuid_v7()::text;
          INSERT INTO sessionq.tasks (id, session_id, seq, state, task, version, published_version, phase, created_at, updated_at)
          VALUES (v_new_task, v.id, t.seq, t.state,
                  replace(replace(t.task::text, t.id, v_new_task), c.session_id::text, v.id::text)::jsonb,
                  1, 1, 'settled', t.created_at, t.updated_at);
          INSERT INTO sessionq.events (session_id, seq, task_id, kind, payload, created_at)
          SELECT v.id, e.seq, v_new_task, e.kind,
                 replace(replace(e.payload::text, t.id, v_new_task), c.session_id::text, v.id::text)::jsonb, e.created_at
            FROM sessionq.events e
           WHERE e.session_id = c.session_id AND e.task_id = t.id AND e.seq <= c.history_sequence;
        END LOOP;
        -- and its source Session's labels, if any (22_fleet.sql; none once an idle expiry removed
        -- it): without labels the column keeps its stored value, so the update stays HOT
        UPDATE sessionq.sessions f
           SET last_event_seq = c.history_sequence,
               labels = CASE WHEN src.labels <> '{}'::jsonb THEN src.labels ELSE f.labels END
          FROM (SELECT 1) one LEFT JOIN sessionq.sessions src ON src.id = c.session_id
         WHERE f.id = v.id RETURNING f.* INTO v;
        PERFORM sessionq.queue_operation(v.id);
        RETURN QUERY SELECT 'admitted'::text, v.operation_id, to_jsonb(v);
        RETURN;
      END IF;
    END IF;
    -- a retry (or a concurrent twin that won the insert) is answered from the existing fork, even
    -- when its checkpoint has since gone
    SELECT * INTO v FROM sessionq.sessions s
     WHERE s.creator = p_caller AND s.request_kind = 'fork' AND s.request_id = p_request_id FOR UPDATE;
    IF FOUND THEN
      RETURN QUERY SELECT * FROM sessionq.creation_retry(v, p_checkpoint::text);
      RETURN;
    END IF;
    IF c.id IS NULL THEN
      PERFORM sessionq.fail('SQ404', format('checkpoint %s not found', p_checkpoint));
    END IF;
    IF c.state <> 'READY' THEN
      PERFORM sessionq.fail('SQ412', format('checkpoint %s is %s; only a READY checkpoint can be forked', c.id, c.state));
    END IF;
    -- the conflicting Session went away (an idle expiry removed it) before it could be locked: insert again
  END LOOP;
END $$;
COMMENT ON FUNCTION sessionq.admit_fork(uuid, text, text) IS
  'ForkSession admission: a new Session (request kind fork, idempotent by caller and request id) from a READY checkpoint of the caller, running the checkpoint''s revision and named after it; the history through the checkpoint is copied with new task ids, the fork''s own context id and the original timestamps (its idle clock starts at its creation), and the source Session''s labels. The creation job creates the Actor from tag checkpoint-<id>.';

-- Turn snapshots: the snapshots of a Session's last N settled turns stay pinned (sessions.turnSnapshots),
-- so that any of those turns can be checkpointed and forked later (the time travel of sessionq.v1's
-- TurnService). A pin is a runtime tag turn-<pin id> holding its own copy of the snapshot recorded
-- after the turn: the quiescence worker makes it while it holds the Session's idle claim, right
-- after the suspend (begin_turn_pin, the tag, finish_turn_pin), so the next turn, a deletion, an
-- expiry or a checkpoint of the head turn waits for it exactly as they wait for the suspend; the
-- pins of turns older than the newest N are released in the same transaction (a
-- release_turn_snapshot job deletes the tag, then the row). A checkpoint at a retained turn takes
-- the pin over (admit_turn_checkpoint): the tag becomes the checkpoint's, the pin row goes, and the
-- retention never counts it again. Deleting or expiring the Session releases its pins (the trigger
-- below, when the Session turns DELETING). Every change runs under the Session row lock, so a pin
-- is taken over or released, never both.

CREATE TABLE sessionq.turn_snapshots (
  id                  uuid PRIMARY KEY DEFAULT sessionq.uuid_v7(),
  session_id          uuid NOT NULL,  -- no foreign key: a pin being released outlives an idle-expired Session
  task_id             text NOT NULL,
  task_seq            integer NOT NULL,
  history_sequence    bigint NOT NULL,
  state               text NOT NULL DEFAULT 'PINNING' CHECK (state IN ('PINNING', 'PINNED', 'RELEASING')),
  revision_id         uuid REFERENCES sessionq.revisions (id),
  actor_atespace      text NOT NULL,
  actor_name          text NOT NULL,
  actor_uid           text NOT NULL,
  snapshot_generation bigint NOT NULL,
  snapshot_uri        text NOT NULL,
  tag_name            text NOT NULL,
  tag_snapshot_uri    text,
  executor_id         uuid,
  failure_message     text,
  created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
  CONSTRAINT turn_snapshots_turn_unique UNIQUE (session_id, task_id)
);
CREATE INDEX turn_snapshots_session_idx ON sessionq.turn_snapshots (session_id, task_seq);
CREATE INDEX turn_snapshots_tag_idx ON sessionq.turn_snapshots (tag_name);  -- describe_tags
COMMENT ON TABLE sessionq.turn_snapshots IS
  'Turn pins: the snapshot recorded after settled turn task_id of a Session (history through history_sequence), held in the runtime as tag tag_name (turn-<id>) while the turn is among the Session''s last sessions.turnSnapshots settled turns. PINNING while the quiescence worker makes the tag, PINNED when the tag holds exactly snapshot_generation, RELEASING while a release_turn_snapshot job deletes the tag (then the row goes). A checkpoint at the turn takes the tag over and the row is removed.';
COMMENT ON COLUMN sessionq.turn_snapshots.task_seq IS 'The turn''s place in the Session (tasks.seq): the retention keeps the newest.';
COMMENT ON COLUMN sessionq.turn_snapshots.history_sequence IS 'The last event of the Session''s history the snapshot covers: a fork at the turn replays the history through it.';
COMMENT ON COLUMN sessionq.turn_snapshots.snapshot_generation IS 'The exact snapshot generation recorded after the turn; the tag must hold it.';
COMMENT ON COLUMN sessionq.turn_snapshots.tag_snapshot_uri IS 'The URI of the tag''s own copy, as the runtime answered (NULL until PINNED).';
COMMENT ON COLUMN sessionq.turn_snapshots.executor_id IS 'The idle claim (idle_executor) that makes the pin: only it may finish it.';
COMMENT ON COLUMN sessionq.turn_snapshots.revision_id IS 'The Session''s revision: a pin keeps it from the revision GC until released.';

-- queue_turn_release: make sure the job of a RELEASING pin is waiting.
CREATE OR REPLACE FUNCTION sessionq.queue_turn_release(p_pin uuid) RETURNS bigint
LANGUAGE sql AS $$
  SELECT sessionq.defer('release_turn_snapshot', p.id::text, jsonb_build_object('pin_id', p.id))
    FROM sessionq.turn_snapshots p WHERE p.id = p_pin AND p.state = 'RELEASING'
$$;
COMMENT ON FUNCTION sessionq.queue_turn_release(uuid) IS
  'Queue release_turn_snapshot for a RELEASING turn pin (queueing lock turnpin:<id>); nothing in another state.';

-- release_turn_pins: mark pins RELEASING and queue their jobs.
CREATE OR REPLACE FUNCTION sessionq.release_turn_pins(p_session uuid, p_keep integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_n integer := 0;
  p record;
BEGIN
  FOR p IN
    UPDATE sessionq.turn_snapshots t SET state = 'RELEASING', updated_at = clock_timestamp()
     WHERE t.session_id = p_session AND t.state <> 'RELEASING'
       AND (p_keep IS NULL
            OR t.state = 'PINNED' AND t.id NOT IN (SELECT k.id FROM sessionq.turn_snapshots k
                                                    WHERE k.session_id = p_session AND k.state = 'PINNED'
                                                    ORDER BY k.task_seq DESC LIMIT greatest(p_keep, 0)))
    RETURNING t.id
  LOOP
    PERFORM sessionq.queue_turn_release(p.id);
    v_n := v_n + 1;
  END LOOP;
  RETURN v_n;
END $$;
COMMENT ON FUNCTION sessionq.release_turn_pins(uuid, integer) IS
  'Release turn pins of a Session (the caller holds its row lock): with p_keep, the PINNED pins older than the newest p_keep; with NULL, every pin (deletion, expiry). Each becomes RELEASING and gets a release_turn_snapshot job. Returns how many.';

-- begin_turn_pin: by the idle claim holder, right after the suspend recorded the turn's snapshot.
CREATE OR REPLACE FUNCTION sessionq.begin_turn_pin(
  p_session uuid, p_boundary uuid, p_executor uuid, p_generation bigint, p_uri text
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  head sessionq.tasks;
  p sessionq.turn_snapshots;
  v_id uuid;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s
   WHERE s.id = p_session AND s.idle_boundary_id = p_boundary AND s.idle_executor = p_executor FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s does not hold the idle claim of session %s', p_executor, p_session));
  END IF;
  SELECT * INTO head FROM sessionq.tasks WHERE session_id = v.id ORDER BY seq DESC LIMIT 1;
  IF NOT FOUND OR head.phase <> 'settled'
     OR head.state NOT IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED')
     OR v.actor_uid IS NULL OR v.state <> 'READY' THEN
    RETURN NULL;  -- no settled turn to pin (a waiting turn is not checkpointable either)
  END IF;
  SELECT * INTO p FROM sessionq.turn_snapshots WHERE session_id = v.id AND task_id = head.id FOR UPDATE;
  IF FOUND THEN
    IF p.state = 'PINNING' THEN  -- an attempt that took the claim over finishes the pin
      UPDATE sessionq.turn_snapshots SET executor_id = p_executor, updated_at = clock_timestamp()
       WHERE id = p.id RETURNING * INTO p;
      RETURN to_jsonb(p);
    END IF;
    RETURN NULL;  -- pinned already (a quiescence after a Resume), or released
  END IF;
  IF EXISTS (SELECT 1 FROM sessionq.checkpoints c WHERE c.session_id = v.id AND c.head_task_id = head.id) THEN
    RETURN NULL;  -- a checkpoint holds this turn already
  END IF;
  v_id := sessionq.uuid_v7();
  INSERT INTO sessionq.turn_snapshots (id, session_id, task_id, task_seq, history_sequence, revision_id, actor_atespace,
                                       actor_name, actor_uid, snapshot_generation, snapshot_uri, tag_name, executor_id)
  VALUES (v_id, v.id, head.id, head.seq, v.last_event_seq, v.revision_id, v.actor_atespace, v.actor_name, v.actor_uid,
          p_generation, coalesce(p_uri, ''), 'turn-' || v_id, p_executor)
  RETURNING * INTO p;
  UPDATE sessionq.tasks SET snapshot_pinned = true WHERE id = head.id;  -- the turn has a snapshot of its own
  RETURN to_jsonb(p);
END $$;
COMMENT ON FUNCTION sessionq.begin_turn_pin(uuid, uuid, uuid, bigint, text) IS
  'By the idle claim holder after the suspend that recorded snapshot p_generation: record a PINNING turn pin of the Session''s settled head turn (tag turn-<id>), or answer the PINNING one an earlier attempt left; NULL when there is nothing to pin (no settled terminal head turn, pinned already, held by a checkpoint). ABORTED when p_executor does not hold the idle claim.';

-- finish_turn_pin: the tag is made (or could not be); older pins beyond the retention are released.
CREATE OR REPLACE FUNCTION sessionq.finish_turn_pin(
  p_pin uuid, p_executor uuid, p_failure text, p_tag_snapshot_uri text, p_keep integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  p sessionq.turn_snapshots;
  v_stale record;
BEGIN
  SELECT * INTO p FROM sessionq.turn_snapshots WHERE id = p_pin;
  IF FOUND THEN
    PERFORM 1 FROM sessionq.sessions WHERE id = p.session_id FOR UPDATE;  -- the order admission uses
    SELECT * INTO p FROM sessionq.turn_snapshots WHERE id = p_pin AND executor_id = p_executor AND state = 'PINNING'
       FOR UPDATE;
  END IF;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s does not hold turn pin %s', p_executor, p_pin));
  END IF;
  UPDATE sessionq.turn_snapshots
     SET state = CASE WHEN p_failure IS NULL THEN 'PINNED' ELSE 'RELEASING' END,
         tag_snapshot_uri = CASE WHEN p_failure IS NULL THEN coalesce(p_tag_snapshot_uri, snapshot_uri) END,
         failure_message = sessionq.clip(p_failure, 500), executor_id = NULL, updated_at = clock_timestamp()
   WHERE id = p.id RETURNING * INTO p;
  IF p.state = 'RELEASING' THEN
    PERFORM sessionq.queue_turn_release(p.id);  -- a tag an attempt may have made goes too
  END IF;
  -- pins an interrupted attempt left for an older turn, and the pins beyond the retention
  FOR v_stale IN
    UPDATE sessionq.turn_snapshots SET state = 'RELEASING', updated_at = clock_timestamp()
     WHERE session_id = p.session_id AND state = 'PINNING' AND id <> p.id
    RETURNING id
  LOOP
    PERFORM sessionq.queue_turn_release(v_stale.id);
  END LOOP;
  PERFORM sessionq.release_turn_pins(p.session_id, p_keep);
  RETURN to_jsonb(p);
END $$;
COMMENT ON FUNCTION sessionq.finish_turn_pin(uuid, uuid, text, text, integer) IS
  'By the attempt that began the pin (p_executor): PINNED with the tag''s own snapshot URI, or, with p_failure, RELEASING (its job deletes whatever tag was made); then every PINNED pin of the Session older than the newest p_keep is released (RELEASING, release_turn_snapshot queued). ABORTED when p_executor does not hold the PINNING pin.';

-- forget_turn_pin: the release job deleted the tag.
CREATE OR REPLACE FUNCTION sessionq.forget_turn_pin(p_pin uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM sessionq.turn_snapshots WHERE id = p_pin AND state = 'RELEASING';
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION sessionq.forget_turn_pin(uuid) IS
  'By release_turn_snapshot once the tag is gone: remove the RELEASING pin row. False when there is none.';

-- a Session turning DELETING (explicit deletion or idle expiry) releases its turn pins
CREATE OR REPLACE FUNCTION sessionq.release_turn_pins_on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM sessionq.release_turn_pins(NEW.id, NULL);
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.release_turn_pins_on_delete() IS
  'Trigger: when a Session becomes DELETING (DeleteSession or idle expiry), every turn pin of it is released, under the row lock of that change.';
CREATE TRIGGER sessions_release_turn_pins AFTER UPDATE OF state ON sessionq.sessions
  FOR EACH ROW WHEN (NEW.state = 'DELETING' AND OLD.state IS DISTINCT FROM 'DELETING')
  EXECUTE FUNCTION sessionq.release_turn_pins_on_delete();

-- turn_checkpointability: whether a turn of a locked or read Session can be checkpointed now, and why not.
CREATE OR REPLACE FUNCTION sessionq.turn_checkpointability(v sessionq.sessions, t sessionq.tasks, p_caller text)
RETURNS TABLE (status text, message text, checkpoint_id uuid) LANGUAGE plpgsql STABLE AS $$
DECLARE
  p sessionq.turn_snapshots;
  c sessionq.checkpoints;
BEGIN
  IF t.phase <> 'settled'
     OR t.state NOT IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED') THEN
    RETURN QUERY SELECT 'NOT_SETTLED'::text,
      format('turn %s is %s; only a settled, terminal turn can be checkpointed', sessionq.clip(t.id), t.state), NULL::uuid;
    RETURN;
  END IF;
  SELECT * INTO p FROM sessionq.turn_snapshots WHERE session_id = v.id AND task_id = t.id;
  IF FOUND AND p.state = 'PINNED' THEN
    RETURN QUERY SELECT 'RETAINED'::text, format('turn %s can be checkpointed and forked', sessionq.clip(t.id)), NULL::uuid;
    RETURN;
  END IF;
  IF FOUND AND p.state = 'PINNING' THEN
    RETURN QUERY SELECT 'PENDING'::text,
      format('the snapshot of turn %s is still being pinned; retry shortly', sessionq.clip(t.id)), NULL::uuid;
    RETURN;
  END IF;
  SELECT * INTO c FROM sessionq.checkpoints k
   WHERE k.session_id = v.id AND k.head_task_id = t.id AND k.creator = p_caller AND k.state IN ('CREATING', 'READY')
   ORDER BY k.id LIMIT 1;
  IF FOUND THEN
    RETURN QUERY SELECT 'CHECKPOINTED'::text,
      format('the snapshot of turn %s is held by checkpoint %s; fork from it', sessionq.clip(t.id), c.id), c.id;
    RETURN;
  END IF;
  IF t.snapshot_pinned OR FOUND AND p.state = 'RELEASING' THEN
    RETURN QUERY SELECT 'RELEASED'::text, format(
      'turn %s is outside the retained window: its snapshot was released (only the last sessions.turnSnapshots settled turns keep theirs)',
      sessionq.clip(t.id)), NULL::uuid;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'NOT_RETAINED'::text, format(
    'turn %s has no snapshot of its own: the next turn came before its Actor was suspended (back to back, or inside a keep-warm window), sessions.turnSnapshots is 0, it was replayed into a fork, or its pin failed', sessionq.clip(t.id)), NULL::uuid;
END $$;
COMMENT ON FUNCTION sessionq.turn_checkpointability(sessionq.sessions, sessionq.tasks, text) IS
  'Whether turn t of Session v can be checkpointed now: RETAINED (its pin is held), NOT_SETTLED (still running, waiting or unsettled), PENDING (being pinned), CHECKPOINTED (a checkpoint of p_caller holds it: checkpoint_id), RELEASED (its pin was released: outside the retained window), NOT_RETAINED (never pinned: no suspend came between it and the next turn, or no pin was made); with a short message saying so.';

-- list_turns: a Session's turns, each with whether it can be checkpointed now.
CREATE OR REPLACE FUNCTION sessionq.list_turns(p_session uuid, p_caller text, p_after_seq integer, p_limit integer)
RETURNS SETOF jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s WHERE s.id = p_session;
  IF sessionq.access(v, p_caller, NULL) IS DISTINCT FROM 'owner' THEN
    PERFORM sessionq.fail('SQ404', format('session %s not found', p_session));  -- as GetSession answers
  END IF;
  RETURN QUERY
    SELECT jsonb_build_object('task_id', t.id, 'seq', t.seq, 'state', t.state, 'phase', t.phase,
                              'created_at', t.created_at, 'updated_at', t.updated_at,
                              'status', k.status, 'message', k.message, 'checkpoint_id', k.checkpoint_id)
      FROM sessionq.tasks t
      CROSS JOIN LATERAL sessionq.turn_checkpointability(v, t, p_caller) k
     WHERE t.session_id = v.id AND t.seq > coalesce(p_after_seq, -1)
     ORDER BY t.seq LIMIT p_limit;
END $$;
COMMENT ON FUNCTION sessionq.list_turns(uuid, text, integer, integer) IS
  'The turns of one of the caller''s Sessions in order after p_after_seq: task, seq, state, phase, times, and whether each can be checkpointed now (status, message, checkpoint_id: turn_checkpointability). NOT_FOUND, as GetSession answers, for a missing, deleted or another user''s Session.';

-- admit_turn_checkpoint: a checkpoint at a retained turn takes that turn's pin over.
CREATE OR REPLACE FUNCTION sessionq.admit_turn_checkpoint(
  p_session uuid, p_caller text, p_request_id text, p_task text
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  c sessionq.checkpoints;
  t sessionq.tasks;
  p sessionq.turn_snapshots;
  k record;
  v_id uuid;
BEGIN
  IF p_request_id IS NULL OR length(p_request_id) NOT BETWEEN 1 AND 128 THEN
    PERFORM sessionq.fail('SQ400', 'request_id must be 1 to 128 characters');
  END IF;
  IF p_task IS NULL OR length(p_task) NOT BETWEEN 1 AND 128 THEN
    PERFORM sessionq.fail('SQ400', 'task_id must be 1 to 128 characters');
  END IF;
  SELECT * INTO c FROM sessionq.checkpoints WHERE creator = p_caller AND request_id = p_request_id;
  IF FOUND THEN  -- a retry: the same checkpoint, also after the Session has gone
    IF c.session_id <> p_session OR c.head_task_id <> p_task THEN
      PERFORM sessionq.fail('SQ422', format('request_id %s was already used for checkpoint %s with different parameters',
                                            sessionq.clip(p_request_id), c.id));
    END IF;
    RETURN to_jsonb(c);
  END IF;
  v := sessionq.visible_session(p_session, p_caller, NULL, 'owner');  -- the row lock every pin change takes
  SELECT * INTO c FROM sessionq.checkpoints WHERE creator = p_caller AND request_id = p_request_id;
  IF FOUND THEN  -- a concurrent twin took the pin over while this call waited for the lock
    IF c.session_id <> p_session OR c.head_task_id <> p_task THEN
      PERFORM sessionq.fail('SQ422', format('request_id %s was already used for checkpoint %s with different parameters',
                                            sessionq.clip(p_request_id), c.id));
    END IF;
    RETURN to_jsonb(c);
  END IF;
  IF v.state = 'DELETING' THEN
    PERFORM sessionq.fail('SQ412', format('session %s is being deleted', v.id));
  END IF;
  SELECT * INTO t FROM sessionq.tasks WHERE id = p_task AND session_id = v.id;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('task %s not found in session %s', sessionq.clip(p_task), v.id));
  END IF;
  SELECT * INTO k FROM sessionq.turn_checkpointability(v, t, p_caller);
  IF k.status <> 'RETAINED' THEN
    PERFORM sessionq.fail(CASE k.status WHEN 'PENDING' THEN 'SQ409' ELSE 'SQ412' END, k.message, 'TURN_' || k.status);
  END IF;
  SELECT * INTO p FROM sessionq.turn_snapshots WHERE session_id = v.id AND task_id = t.id AND state = 'PINNED' FOR UPDATE;
  v_id := sessionq.uuid_v7();
  INSERT INTO sessionq.checkpoints (id, session_id, creator, request_id, head_task_id, history_sequence, state, name,
                                    default_name, agent_namespace, agent_name, revision_id, actor_atespace, actor_name,
                                    actor_uid, snapshot_generation, snapshot_uri, tag_snapshot_uri, tag_name)
  VALUES (v_id, v.id, p_caller, p_request_id, t.id, p.history_sequence, 'READY',
          v.agent_name || ' turn ' || p.history_sequence, v.agent_name || ' turn ' || p.history_sequence,
          v.agent_namespace, v.agent_name, p.revision_id, p.actor_atespace, p.actor_name, p.actor_uid,
          p.snapshot_generation, p.snapshot_uri, p.tag_snapshot_uri, p.tag_name)
  ON CONFLICT ON CONSTRAINT checkpoints_request_unique DO NOTHING
  RETURNING * INTO c;
  IF NOT FOUND THEN  -- the same request id, used at the same moment for another Session
    PERFORM sessionq.fail('SQ422', format('request_id %s was already used for another checkpoint', sessionq.clip(p_request_id)));
  END IF;
  DELETE FROM sessionq.turn_snapshots WHERE id = p.id;  -- the tag is the checkpoint's now
  RETURN to_jsonb(c);
END $$;
COMMENT ON FUNCTION sessionq.admit_turn_checkpoint(uuid, text, text, text) IS
  'A checkpoint at a retained turn of one of the caller''s Sessions, idempotent by (caller, request id) like admit_checkpoint: under the Session row lock it takes the turn''s PINNED pin over (the checkpoint is READY at once, holding the pin''s tag turn-<id>; the pin row goes). NOT_FOUND for a task not of this Session and for a missing or another user''s Session; FAILED_PRECONDITION (reason TURN_<status>) for a turn not settled, outside the retained window, never retained or held by a checkpoint already; ABORTED while its pin is being made.';

-- admit_fork_at_turn: a checkpoint at the turn and a fork of it, in one transaction.
CREATE OR REPLACE FUNCTION sessionq.admit_fork_at_turn(p_session uuid, p_caller text, p_request_id text, p_task text)
RETURNS TABLE (outcome text, generation uuid, session jsonb) LANGUAGE plpgsql AS $$
DECLARE
  c sessionq.checkpoints;
  v sessionq.sessions;
  t sessionq.tasks;
  v_status text;
  v_checkpoint uuid;
BEGIN
  IF p_request_id IS NULL OR length(p_request_id) NOT BETWEEN 1 AND 128 THEN
    PERFORM sessionq.fail('SQ400', 'request_id must be 1 to 128 characters');
  END IF;
  SELECT * INTO c FROM sessionq.checkpoints WHERE creator = p_caller AND request_id = p_request_id;
  IF NOT FOUND THEN
    v := sessionq.visible_session(p_session, p_caller, NULL, 'owner');
    SELECT * INTO t FROM sessionq.tasks WHERE id = p_task AND session_id = v.id;
    IF FOUND THEN
      SELECT k.status, k.checkpoint_id INTO v_status, v_checkpoint FROM sessionq.turn_checkpointability(v, t, p_caller) k;
    END IF;
    IF v_status = 'CHECKPOINTED' THEN  -- a checkpoint of the caller holds the turn: fork from it
      SELECT * INTO c FROM sessionq.checkpoints WHERE id = v_checkpoint;
      IF c.state <> 'READY' THEN
        PERFORM sessionq.fail('SQ409', format('checkpoint %s of turn %s is still being created; retry', c.id,
                                              sessionq.clip(p_task)), 'KAGENT_SESSION_BUSY');
      END IF;
    ELSE
      c := jsonb_populate_record(NULL::sessionq.checkpoints,
                                 sessionq.admit_turn_checkpoint(p_session, p_caller, p_request_id, p_task));
    END IF;
  ELSIF c.session_id <> p_session OR c.head_task_id <> p_task THEN
    PERFORM sessionq.fail('SQ422', format('request_id %s was already used for checkpoint %s with different parameters',
                                          sessionq.clip(p_request_id), c.id));
  END IF;
  RETURN QUERY SELECT * FROM sessionq.admit_fork(c.id, p_caller, p_request_id);
END $$;
COMMENT ON FUNCTION sessionq.admit_fork_at_turn(uuid, text, text, text) IS
  'ForkAtTurn admission, idempotent by (caller, request id): a checkpoint at the turn (admit_turn_checkpoint, same request id; or the caller''s READY checkpoint that already holds the turn) and a fork of it (admit_fork, same request id), in one transaction. The fork replays the history through the turn and its Actor starts from the turn''s snapshot. Raises what those raise.';

-- describe_tags: what sessionq knows of runtime tags (ListTags): a checkpoint's or a turn pin's.
CREATE OR REPLACE FUNCTION sessionq.describe_tags(p_caller text, p_admin boolean, p_names text[])
RETURNS TABLE (tag_name text, kind text, session_id uuid, checkpoint_id uuid, task_id text, state text)
LANGUAGE sql STABLE AS $$
  SELECT n.name,
         CASE WHEN c.id IS NOT NULL THEN 'CHECKPOINT' WHEN p.id IS NOT NULL THEN 'TURN_PIN' ELSE 'OTHER' END,
         coalesce(c.session_id, p.session_id), c.id, coalesce(c.head_task_id, p.task_id), coalesce(c.state, p.state)
    FROM unnest(p_names) AS n(name)
    LEFT JOIN sessionq.checkpoints c ON c.tag_name = n.name
    LEFT JOIN sessionq.turn_snapshots p ON p.tag_name = n.name
   WHERE p_admin OR c.creator = p_caller
      OR p.session_id IN (SELECT s.id FROM sessionq.sessions s WHERE s.creator = p_caller)
$$;
COMMENT ON FUNCTION sessionq.describe_tags(text, boolean, text[]) IS
  'For the runtime tags p_names (ListTags): which are checkpoints'' (CHECKPOINT, with the checkpoint, its Session and head turn) and which turn pins (TURN_PIN, with the Session, turn and pin state); OTHER for a tag sessionq does not know. An admin (p_admin) gets every name; anyone else only the tags of their own checkpoints and of their own Sessions'' pins.';
