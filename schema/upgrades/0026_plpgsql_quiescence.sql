-- 0026_plpgsql_quiescence: turn_busy, idle_work_blocked, turn_waits_for_input,
-- checkpoint_in_progress and record_resume become PL/pgSQL with the same results, so that their
-- plans are kept (PostgreSQL before 18 plans an SQL function's body on every call that is not
-- inlined, and one that reads a table never is): each is mostly called on its own, once per turn,
-- resume or claim. keep_warm_of stays an SQL function: it is only called once per row inside one
-- statement, where its plan is made once for the statement and PL/pgSQL would cost ~1 us more a row.
CREATE OR REPLACE FUNCTION sessionq.turn_busy(v sessionq.sessions) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN v.active_task_id IS NOT NULL OR v.unsettled_task_id IS NOT NULL
      OR v.dispatch_id IS NOT NULL AND v.dispatch_expires_at > clock_timestamp()
      OR EXISTS (SELECT 1 FROM sessionq.queued_turns q WHERE q.session_id = v.id);
END $$;

CREATE OR REPLACE FUNCTION sessionq.idle_work_blocked(p_keep_warm double precision DEFAULT 0) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM sessionq.sessions s
                  WHERE s.idle_boundary_id IS NOT NULL AND s.idle_executor IS NULL AND s.state = 'READY'
                    AND s.idle_boundary_at <= clock_timestamp()
                                              - make_interval(secs => sessionq.keep_warm_of(s.revision_id, p_keep_warm)));
END $$;

CREATE OR REPLACE FUNCTION sessionq.turn_waits_for_input(p_session uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN coalesce((SELECT t.phase = 'settled' AND t.state IN ('TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED')
                     FROM sessionq.tasks t WHERE t.session_id = p_session AND t.phase <> 'queued'
                    ORDER BY t.seq DESC LIMIT 1), false);
END $$;

CREATE OR REPLACE FUNCTION sessionq.checkpoint_in_progress(p_session uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM sessionq.checkpoints c WHERE c.session_id = p_session AND c.state = 'CREATING');
END $$;

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
