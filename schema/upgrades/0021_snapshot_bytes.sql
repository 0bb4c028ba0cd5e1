-- Upgrade 0021_snapshot_bytes: a snapshot's size in the Session's usage.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- sessions.snapshot_bytes (the recorded generation's size, as the runtime reported it),
-- session_usage.snapshot_bytes and snapshots_sized (counted by usage_on_session_change, its trigger
-- now also fired by a size learnt later), set by record_idle_outcome, complete_operation and
-- record_snapshot_completed (a new optional p_bytes; the three-argument form is dropped) through
-- check_snapshot_bytes and recorded_snapshot_bytes; get_session_usage and the new
-- agent_snapshot_usage (beside agent_usage, whose result stays as 0013 made it) show them. Sizes recorded before this revision are
-- unknown (snapshots_sized counts none of the earlier snapshots).

ALTER TABLE sessionq.session_usage ADD COLUMN IF NOT EXISTS snapshot_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE sessionq.session_usage ADD COLUMN IF NOT EXISTS snapshots_sized bigint NOT NULL DEFAULT 0;
COMMENT ON TABLE sessionq.session_usage IS
  'What a Session used, kept as the work happens (never computed by a scan): turns (a task row created by a turn), Actor resumes and their latency (record_resume, by the resuming worker), the Actor''s running time from a resume to the next recorded suspension, snapshots taken (a new snapshot generation recorded on the Session) and checkpoints held. One row per Session that used anything, removed with it. Snapshot bytes sum the sizes the runtime reported; snapshots_sized says how many snapshots that covers (a runtime that cannot say, such as ateapi, reports none: unknown sizes are never counted as 0).';
COMMENT ON COLUMN sessionq.session_usage.snapshot_bytes IS 'Bytes of the snapshots taken whose size the runtime reported (sessions.snapshot_bytes as each was recorded, or learnt when a pending one completed).';
COMMENT ON COLUMN sessionq.session_usage.snapshots_sized IS 'How many of the snapshots taken snapshot_bytes covers (snapshots - snapshots_sized: sizes unknown).';

ALTER TABLE sessionq.sessions ADD COLUMN IF NOT EXISTS snapshot_bytes bigint CHECK (snapshot_bytes BETWEEN 0 AND 1125899906842624);
COMMENT ON COLUMN sessionq.sessions.snapshot_bytes IS '[snapshot] The recorded snapshot generation''s size in bytes as the runtime reported it (at most 1 PiB); NULL while unknown: still IN_PROGRESS, or a runtime that cannot say (ateapi). Once known for a generation it stays; counted into session_usage.';

CREATE OR REPLACE FUNCTION sessionq.check_snapshot_bytes(p_bytes numeric) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_bytes IS NOT NULL AND (p_bytes <> trunc(p_bytes) OR p_bytes < 0 OR p_bytes > 1125899906842624) THEN
    PERFORM sessionq.fail('SQ400', 'snapshot bytes must be a whole number from 0 to 1125899906842624 (1 PiB)');
  END IF;
  RETURN p_bytes::bigint;
END $$;
COMMENT ON FUNCTION sessionq.check_snapshot_bytes(numeric) IS
  'A snapshot size as recorded: NULL (unknown) or a whole number of bytes up to 1 PiB; anything else is refused (SQ400, the value not echoed).';

CREATE OR REPLACE FUNCTION sessionq.recorded_snapshot_bytes(p_generation bigint, p_bytes bigint, p_snapshot jsonb)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
  v jsonb := p_snapshot -> 'bytes';
  v_bytes bigint;
BEGIN
  IF p_snapshot IS NULL OR NOT p_snapshot ? 'generation' THEN
    RETURN p_bytes;  -- no snapshot recorded: the row's stays
  END IF;
  IF v IS NOT NULL AND jsonb_typeof(v) NOT IN ('number', 'null') THEN
    PERFORM sessionq.fail('SQ400', 'snapshot bytes must be a whole number from 0 to 1125899906842624 (1 PiB)');
  END IF;
  v_bytes := sessionq.check_snapshot_bytes(CASE WHEN jsonb_typeof(v) = 'number' THEN (v #>> '{}')::numeric END);
  IF (p_snapshot ->> 'generation')::bigint IS DISTINCT FROM p_generation THEN
    RETURN v_bytes;
  END IF;
  RETURN coalesce(p_bytes, v_bytes);  -- the same generation again: a size once known stays
END $$;
COMMENT ON FUNCTION sessionq.recorded_snapshot_bytes(bigint, bigint, jsonb) IS
  'sessions.snapshot_bytes after recording p_snapshot ({generation, uri, status, bytes}, bytes optional) on a row holding generation p_generation of p_bytes: the new generation''s bytes (checked: check_snapshot_bytes), the known size of the same generation, or p_bytes when p_snapshot records none.';

CREATE OR REPLACE FUNCTION sessionq.usage_on_session_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_new boolean := NEW.snapshot_generation IS DISTINCT FROM OLD.snapshot_generation AND NEW.snapshot_generation IS NOT NULL;
  v_ends boolean := NEW.snapshot_generation IS DISTINCT FROM OLD.snapshot_generation
                    OR NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('DELETING', 'DELETED');
  -- the size to count: a new generation's, or the recorded generation's learnt now (it was unknown)
  v_bytes bigint := CASE WHEN v_new THEN NEW.snapshot_bytes
                         WHEN NEW.snapshot_generation IS NOT NULL AND OLD.snapshot_bytes IS NULL THEN NEW.snapshot_bytes END;
  v_sized integer := CASE WHEN v_bytes IS NULL THEN 0 ELSE 1 END;
BEGIN
  IF NOT v_new AND NOT v_ends AND v_bytes IS NULL THEN
    RETURN NULL;
  END IF;
  -- a new snapshot generation recorded: a snapshot taken, and the Actor suspended (its running
  -- interval ends); a deletion ends it too
  UPDATE sessionq.session_usage u
     SET snapshots = u.snapshots + CASE WHEN v_new THEN 1 ELSE 0 END,
         snapshot_bytes = u.snapshot_bytes + coalesce(v_bytes, 0),
         snapshots_sized = u.snapshots_sized + v_sized,
         running_seconds = u.running_seconds
                           + CASE WHEN v_ends THEN coalesce(extract(epoch FROM clock_timestamp() - u.running_since)::double precision, 0)
                                  ELSE 0 END,
         running_since = CASE WHEN v_ends THEN NULL ELSE u.running_since END
   WHERE u.session_id = NEW.id;
  IF NOT FOUND AND (v_new OR v_bytes IS NOT NULL) THEN
    INSERT INTO sessionq.session_usage AS u (session_id, snapshots, snapshot_bytes, snapshots_sized)
    VALUES (NEW.id, CASE WHEN v_new THEN 1 ELSE 0 END, coalesce(v_bytes, 0), v_sized)
    ON CONFLICT (session_id) DO UPDATE
      SET snapshots = u.snapshots + excluded.snapshots, snapshot_bytes = u.snapshot_bytes + excluded.snapshot_bytes,
          snapshots_sized = u.snapshots_sized + excluded.snapshots_sized;
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.usage_on_session_change() IS
  'Trigger (usage): a Session''s new snapshot generation counts a snapshot (and its size, when known) and ends the Actor''s running interval; a size learnt later for the recorded generation is counted then; its deletion (DELETING, DELETED) ends the interval too.';
DROP TRIGGER IF EXISTS sessions_usage ON sessionq.sessions;
CREATE TRIGGER sessions_usage AFTER UPDATE OF snapshot_generation, snapshot_bytes, state ON sessionq.sessions
  FOR EACH ROW
  WHEN (NEW.snapshot_generation IS DISTINCT FROM OLD.snapshot_generation
        OR NEW.snapshot_bytes IS DISTINCT FROM OLD.snapshot_bytes
        OR NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('DELETING', 'DELETED'))
  EXECUTE FUNCTION sessionq.usage_on_session_change();

CREATE OR REPLACE FUNCTION sessionq.get_session_usage(p_session uuid, p_caller text, p_share_hash text)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  u sessionq.session_usage;
BEGIN
  PERFORM sessionq.get_session(p_session, p_caller, p_share_hash);  -- NOT_FOUND as GetSession
  SELECT * INTO u FROM sessionq.session_usage x WHERE x.session_id = p_session;
  RETURN jsonb_build_object(
    'turns', coalesce(u.turns, 0),
    'running_seconds', coalesce(u.running_seconds, 0)
                       + coalesce(extract(epoch FROM clock_timestamp() - u.running_since)::double precision, 0),
    'running', u.running_since IS NOT NULL,
    'snapshots', coalesce(u.snapshots, 0), 'snapshot_bytes', coalesce(u.snapshot_bytes, 0),
    'snapshots_sized', coalesce(u.snapshots_sized, 0), 'checkpoints_held', coalesce(u.checkpoints_held, 0),
    'resumes', coalesce(u.resumes, 0), 'resume_seconds', coalesce(u.resume_seconds, 0),
    'resume_seconds_max', coalesce(u.resume_seconds_max, 0));
END $$;
COMMENT ON FUNCTION sessionq.get_session_usage(uuid, text, text) IS
  'A Session''s usage for a caller who may read it (NOT_FOUND otherwise): turns, Actor running seconds (an open interval counted up to now), snapshots, the bytes of those whose size is known and how many those are, checkpoints held, resumes and their total and slowest latency; zeros before any work.';

CREATE OR REPLACE FUNCTION sessionq.agent_snapshot_usage()
RETURNS TABLE (agent_namespace text, agent_name text, snapshot_bytes numeric, snapshots_sized numeric)
LANGUAGE sql STABLE AS $$
  SELECT s.agent_namespace, s.agent_name, sum(u.snapshot_bytes), sum(u.snapshots_sized)
    FROM sessionq.session_usage u JOIN sessionq.sessions s ON s.id = u.session_id
   WHERE s.state <> 'DELETED'
   GROUP BY s.agent_namespace, s.agent_name
$$;
COMMENT ON FUNCTION sessionq.agent_snapshot_usage() IS
  'Snapshot sizes summed per Agent over its live Sessions, as agent_usage sums the other figures: the bytes of the snapshots whose size the runtime reported, and how many those are (the sessionq_agent_snapshot_bytes and sessionq_agent_snapshots_sized gauges).';

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

COMMENT ON FUNCTION sessionq.finish_idle(uuid, uuid, uuid, jsonb) IS
  'Record a quiescence outcome by the claim holder: the exact snapshot (generation, uri, status, bytes: its size, optional) and the end of the idle claim (an uncertain one included); a paused Actor is paused no longer. A recorded snapshot clears the last quiescence failure. Retried on database failure without repeating the runtime call.';

-- record_snapshot_completed: a pending snapshot generation became durable (with its size).
DROP FUNCTION IF EXISTS sessionq.record_snapshot_completed(uuid, bigint, text);
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

-- complete_operation: a SUSPEND's snapshot records its size.
CREATE OR REPLACE FUNCTION sessionq.complete_operation(
  p_session uuid, p_generation uuid, p_executor uuid, p_result jsonb DEFAULT '{}', p_job bigint DEFAULT NULL,
  p_keep_job boolean DEFAULT false
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  v_kind text;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s
   WHERE s.id = p_session AND s.operation_id = p_generation AND s.executor_id = p_executor
     AND s.operation <> 'NONE'
   FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s no longer holds the claim of session %s', p_executor, p_session));
  END IF;
  IF p_job IS NOT NULL THEN
    PERFORM sessionq.finish_operation_job(p_job, p_session, p_keep_job);  -- the executing job ends with its work
  END IF;
  -- a job that waits for this claim to lapse has nothing left to wait for: it runs now (and ends,
  -- unless a newer operation is current by then), so it never holds the queueing lock for long
  PERFORM sessionq.run_waiting_job(sessionq.job_lock('execute_operation', p_session::text));
  v_kind := v.operation;
  IF v.operation = 'DELETE' AND v.deletion_reason = 'idle_timeout' THEN
    -- idle expiry leaves no tombstone: the row, its shares and its creation receipt go
    DELETE FROM sessionq.sessions WHERE id = v.id;
    RETURN NULL;
  END IF;
  UPDATE sessionq.sessions s
     SET state = CASE v.operation WHEN 'CREATE' THEN 'READY' WHEN 'RESUME' THEN 'READY'
                                  WHEN 'SUSPEND' THEN 'SUSPENDED' WHEN 'DELETE' THEN 'DELETED' END,
         operation = 'NONE',
         executor_id = NULL, executor_expires_at = NULL,
         failure_reason = NULL, failure_message = NULL,
         actor_uid = CASE WHEN v.operation = 'DELETE' THEN NULL ELSE coalesce(p_result ->> 'actor_uid', s.actor_uid) END,
         revision_id = CASE WHEN v.operation = 'DELETE' THEN NULL ELSE s.revision_id END,
         snapshot_generation = coalesce((p_result -> 'snapshot' ->> 'generation')::bigint, s.snapshot_generation),
         snapshot_uri = CASE WHEN p_result -> 'snapshot' ? 'generation' THEN p_result -> 'snapshot' ->> 'uri'
                             ELSE s.snapshot_uri END,
         snapshot_status = coalesce(p_result -> 'snapshot' ->> 'status', s.snapshot_status),
         snapshot_event_seq = CASE WHEN p_result -> 'snapshot' ? 'generation' THEN s.last_event_seq
                                   ELSE s.snapshot_event_seq END,
         snapshot_bytes = sessionq.recorded_snapshot_bytes(s.snapshot_generation, s.snapshot_bytes,
                                                           p_result -> 'snapshot'),  -- 45_usage.sql
         updated_at = clock_timestamp()
   WHERE s.id = v.id
  RETURNING * INTO v;
  IF v.state = 'DELETED' THEN
    DELETE FROM sessionq.session_shares WHERE session_id = v.id;  -- revoke shares with the tombstone
  END IF;
  PERFORM sessionq.on_operation_completed(v, v_kind);  -- what other domains do then (70_lifecycle_rules.sql)
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.complete_operation(uuid, uuid, uuid, jsonb, bigint, boolean) IS
  'Complete the generation by its claim holder, atomically: CREATE and RESUME -> READY, SUSPEND -> SUSPENDED, DELETE -> DELETED tombstone (revision pin, runtime routing, checkpoint pin and shares released) or, for idle_timeout, removal of the row. The operation UUID stays. A stale executor gets ABORTED. p_job, the executing execute_operation job, is ended in the same transaction (finish_operation_job: kept as succeeded with p_keep_job, else deleted); a job of the Session waiting for the claim to lapse becomes due now.';
