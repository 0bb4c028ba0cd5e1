-- Upgrade 0020_turns_rest: what time travel and between turns left.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- A turn remembers whether it had a snapshot of its own (tasks.snapshot_pinned, set by
-- begin_turn_pin), so that turn_checkpointability says NOT_RETAINED, not RELEASED, for turns that
-- were followed by the next one before a suspend (back to back, keep warm); pins of turns pinned
-- before this upgrade are backfilled from the pins that still exist (a turn whose pin was released
-- before it reads NOT_RETAINED). Indexes for describe_tags' lookups by tag name. Workers report
-- their sessions.keepWarm (worker_info.keep_warm, register_worker with it: the old signature
-- dropped), and quiescence_backlog shows boundaries inside the server-wide window as warm
-- (server_keep_warm).

ALTER TABLE sessionq.tasks ADD COLUMN IF NOT EXISTS snapshot_pinned boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN sessionq.tasks.snapshot_pinned IS
  'The turn had a snapshot of its own, pinned (a turn pin was begun for it, 40_checkpoints.sql): without a pin now it was released; never set for a turn the next one followed before a suspend (back to back, keep warm), which shares that later snapshot.';
UPDATE sessionq.tasks t SET snapshot_pinned = true
 WHERE NOT t.snapshot_pinned AND EXISTS (SELECT 1 FROM sessionq.turn_snapshots p WHERE p.task_id = t.id);

CREATE INDEX IF NOT EXISTS turn_snapshots_tag_idx ON sessionq.turn_snapshots (tag_name);  -- describe_tags
CREATE INDEX IF NOT EXISTS checkpoints_tag_idx ON sessionq.checkpoints (tag_name);  -- describe_tags

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

ALTER TABLE sessionq.worker_info ADD COLUMN IF NOT EXISTS keep_warm double precision;
COMMENT ON COLUMN sessionq.worker_info.keep_warm IS 'The worker''s sessions.keepWarm in seconds (the server-wide keep-warm window its quiescence workers wait out; an Agent''s keepWarm overrides it); NULL: not reported.';

DROP FUNCTION IF EXISTS sessionq.register_worker(bigint, text, text, integer, text[], integer);
CREATE OR REPLACE FUNCTION sessionq.register_worker(
  p_worker_id bigint, p_name text, p_host text, p_pid integer, p_queues text[], p_concurrency integer,
  p_keep_warm double precision DEFAULT NULL
) RETURNS void
LANGUAGE sql AS $$
  INSERT INTO sessionq.worker_info (worker_id, name, host, pid, queues, concurrency, keep_warm)
  VALUES (p_worker_id, p_name, p_host, p_pid, p_queues, p_concurrency, p_keep_warm)
  ON CONFLICT (worker_id) DO UPDATE
    SET name = EXCLUDED.name, host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
        concurrency = EXCLUDED.concurrency, keep_warm = EXCLUDED.keep_warm, started_at = clock_timestamp(),
        draining_since = NULL, drain_id = NULL, drain_timeout = NULL;
$$;
COMMENT ON FUNCTION sessionq.register_worker(bigint, text, text, integer, text[], integer, double precision) IS
  'A worker process records its name, host, pid, queues, concurrency and sessions.keepWarm under its procrastinate worker id once procrastinate registered it.';

CREATE OR REPLACE FUNCTION sessionq.server_keep_warm() RETURNS double precision
LANGUAGE sql STABLE AS $$
  SELECT coalesce(min(wi.keep_warm), 0) FROM sessionq.worker_info wi WHERE wi.keep_warm IS NOT NULL
$$;
COMMENT ON FUNCTION sessionq.server_keep_warm() IS
  'The server-wide sessions.keepWarm (seconds) as the live workers report it (sessionq.worker_info.keep_warm): the smallest, since the first worker whose window has passed claims the boundary; 0 when none reports one.';

CREATE OR REPLACE VIEW sessionq.quiescence_backlog AS
SELECT s.id AS session_id,
       s.state,
       s.idle_boundary_id,
       s.idle_boundary_at,
       now() - s.idle_boundary_at AS waiting,
       s.idle_executor AS claim_holder,
       s.idle_claimed_at,
       now() - s.idle_claimed_at AS claimed_for,
       CASE WHEN s.idle_executor IS NOT NULL THEN 'claimed'
            WHEN s.state <> 'READY' THEN 'ineligible'
            -- 30_tasks.sql: an Actor paused waiting for input, or kept warm by its Agent's keepWarm
            WHEN s.actor_paused_at IS NOT NULL AND s.idle_boundary_at > now() THEN 'paused'
            WHEN s.idle_boundary_at > now() - make_interval(secs => sessionq.keep_warm_of(s.revision_id, sessionq.server_keep_warm())) THEN 'warm'
            WHEN s.operation <> 'NONE' OR s.dispatch_id IS NOT NULL OR s.active_task_id IS NOT NULL
                 OR s.unsettled_task_id IS NOT NULL OR sessionq.checkpoint_in_progress(s.id) THEN 'blocked'
            ELSE 'waiting' END AS status,
       CASE WHEN s.idle_executor IS NOT NULL THEN NULL
            WHEN s.state <> 'READY' THEN format('the session is %s', s.state)
            WHEN s.operation <> 'NONE' THEN format('a %s operation is pending', lower(s.operation))
            WHEN s.dispatch_id IS NOT NULL THEN format('turn dispatch %s is reserved', s.dispatch_id)
            WHEN s.active_task_id IS NOT NULL THEN format('task %s is running', s.active_task_id)
            WHEN s.unsettled_task_id IS NOT NULL THEN format('task %s is not settled', s.unsettled_task_id)
            WHEN sessionq.checkpoint_in_progress(s.id) THEN 'a checkpoint is being created'
       END AS blocked_by
  FROM sessionq.sessions s
 WHERE s.idle_boundary_id IS NOT NULL;
COMMENT ON COLUMN sessionq.quiescence_backlog.status IS 'waiting, blocked, claimed, ineligible (the Session is not READY; the boundary is dropped by the next operation), paused (the Actor is paused waiting for input until the boundary falls due: sessions.pausedRuntimeTtl) or warm (inside its keep-warm window: its Agent''s keepWarm, else the server-wide sessions.keepWarm the workers report, sessionq.server_keep_warm).';
