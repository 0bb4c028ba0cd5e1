-- Upgrade 0011_turn_failure: why a turn could not start, on the Session.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- record_turn_failure and clear_turn_failure, and the comment of sessions.failure_reason that names
-- the new reason (RestoreFailed).

-- record_turn_failure: why a turn could not start, shown on the Session until a resume succeeds.
CREATE OR REPLACE FUNCTION sessionq.record_turn_failure(p_session uuid, p_dispatch uuid, p_reason text, p_message text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq.sessions
     SET failure_reason = p_reason, failure_message = sessionq.clip(p_message, 1000), updated_at = clock_timestamp()
   WHERE id = p_session AND dispatch_id = p_dispatch AND operation = 'NONE' AND failed_operation_id IS NULL;
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION sessionq.record_turn_failure(uuid, uuid, text, text) IS
  'Record on the Session why the turn of dispatch p_dispatch could not start (failure_reason p_reason, e.g. RestoreFailed, and the message, clipped): while that dispatch is current and no operation is pending or failed (their failure stays). Clients see it as the Session''s Failure until clear_turn_failure, an admission or a completion. True when recorded.';

-- clear_turn_failure: a resume succeeded; the Session no longer shows why an earlier one failed.
CREATE OR REPLACE FUNCTION sessionq.clear_turn_failure(p_session uuid, p_reason text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq.sessions
     SET failure_reason = NULL, failure_message = NULL, updated_at = clock_timestamp()
   WHERE id = p_session AND failure_reason = p_reason AND operation = 'NONE' AND failed_operation_id IS NULL;
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION sessionq.clear_turn_failure(uuid, text) IS
  'Clear the turn failure p_reason that record_turn_failure recorded (a later resume succeeded); a failure of an operation is never touched. True when cleared.';

COMMENT ON COLUMN sessionq.sessions.failure_reason IS '[lifecycle] Why the preparation of failed_operation_id failed (RevisionUnavailable, CheckpointUnavailable, CheckpointMismatch, ActorReplaced, RuntimeUnavailable) or, while the operation is still pending and failed_operation_id is unset, why its last attempt failed (RuntimeError, RuntimeConflict, AttemptTimedOut, InternalError: the job retries it), or, with no operation, why the last turn could not start (RestoreFailed: the Actor''s snapshot could not be restored; see record_turn_failure, cleared by the next resume that succeeds); clients see it as Failure.reason. Cleared by the next admission or completion.';
