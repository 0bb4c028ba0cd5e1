-- Lifecycle rules that span domains, defined once, after every domain they compose.
--
-- Sessions (20_sessions.sql) call these two from admit_operation and complete_operation; each is
-- made of the named rules of the domains that have a say:
--   check_lifecycle_blockers: turns and quiescence (30_tasks.sql), checkpoints (40_checkpoints.sql);
--   on_operation_completed:   quiescence after a Resume (30_tasks.sql), never for a Sandbox (25_sandboxes.sql);
--                             queued turns ended after a Delete (30_tasks.sql).
-- A new domain with a rule adds a line here (and its function in its own file).

CREATE OR REPLACE FUNCTION sessionq.check_lifecycle_blockers(p_session sessionq.sessions, p_kind text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM sessionq.check_turn_lifecycle_blockers(p_session, p_kind);
  PERFORM sessionq.check_checkpoint_blockers(p_session);
END $$;
COMMENT ON FUNCTION sessionq.check_lifecycle_blockers(sessionq.sessions, text) IS
  'Raise ABORTED when running turns, unsettled cleanup, claimed quiescence or a checkpoint being created block an explicit lifecycle change (admit_operation, on the locked row).';

CREATE OR REPLACE FUNCTION sessionq.on_operation_completed(p_session sessionq.sessions, p_kind text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF p_session.kind = 'session' THEN  -- a Sandbox (25_sandboxes.sql) is never quiesced
    PERFORM sessionq.quiesce_after_resume(p_session, p_kind);
  END IF;
  IF p_kind = 'DELETE' THEN  -- queued turns (30_tasks.sql) end as turns that never started
    PERFORM sessionq.drop_queued_turns(p_session.id, 'the session was deleted');
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.on_operation_completed(sessionq.sessions, text) IS
  'Run inside complete_operation after the row changed (p_kind: the operation that completed): a Session''s Resume back to READY is quiesced again (a Sandbox''s is not: it has no turns); a Delete ends the queued turns left (drop_queued_turns).';
