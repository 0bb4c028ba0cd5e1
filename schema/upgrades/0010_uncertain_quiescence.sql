-- Upgrade 0010_uncertain_quiescence: uncertain quiescence claims are resolved by the control plane.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- The uncertain claim's columns and procedures (take_over_idle_claim in its leased form),
-- finish_idle that ends an uncertain claim, the truthful refusal of a new turn while one is held
-- (check_turn_blockers) and retry_quiescence's comment.

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

-- finish_idle: record the outcome of a claimed idle boundary (the exact snapshot).
CREATE OR REPLACE FUNCTION sessionq.finish_idle(p_session uuid, p_boundary uuid, p_executor uuid, p_snapshot jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  UPDATE sessionq.sessions s
     SET idle_boundary_id = NULL, idle_boundary_at = NULL, idle_executor = NULL, idle_claimed_at = NULL,
         idle_uncertain_at = NULL, idle_retry_at = NULL, idle_attempts = 0, idle_unsent = false,
         snapshot_generation = coalesce((p_snapshot ->> 'generation')::bigint, s.snapshot_generation),
         snapshot_uri = CASE WHEN p_snapshot ? 'generation' THEN p_snapshot ->> 'uri' ELSE s.snapshot_uri END,
         snapshot_status = coalesce(p_snapshot ->> 'status', s.snapshot_status),
         snapshot_event_seq = CASE WHEN p_snapshot ? 'generation' THEN s.last_event_seq ELSE s.snapshot_event_seq END,
         quiescence_failure = CASE WHEN p_snapshot ? 'generation' THEN NULL ELSE s.quiescence_failure END,
         updated_at = clock_timestamp()
   WHERE s.id = p_session AND s.idle_boundary_id = p_boundary AND s.idle_executor = p_executor
  RETURNING * INTO v;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s does not hold the idle claim of session %s', p_executor, p_session));
  END IF;
  IF v.snapshot_status = 'IN_PROGRESS' THEN
    -- the runtime is still writing it: look again until it is durable (never fall back to an older one)
    PERFORM sessionq.defer('refresh_snapshot', v.id::text,
                           jsonb_build_object('session_id', v.id, 'generation', v.snapshot_generation),
                           clock_timestamp() + interval '1 second');
  END IF;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.finish_idle(uuid, uuid, uuid, jsonb) IS
  'Record a quiescence outcome by the claim holder: the exact snapshot (generation, uri, status) and the end of the idle claim (an uncertain one included). A recorded snapshot clears the last quiescence failure. Retried on database failure without repeating the runtime call.';

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
    PERFORM sessionq.fail('SQ409', format('the previous turn of session %s is still finishing (task %s is not settled)', v.id, v.unsettled_task_id));
  END IF;
  IF v.active_task_id IS NULL AND v.idle_executor IS NOT NULL
     AND v.dispatch_id IS NOT NULL AND v.dispatch_expires_at > clock_timestamp() THEN
    PERFORM sessionq.fail('SQ409', format(
      'a turn of session %s is waiting for its last suspend to be recorded; retry shortly', v.id), 'KAGENT_SESSION_BUSY');
  END IF;
  IF v.active_task_id IS NOT NULL OR v.dispatch_id IS NOT NULL AND v.dispatch_expires_at > clock_timestamp() THEN
    PERFORM sessionq.fail('SQ409', format('a turn is already running on session %s', v.id));
  END IF;
  PERFORM sessionq.check_checkpoint_blockers(v);  -- a checkpoint being created (40_checkpoints.sql)
END $$;
COMMENT ON FUNCTION sessionq.check_turn_blockers(sessionq.sessions) IS
  'Raise unless a locked Session can take a new turn: READY, no pending operation, no uncertain quiescence claim (its last suspend is being confirmed: ABORTED with KAGENT_SESSION_BUSY and when to retry), no running or unsettled turn (a dispatched turn waiting for a quiescence claim to be recorded says so), no checkpoint being created.';

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
