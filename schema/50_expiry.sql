-- Idle expiration: the sweep's page query, the recheck-and-admit procedure, and the leader record.
--
-- The idle clock of a Session is the later of its creation and its newest stored event
-- (greatest(created_at, last_event_at)). A leader-only sweep (one worker replica at a time,
-- holding the advisory lock below on its own connection) pages through candidates by that
-- clock, and for each calls expire_session, which rechecks everything under the Session row
-- lock that task admission uses and admits an ordinary DELETE with reason idle_timeout.

-- Sessions on sessions.idleTtl by their idle clock, Sessions with their own TTL (sessions.idle_ttl,
-- 22_fleet.sql; 0: never) by their own deadline
CREATE INDEX sessions_idle_clock_idx ON sessionq.sessions ((greatest(created_at, last_event_at)), id)
  WHERE state IN ('READY', 'SUSPENDED') AND idle_ttl IS NULL;
CREATE OR REPLACE FUNCTION sessionq.idle_deadline(p_created timestamptz, p_last_event timestamptz, p_ttl double precision)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  -- a whole number of microseconds added: the same instant in every time zone (so immutable)
  SELECT greatest(p_created, p_last_event) + make_interval(secs => p_ttl)
$$;
COMMENT ON FUNCTION sessionq.idle_deadline(timestamptz, timestamptz, double precision) IS
  'When a Session with its own idle TTL p_ttl seconds expires: its idle clock (the later of creation and newest event) plus p_ttl. Indexed (sessions_own_ttl_idx).';
CREATE INDEX sessions_own_ttl_idx ON sessionq.sessions (sessionq.idle_deadline(created_at, last_event_at, idle_ttl), id)
  WHERE state IN ('READY', 'SUSPENDED') AND idle_ttl > 0;
CREATE INDEX sessions_idle_deleting_idx ON sessionq.sessions (id)
  WHERE state = 'DELETING' AND deletion_reason = 'idle_timeout';

CREATE TABLE sessionq.leaders (
  role       text PRIMARY KEY,
  holder     text NOT NULL,
  since      timestamptz NOT NULL DEFAULT clock_timestamp(),
  last_run   timestamptz
);
COMMENT ON TABLE sessionq.leaders IS
  'Who leads each leader-only job (expiry, revision_gc) and when it last ran. Informational: the advisory lock is what elects (see sessionq.leader_lock_key).';

