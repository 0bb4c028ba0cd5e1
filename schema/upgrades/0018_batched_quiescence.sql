-- Upgrade 0018_batched_quiescence: the quiescence workers claim, suspend and record in batches.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- claim_idle_work (claim up to a limit of idle boundaries and say what remains, in one statement:
-- claim_idle and idle_work_state in one round trip), record_idle_outcome (finish_idle's record
-- without its error) and finish_idle on it, finish_idle_many (several outcomes in one statement).

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
  'Internal to finish_idle and finish_idle_many: record the quiescence outcome of the claim p_executor holds (the exact snapshot, the end of the claim; an IN_PROGRESS snapshot queues refresh_snapshot). The row, or NULL when p_executor does not hold the idle claim of p_boundary.';

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
  'Record a quiescence outcome by the claim holder: the exact snapshot (generation, uri, status) and the end of the idle claim (an uncertain one included); a paused Actor is paused no longer. A recorded snapshot clears the last quiescence failure. Retried on database failure without repeating the runtime call.';
