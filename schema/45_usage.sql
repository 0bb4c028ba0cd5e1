-- Usage per Session: what each Session used, kept as the work happens (never computed by a scan),
-- read by FleetService.GetSessionUsage and summed per Agent for the metrics (docs/fleet.md).
--
-- Triggers count what the rows already record (a turn's task, a new snapshot generation, a
-- checkpoint); a resume, which no row records, is reported by the worker that issued it
-- (record_resume, with the latency it measured). A snapshot's size comes with the statement that
-- records the snapshot (sessions.snapshot_bytes, from the runtime's answer; NULL when it cannot say).

CREATE TABLE sessionq.session_usage (
  session_id         uuid PRIMARY KEY REFERENCES sessionq.sessions (id) ON DELETE CASCADE,
  turns              bigint NOT NULL DEFAULT 0,
  running_seconds    double precision NOT NULL DEFAULT 0,
  running_since      timestamptz,
  snapshots          bigint NOT NULL DEFAULT 0,
  snapshot_bytes     bigint NOT NULL DEFAULT 0,
  snapshots_sized    bigint NOT NULL DEFAULT 0,
  checkpoints_held   integer NOT NULL DEFAULT 0,
  resumes            bigint NOT NULL DEFAULT 0,
  resume_seconds     double precision NOT NULL DEFAULT 0,
  resume_seconds_max double precision NOT NULL DEFAULT 0
);
COMMENT ON TABLE sessionq.session_usage IS
  'What a Session used, kept as the work happens (never computed by a scan): turns (a task row created by a turn), Actor resumes and their latency (record_resume, by the resuming worker), the Actor''s running time from a resume to the next recorded suspension, snapshots taken (a new snapshot generation recorded on the Session) and checkpoints held. One row per Session that used anything, removed with it. Snapshot bytes sum the sizes the runtime reported; snapshots_sized says how many snapshots that covers (a runtime that cannot say, such as ateapi, reports none: unknown sizes are never counted as 0).';
COMMENT ON COLUMN sessionq.session_usage.turns IS 'Turns: tasks the Actor created for a turn (a fork''s copied history not included).';
COMMENT ON COLUMN sessionq.session_usage.running_seconds IS 'Seconds the Actor ran: from each resume to the suspension recorded after it (a running interval is added when it ends).';
COMMENT ON COLUMN sessionq.session_usage.running_since IS 'When the running interval now open began (the resume); NULL while suspended.';
COMMENT ON COLUMN sessionq.session_usage.snapshots IS 'Snapshots taken: new snapshot generations recorded on the Session (quiescence or Suspend).';
COMMENT ON COLUMN sessionq.session_usage.snapshot_bytes IS 'Bytes of the snapshots taken whose size the runtime reported (sessions.snapshot_bytes as each was recorded, or learnt when a pending one completed).';
COMMENT ON COLUMN sessionq.session_usage.snapshots_sized IS 'How many of the snapshots taken snapshot_bytes covers (snapshots - snapshots_sized: sizes unknown).';
COMMENT ON COLUMN sessionq.session_usage.checkpoints_held IS 'Checkpoints of the Session that exist and have not failed.';
COMMENT ON COLUMN sessionq.session_usage.resumes IS 'Actor resumes sessionq issued (a turn''s dispatch, or ResumeSession).';
COMMENT ON COLUMN sessionq.session_usage.resume_seconds IS 'Total latency of those resumes, as the resuming worker measured the runtime call.';
COMMENT ON COLUMN sessionq.session_usage.resume_seconds_max IS 'The slowest of those resumes.';

-- record_resume is PL/pgSQL so that its plan is kept (an SQL function that reads a table is planned
-- on every call before PostgreSQL 18): every resume of an Actor records one.
CREATE OR REPLACE FUNCTION sessionq.record_resume(p_session uuid, p_seconds double precision) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO sessionq.session_usage AS u (session_id, resumes, resume_seconds, resume_seconds_max, running_since)
  SELECT s.id, 1, greatest(p_seconds, 0), greatest(p_seconds, 0), clock_timestamp()
    FROM sessionq.sessions s WHERE s.id = p_session
  ON CONFLICT (session_id) DO UPDATE
    SET resumes = u.resumes + 1, resume_seconds = u.resume_seconds + excluded.resume_seconds,
        resume_seconds_max = greatest(u.resume_seconds_max, excluded.resume_seconds_max),
        running_since = coalesce(u.running_since, excluded.running_since);
END $$;
COMMENT ON FUNCTION sessionq.record_resume(uuid, double precision) IS
  'Usage: the Actor of a Session was resumed by a call that took p_seconds; its running interval begins now (unless one is open). A Session gone meanwhile records nothing.';

-- a snapshot's size: sessions.snapshot_bytes, set by the statements that record a snapshot
-- (record_idle_outcome, complete_operation, record_snapshot_completed) from the runtime's answer
ALTER TABLE sessionq.sessions ADD COLUMN snapshot_bytes bigint CHECK (snapshot_bytes BETWEEN 0 AND 1125899906842624);
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
CREATE TRIGGER sessions_usage AFTER UPDATE OF snapshot_generation, snapshot_bytes, state ON sessionq.sessions
  FOR EACH ROW
  WHEN (NEW.snapshot_generation IS DISTINCT FROM OLD.snapshot_generation
        OR NEW.snapshot_bytes IS DISTINCT FROM OLD.snapshot_bytes
        OR NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('DELETING', 'DELETED'))
  EXECUTE FUNCTION sessionq.usage_on_session_change();

CREATE OR REPLACE FUNCTION sessionq.usage_on_turn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO sessionq.session_usage AS u (session_id, turns) VALUES (NEW.session_id, 1)
  ON CONFLICT (session_id) DO UPDATE SET turns = u.turns + 1;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.usage_on_turn() IS
  'Trigger (usage): a task created by a turn (not a fork''s copied history, inserted settled) counts a turn.';
CREATE TRIGGER tasks_usage AFTER INSERT ON sessionq.tasks
  FOR EACH ROW WHEN (NEW.phase IS DISTINCT FROM 'settled')
  EXECUTE FUNCTION sessionq.usage_on_turn();

CREATE OR REPLACE FUNCTION sessionq.usage_on_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO sessionq.session_usage AS u (session_id, checkpoints_held)
    SELECT s.id, 1 FROM sessionq.sessions s WHERE s.id = NEW.session_id
    ON CONFLICT (session_id) DO UPDATE SET checkpoints_held = u.checkpoints_held + 1;
  ELSIF TG_OP = 'DELETE' AND OLD.state <> 'FAILED' OR TG_OP = 'UPDATE' THEN
    UPDATE sessionq.session_usage u SET checkpoints_held = greatest(u.checkpoints_held - 1, 0)
     WHERE u.session_id = OLD.session_id;
  END IF;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION sessionq.usage_on_checkpoint() IS
  'Trigger (usage): a checkpoint created counts as held by its Session until it is deleted or fails.';
CREATE TRIGGER checkpoints_usage_insert AFTER INSERT ON sessionq.checkpoints
  FOR EACH ROW EXECUTE FUNCTION sessionq.usage_on_checkpoint();
CREATE TRIGGER checkpoints_usage_delete AFTER DELETE ON sessionq.checkpoints
  FOR EACH ROW EXECUTE FUNCTION sessionq.usage_on_checkpoint();
CREATE TRIGGER checkpoints_usage_failed AFTER UPDATE OF state ON sessionq.checkpoints
  FOR EACH ROW WHEN (NEW.state = 'FAILED' AND OLD.state <> 'FAILED')
  EXECUTE FUNCTION sessionq.usage_on_checkpoint();

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

CREATE OR REPLACE FUNCTION sessionq.agent_usage()
RETURNS TABLE (agent_namespace text, agent_name text, turns numeric, running_seconds double precision,
               snapshots numeric, checkpoints_held bigint, resumes numeric, resume_seconds double precision)
LANGUAGE sql STABLE AS $$
  SELECT s.agent_namespace, s.agent_name, sum(u.turns), sum(u.running_seconds), sum(u.snapshots),
         sum(u.checkpoints_held), sum(u.resumes), sum(u.resume_seconds)
    FROM sessionq.session_usage u JOIN sessionq.sessions s ON s.id = u.session_id
   WHERE s.state <> 'DELETED'
   GROUP BY s.agent_namespace, s.agent_name
$$;
COMMENT ON FUNCTION sessionq.agent_usage() IS
  'Usage summed per Agent over its live Sessions (the metrics'' sessionq_agent_usage_* gauges, refreshed with the other gauges; one row a Session that used anything is read).';

-- agent_usage's snapshot sizes, beside it (agent_usage's result, made by an earlier upgrade, stays as it was)
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
