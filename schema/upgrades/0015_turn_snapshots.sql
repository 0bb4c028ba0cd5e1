-- Upgrade 0015_turn_snapshots: turn pins (time travel to a Session's recent turns).
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- The turn_snapshots table with its procedures and the trigger that releases a deleted Session's
-- pins (40_checkpoints.sql), the release_turn_snapshot job kind (06_jobs.sql), revision_referenced
-- seeing the pins (60_gc.sql) and the session_snapshots view (80_operator_views.sql).

INSERT INTO sessionq.job_kinds (task_name, queue_name, lock_prefix, description) VALUES
  ('release_turn_snapshot', 'operations', 'turnpin', 'delete the tag of a released turn pin, then its row (subject: the pin id)')
ON CONFLICT (task_name) DO NOTHING;

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

CREATE TABLE IF NOT EXISTS sessionq.turn_snapshots (
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
CREATE INDEX IF NOT EXISTS turn_snapshots_session_idx ON sessionq.turn_snapshots (session_id, task_seq);
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
DROP TRIGGER IF EXISTS sessions_release_turn_pins ON sessionq.sessions;
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
  IF EXISTS (SELECT 1 FROM sessionq.turn_snapshots k WHERE k.session_id = v.id AND k.task_seq > t.seq AND k.state = 'PINNED')
     OR FOUND AND p.state = 'RELEASING' THEN
    RETURN QUERY SELECT 'RELEASED'::text, format(
      'turn %s is outside the retained window: its snapshot was released (only the last sessions.turnSnapshots settled turns keep theirs)',
      sessionq.clip(t.id)), NULL::uuid;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'NOT_RETAINED'::text, format(
    'the snapshot of turn %s was not retained (sessions.turnSnapshots is 0, the next turn came before it was pinned, it was replayed into a fork, or its pin failed)', sessionq.clip(t.id)), NULL::uuid;
END $$;
COMMENT ON FUNCTION sessionq.turn_checkpointability(sessionq.sessions, sessionq.tasks, text) IS
  'Whether turn t of Session v can be checkpointed now: RETAINED (its pin is held), NOT_SETTLED (still running, waiting or unsettled), PENDING (being pinned), CHECKPOINTED (a checkpoint of p_caller holds it: checkpoint_id), RELEASED (outside the retained window), NOT_RETAINED (never pinned); with a short message saying so.';

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

CREATE OR REPLACE FUNCTION sessionq.revision_referenced(p_revision uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM sessionq.agents a
                  WHERE a.desired_revision_id = p_revision OR a.latest_successful_revision_id = p_revision)
      OR EXISTS (SELECT 1 FROM sessionq.sessions s WHERE s.revision_id = p_revision)
      OR EXISTS (SELECT 1 FROM sessionq.checkpoints c WHERE c.revision_id = p_revision)
      OR EXISTS (SELECT 1 FROM sessionq.turn_snapshots p WHERE p.revision_id = p_revision)
$$;
COMMENT ON FUNCTION sessionq.revision_referenced(uuid) IS
  'True while an Agent definition (desired or latest successful), a live Session, a checkpoint or a turn pin (until its tag is released) references the revision.';

-- session_snapshots: the snapshots each live Session holds in the runtime (turn pins and checkpoints).
CREATE OR REPLACE VIEW sessionq.session_snapshots AS
SELECT s.id AS session_id,
       s.agent_namespace,
       s.agent_name,
       s.state,
       coalesce(p.pinned, 0) AS turn_pins,
       coalesce(p.pinning, 0) AS turn_pins_pending,
       coalesce(p.releasing, 0) AS turn_pins_releasing,
       coalesce(c.held, 0) AS checkpoints,
       coalesce(p.pinned, 0) + coalesce(p.pinning, 0) + coalesce(p.releasing, 0) + coalesce(c.held, 0) AS snapshots_held,
       p.oldest_task_seq AS oldest_pinned_turn,
       p.newest_task_seq AS newest_pinned_turn
  FROM sessionq.sessions s
  LEFT JOIN (
    SELECT t.session_id,
           count(*) FILTER (WHERE t.state = 'PINNED') AS pinned,
           count(*) FILTER (WHERE t.state = 'PINNING') AS pinning,
           count(*) FILTER (WHERE t.state = 'RELEASING') AS releasing,
           min(t.task_seq) FILTER (WHERE t.state = 'PINNED') AS oldest_task_seq,
           max(t.task_seq) FILTER (WHERE t.state = 'PINNED') AS newest_task_seq
      FROM sessionq.turn_snapshots t GROUP BY t.session_id
  ) p ON p.session_id = s.id
  LEFT JOIN (
    SELECT k.session_id, count(*) AS held FROM sessionq.checkpoints k WHERE k.state <> 'FAILED' GROUP BY k.session_id
  ) c ON c.session_id = s.id
 WHERE s.kind = 'session' AND s.state <> 'DELETED';
COMMENT ON VIEW sessionq.session_snapshots IS
  'Per live Session, the snapshots it holds in the runtime as tags: turn pins (sessions.turnSnapshots: the last N settled turns) and its checkpoints. At steady state turn_pins is min(N, settled turns).';
COMMENT ON COLUMN sessionq.session_snapshots.turn_pins IS 'PINNED turn pins (tags turn-<id>): turns that can be checkpointed or forked now.';
COMMENT ON COLUMN sessionq.session_snapshots.turn_pins_pending IS 'PINNING: a quiescence worker is making the tag.';
COMMENT ON COLUMN sessionq.session_snapshots.turn_pins_releasing IS 'RELEASING: older than the retention, a release_turn_snapshot job deletes the tag.';
COMMENT ON COLUMN sessionq.session_snapshots.checkpoints IS 'Checkpoints of the Session being created, ready or being deleted (each a tag; they outlive the Session).';
COMMENT ON COLUMN sessionq.session_snapshots.snapshots_held IS 'Tags the Session holds in the runtime now: the sum of the four counts.';
COMMENT ON COLUMN sessionq.session_snapshots.oldest_pinned_turn IS 'tasks.seq of the oldest retained turn (NULL: none).';
COMMENT ON COLUMN sessionq.session_snapshots.newest_pinned_turn IS 'tasks.seq of the newest retained turn (NULL: none).';