CREATE OR REPLACE FUNCTION sessionq.leader_lock_key(p_role text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtextextended('sessionq.leader:' || p_role, 0) $$;
COMMENT ON FUNCTION sessionq.leader_lock_key(text) IS
  'The pg_advisory_lock key whose holder (a session-level lock on a dedicated connection) is the leader of p_role.';

CREATE OR REPLACE FUNCTION sessionq.idle_candidates(p_ttl double precision, p_after_clock timestamptz, p_after_id uuid, p_limit integer)
RETURNS TABLE (id uuid, idle_since timestamptz) LANGUAGE plpgsql STABLE AS $$
DECLARE
  -- computed once: a constant bound lets the index answer (clock_timestamp() in the WHERE clause
  -- would be evaluated per row, turning an empty page into a scan of every idle Session)
  v_cutoff timestamptz := clock_timestamp() - make_interval(secs => p_ttl);
BEGIN
  RETURN QUERY
  SELECT s.id, greatest(s.created_at, s.last_event_at)
    FROM sessionq.sessions s
   WHERE s.state IN ('READY', 'SUSPENDED') AND s.kind = 'session' AND s.idle_ttl IS NULL
     AND greatest(s.created_at, s.last_event_at) < v_cutoff
     AND (p_after_clock IS NULL OR (greatest(s.created_at, s.last_event_at), s.id) > (p_after_clock, p_after_id))
   ORDER BY greatest(s.created_at, s.last_event_at), s.id
   LIMIT p_limit;
END $$;
COMMENT ON FUNCTION sessionq.idle_candidates(double precision, timestamptz, uuid, integer) IS
  'One page of the idle sweep: READY or SUSPENDED Sessions on sessions.idleTtl (no TTL of their own) whose idle clock (later of creation and newest event) is older than p_ttl seconds, in clock order after the given key. Candidates only: expire_session rechecks under the row lock.';

CREATE OR REPLACE FUNCTION sessionq.own_ttl_candidates(p_after_deadline timestamptz, p_after_id uuid, p_limit integer)
RETURNS TABLE (id uuid, deadline timestamptz) LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_now timestamptz := clock_timestamp();  -- a constant bound, as in idle_candidates
BEGIN
  RETURN QUERY
  SELECT s.id, sessionq.idle_deadline(s.created_at, s.last_event_at, s.idle_ttl)
    FROM sessionq.sessions s
   WHERE s.state IN ('READY', 'SUSPENDED') AND s.idle_ttl > 0 AND s.kind = 'session'
     AND sessionq.idle_deadline(s.created_at, s.last_event_at, s.idle_ttl) < v_now
     AND (p_after_deadline IS NULL
          OR (sessionq.idle_deadline(s.created_at, s.last_event_at, s.idle_ttl), s.id) > (p_after_deadline, p_after_id))
   ORDER BY sessionq.idle_deadline(s.created_at, s.last_event_at, s.idle_ttl), s.id
   LIMIT p_limit;
END $$;
COMMENT ON FUNCTION sessionq.own_ttl_candidates(timestamptz, uuid, integer) IS
  'One page of the idle sweep''s Sessions with their own idle TTL (sessions.idle_ttl > 0, whatever sessions.idleTtl is): READY or SUSPENDED ones past their deadline (idle_deadline), in deadline order after the given key (sessions_own_ttl_idx). Candidates only: expire_session rechecks under the row lock.';

CREATE OR REPLACE FUNCTION sessionq.idle_deletions_to_resume(
  p_after uuid, p_limit integer, p_kinds text[] DEFAULT ARRAY['session', 'sandbox']
) RETURNS SETOF uuid LANGUAGE sql STABLE AS $$
  SELECT s.id FROM sessionq.sessions s
   WHERE s.state = 'DELETING' AND s.deletion_reason = 'idle_timeout' AND (p_after IS NULL OR s.id > p_after)
     AND s.kind = ANY (p_kinds)
   ORDER BY s.id LIMIT p_limit
$$;
COMMENT ON FUNCTION sessionq.idle_deletions_to_resume(uuid, integer, text[]) IS
  'Admitted idle deletions (and Sandbox expiries) of the kinds p_kinds still in progress (failed or interrupted ones included): later sweeps resume them.';

-- expire_session: recheck under the task-admission row lock and admit the idle deletion.
CREATE OR REPLACE FUNCTION sessionq.expire_session(p_session uuid, p_ttl double precision)
RETURNS TABLE (outcome text, generation uuid, idle_seconds double precision) LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
  v_since timestamptz;
BEGIN
  SELECT * INTO v FROM sessionq.sessions WHERE id = p_session FOR UPDATE;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'gone'::text, NULL::uuid, NULL::double precision;
    RETURN;
  END IF;
  IF v.state = 'DELETING' AND v.deletion_reason = 'idle_timeout' THEN
    -- an admitted expiration: resume it (a new generation after a failed preparation), whatever the TTL now
    IF v.operation_id IS NULL THEN
      v := sessionq.new_generation(v.id, 'DELETE', 'idle_timeout', false);
    END IF;
    RETURN QUERY SELECT 'resumed'::text, v.operation_id, NULL::double precision;
    RETURN;
  END IF;
  v_since := CASE WHEN v.kind = 'sandbox' THEN v.expires_at ELSE greatest(v.created_at, v.last_event_at) END;
  IF (v.state NOT IN ('READY', 'SUSPENDED') OR v.operation <> 'NONE')
     -- a Sandbox expires even when its pending operation has no attempt running (25_sandboxes.sql)
     AND NOT (v.kind = 'sandbox' AND sessionq.sandbox_expiry_overrides(v))
     OR v.dispatch_id IS NOT NULL OR v.active_task_id IS NOT NULL OR v.unsettled_task_id IS NOT NULL
     OR v.idle_executor IS NOT NULL OR sessionq.checkpoint_in_progress(v.id)
     OR EXISTS (SELECT 1 FROM sessionq.tasks t WHERE t.session_id = v.id AND t.phase IN ('active', 'queued')
                 AND t.state IN ('TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING')) THEN
    RETURN QUERY SELECT 'busy'::text, NULL::uuid, NULL::double precision;  -- active work blocks expiry
    RETURN;
  END IF;
  IF v.kind = 'sandbox' AND (v.expires_at IS NULL OR v.expires_at > clock_timestamp())
     OR v.kind = 'session' AND coalesce(v.idle_ttl, p_ttl) = 0
     OR v.kind = 'session' AND v_since >= clock_timestamp() - make_interval(secs => coalesce(v.idle_ttl, p_ttl)) THEN
    -- a turn came in after the scan (a sandbox: it has not expired yet; activity never extends it)
    RETURN QUERY SELECT 'active'::text, NULL::uuid, NULL::double precision;
    RETURN;
  END IF;
  v := sessionq.new_generation(v.id, 'DELETE', 'idle_timeout', false);
  RETURN QUERY SELECT 'admitted'::text, v.operation_id, extract(epoch FROM clock_timestamp() - v_since)::double precision;
END $$;
COMMENT ON FUNCTION sessionq.expire_session(uuid, double precision) IS
  'Idle expiration under the Session row lock shared with task admission: recheck the idle clock against the Session''s own idle TTL (sessions.idle_ttl; 0: never), else p_ttl seconds (a Sandbox: its expires_at, whatever p_ttl; idle_seconds is then the time since it expired; a pending operation of a Sandbox blocks only while an attempt runs, sandbox_expiry_overrides) and the active work (pending operation, dispatch reservation, running, unsettled or queued turn, claimed quiescence, checkpoint being created); then admit an ordinary DELETE with durable reason idle_timeout (DELETING). An already admitted idle deletion is resumed. outcome: admitted, resumed, busy, active, gone.';

CREATE OR REPLACE FUNCTION sessionq.note_leader(p_role text, p_holder text) RETURNS void
LANGUAGE sql AS $$
  INSERT INTO sessionq.leaders (role, holder, since, last_run) VALUES (p_role, p_holder, clock_timestamp(), clock_timestamp())
  ON CONFLICT (role) DO UPDATE
    SET holder = excluded.holder,
        since = CASE WHEN sessionq.leaders.holder = excluded.holder THEN sessionq.leaders.since ELSE excluded.since END,
        last_run = excluded.last_run
$$;
COMMENT ON FUNCTION sessionq.note_leader(text, text) IS 'Record that p_holder leads p_role and ran now (for sessionq status).';

-- fail_stalled_turns: the periodic end of turns that went silent (sessions.stalledTurnTimeout).
CREATE OR REPLACE FUNCTION sessionq.fail_stalled_turns(p_timeout double precision, p_limit integer DEFAULT 100)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_cutoff timestamptz := clock_timestamp() - make_interval(secs => p_timeout);
  r record;
  n integer := 0;
BEGIN
  IF p_timeout IS NULL OR p_timeout <= 0 THEN
    RETURN 0;
  END IF;
  FOR r IN SELECT s.id, s.dispatch_id
             FROM sessionq.sessions s
             JOIN sessionq.tasks t ON t.id = coalesce(s.unsettled_task_id, s.active_task_id)
            WHERE s.dispatch_id IS NOT NULL AND t.dispatch_id = s.dispatch_id AND t.updated_at < v_cutoff
            ORDER BY t.updated_at
            LIMIT p_limit
              FOR UPDATE OF s SKIP LOCKED LOOP
    -- fail_dispatch (30_tasks.sql): the task FAILED and abandoned, the Actor suspended, the next queued turn started
    PERFORM sessionq.fail_dispatch(r.id, r.dispatch_id, format(
      'the turn stalled: no task update for %s s (sessions.stalledTurnTimeout)', round(p_timeout::numeric, 1)), true);
    n := n + 1;
  END LOOP;
  -- a reservation that lapsed before its Actor created the task, and queues left waiting: move on
  FOR r IN SELECT s.id, s.dispatch_id FROM sessionq.sessions s
            WHERE s.dispatch_id IS NOT NULL AND s.dispatch_expires_at < clock_timestamp()
              AND s.active_task_id IS NULL AND s.unsettled_task_id IS NULL
            LIMIT p_limit FOR UPDATE OF s SKIP LOCKED LOOP
    PERFORM sessionq.fail_dispatch(r.id, r.dispatch_id, 'the turn did not start before its dispatch reservation lapsed', true);
  END LOOP;
  FOR r IN SELECT DISTINCT q.session_id FROM sessionq.queued_turns q JOIN sessionq.sessions s ON s.id = q.session_id
            WHERE s.dispatch_id IS NULL LIMIT p_limit LOOP
    PERFORM sessionq.start_queued_turn(r.session_id);
  END LOOP;
  RETURN n;
END $$;
COMMENT ON FUNCTION sessionq.fail_stalled_turns(double precision, integer) IS
  'The periodic stalled-turn check (sessions.stalledTurnTimeout = p_timeout seconds; 0 or less: nothing): a running or unsettled turn whose task had no update for p_timeout is ended by fail_dispatch with the reason stated (the task FAILED and abandoned, the waiting caller told, an idle boundary marked so the Actor is suspended, the next queued turn started); at most p_limit a call, rows locked by others skipped. Also ends reservations that lapsed before their task was created and starts queues left waiting. Returns how many stalled turns were failed.';
