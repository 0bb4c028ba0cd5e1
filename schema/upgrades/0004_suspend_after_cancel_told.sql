-- Upgrade 0004_suspend_after_cancel_told: a cancelled turn's Actor is suspended only after it was told of the cancel.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.

CREATE INDEX IF NOT EXISTS task_cancels_untold_idx ON sessionq.task_cancels (session_id) WHERE actor_told_at IS NULL;

-- claim_idle: a quiescence worker takes the oldest eligible idle boundary.
CREATE OR REPLACE FUNCTION sessionq.claim_idle(p_executor uuid) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v sessionq.sessions;
BEGIN
  SELECT * INTO v FROM sessionq.sessions s
   WHERE s.idle_boundary_id IS NOT NULL AND s.idle_executor IS NULL
     AND s.state = 'READY' AND s.operation = 'NONE'
     AND s.dispatch_id IS NULL AND s.active_task_id IS NULL AND s.unsettled_task_id IS NULL
     AND NOT sessionq.checkpoint_in_progress(s.id)  -- 40_checkpoints.sql
     AND NOT EXISTS (SELECT 1 FROM sessionq.task_cancels c  -- 35_a2a.sql: ended, the Actor not told yet
                      WHERE c.session_id = s.id AND c.actor_told_at IS NULL
                        AND c.finished_at > clock_timestamp() - interval '10 minutes')
   ORDER BY s.idle_boundary_at
   LIMIT 1
   FOR UPDATE SKIP LOCKED;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  UPDATE sessionq.sessions SET idle_executor = p_executor, idle_claimed_at = clock_timestamp()
   WHERE id = v.id RETURNING * INTO v;
  RETURN to_jsonb(v);
END $$;
COMMENT ON FUNCTION sessionq.claim_idle(uuid) IS
  'Claim the oldest idle boundary of a READY Session with nothing running, dispatched, unsettled, pending or being checkpointed, and no cancel ended in the last 10 minutes whose Actor was not told of it yet (FOR UPDATE SKIP LOCKED, so replicas never take the same one). NULL when none is eligible now.';

CREATE OR REPLACE FUNCTION sessionq.cancel_told(p_task text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_session uuid;
BEGIN
  UPDATE sessionq.task_cancels SET actor_told_at = clock_timestamp() WHERE task_id = p_task AND actor_told_at IS NULL
  RETURNING session_id INTO v_session;
  IF v_session IS NOT NULL THEN
    PERFORM sessionq.notify('sessionq_idle', jsonb_build_object('session', v_session));  -- its boundary is claimable
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.cancel_told(text) IS
  'The cancel_task job''s last step: the Actor was told to stop the task (or had nothing to stop). The Session''s idle boundary becomes claimable (claim_idle waits for it): the quiescence workers are woken.';
