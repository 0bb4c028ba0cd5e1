-- Uncertain quiescence claims are resolved by the control plane itself.
--
-- A quiescence claim whose attempt ended without a recorded outcome (the suspend failed, timed out,
-- or its worker died) stays in place (Q-10: it blocks new work), but it is uncertain: it records
-- when it became so, how many attempts failed, whether the last one certainly never reached the
-- runtime, and when the next attempt may take it over. A quiescence worker takes such a claim over
-- under the row lock (FOR UPDATE SKIP LOCKED: one resolver at a time, with a lease), reads the Actor
-- back under the recorded UID and suspends it only if the read-back shows the suspend did not
-- happen; a SUSPENDED Actor is recorded as it is (domain/quiescence.py). A claim whose holder
-- neither recorded an outcome nor a failure within its lease (the worker died, or the database was
-- away when it tried) becomes uncertain at the workers' recovery scan (mark_lapsed_idle_claims).
--
-- Applied by migration 0002 (every file of schema/) on a clean database and again by 0007 on a
-- database made before it: every statement here is idempotent.

ALTER TABLE sessionq.sessions
  ADD COLUMN IF NOT EXISTS idle_uncertain_at timestamptz,
  ADD COLUMN IF NOT EXISTS idle_retry_at timestamptz,
  ADD COLUMN IF NOT EXISTS idle_attempts integer NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS idle_unsent boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN sessionq.sessions.idle_uncertain_at IS '[quiescence] When the idle claim became uncertain: an attempt ended without a recorded outcome (or its holder outlived its lease). NULL while the first attempt runs. New turns are refused while it is set (the last suspend is being confirmed); cleared when the outcome is recorded.';
COMMENT ON COLUMN sessionq.sessions.idle_retry_at IS '[quiescence] Of an uncertain idle claim: when a quiescence worker may take it over next (after a failed attempt: a backoff; while one resolves it: the end of its lease).';
COMMENT ON COLUMN sessionq.sessions.idle_attempts IS '[quiescence] Failed attempts at the current idle claim (the backoff grows with it); 0 once recorded.';
COMMENT ON COLUMN sessionq.sessions.idle_unsent IS '[quiescence] The last failed attempt certainly never reached the runtime (the connection was refused): nothing was issued.';

-- only uncertain claims are indexed: a normal claim and its recording leave these columns NULL and
-- stay HOT updates
CREATE INDEX IF NOT EXISTS sessions_idle_uncertain_idx ON sessionq.sessions (idle_retry_at)
  WHERE idle_uncertain_at IS NOT NULL;

-- the resolver's take-over with a lease replaced the operator's plain take-over
DROP FUNCTION IF EXISTS sessionq.take_over_idle_claim(uuid, uuid);

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
CREATE OR REPLACE FUNCTION sessionq.idle_work_state(OUT blocked boolean, OUT retry_in double precision)
LANGUAGE sql STABLE AS $$
  SELECT sessionq.idle_work_blocked(),
         (SELECT extract(epoch FROM min(s.idle_retry_at) - clock_timestamp())::double precision
            FROM sessionq.sessions s WHERE s.idle_uncertain_at IS NOT NULL)
$$;
COMMENT ON FUNCTION sessionq.idle_work_state() IS
  'After an empty claim: blocked (idle_work_blocked: unclaimed idle work waits on something, look again within a second) and retry_in (seconds until the next uncertain idle claim may be taken over, 0 or less when one is due now; NULL when none is uncertain).';
