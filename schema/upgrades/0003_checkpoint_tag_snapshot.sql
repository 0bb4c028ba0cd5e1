-- Upgrade 0003_checkpoint_tag_snapshot: checkpoints record the tag's own snapshot URI.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.

ALTER TABLE sessionq.checkpoints ADD COLUMN IF NOT EXISTS tag_snapshot_uri text;
COMMENT ON COLUMN sessionq.checkpoints.tag_snapshot_uri IS
  'The URI of the tag''s own copy of the snapshot, as the runtime answered when the tag was made (NULL until READY). A fork checks the tag still holds it (with snapshot_generation). Rows made before this column hold snapshot_uri.';
COMMENT ON COLUMN sessionq.checkpoints.snapshot_uri IS
  'The URI of the Actor''s snapshot recorded after the head turn (the one the tag copies).';

UPDATE sessionq.checkpoints SET tag_snapshot_uri = snapshot_uri
 WHERE tag_snapshot_uri IS NULL AND state IN ('READY', 'DELETING');

-- the earlier form (three arguments) is replaced; a caller that sends no URI still works (DEFAULT)
DROP FUNCTION IF EXISTS sessionq.finish_checkpoint(uuid, uuid, text);

-- finish_checkpoint: record the outcome of the claim holder: READY, FAILED, or removed after deletion.
CREATE OR REPLACE FUNCTION sessionq.finish_checkpoint(
  p_checkpoint uuid, p_executor uuid, p_failure text, p_tag_snapshot_uri text DEFAULT NULL
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  c sessionq.checkpoints;
BEGIN
  SELECT * INTO c FROM sessionq.checkpoints WHERE id = p_checkpoint AND executor_id = p_executor FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ409', format('executor %s does not hold the claim of checkpoint %s', p_executor, p_checkpoint));
  END IF;
  -- a job waiting for this claim to lapse runs now (and ends), so it never holds the queueing lock
  -- that a later DeleteCheckpoint defers under
  PERFORM sessionq.run_waiting_job(sessionq.job_lock('create_checkpoint', c.id::text));
  IF c.state = 'DELETING' THEN
    DELETE FROM sessionq.checkpoints WHERE id = c.id;  -- the tag is gone: the pin is released
    RETURN NULL;
  END IF;
  UPDATE sessionq.checkpoints
     SET state = CASE WHEN p_failure IS NULL THEN 'READY' ELSE 'FAILED' END,
         tag_snapshot_uri = CASE WHEN p_failure IS NULL THEN coalesce(p_tag_snapshot_uri, snapshot_uri) END,
         failure_message = p_failure, executor_id = NULL, executor_expires_at = NULL, updated_at = clock_timestamp()
   WHERE id = c.id RETURNING * INTO c;
  -- the Session's idle work and turns may go on
  PERFORM sessionq.notify('sessionq_idle', jsonb_build_object('session', c.session_id));
  RETURN to_jsonb(c);
END $$;
COMMENT ON FUNCTION sessionq.finish_checkpoint(uuid, uuid, text, text) IS
  'Complete a checkpoint''s runtime work by its claim holder: CREATING -> READY with the tag''s own snapshot URI p_tag_snapshot_uri (NULL: the recorded snapshot_uri), or FAILED with p_failure; DELETING -> the row is removed, releasing its revision pin. ABORTED (SQ409) when p_executor does not hold the claim.';
