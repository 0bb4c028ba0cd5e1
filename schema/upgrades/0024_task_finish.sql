-- 0024_task_finish: a turn's final update and its settlement in one transaction (task store UpdateTask with
-- the settle header).
CREATE OR REPLACE FUNCTION sessionq.task_finish(
  p_session uuid, p_task_id text, p_task jsonb, p_expected bigint, p_event jsonb, p_dispatch uuid, p_hash text
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_version bigint;
BEGIN
  IF NOT sessionq.is_boundary_state(coalesce(p_task #>> '{status,state}', 'TASK_STATE_WORKING')) THEN
    PERFORM sessionq.fail('SQ400', 'only an update to a final or waiting state can settle the task');
  END IF;
  v_version := sessionq.task_update(p_session, p_task_id, p_task, p_expected, p_event, p_dispatch, p_hash);
  PERFORM sessionq.task_settle(p_session, p_task_id, v_version);
  RETURN v_version;
END $$;
COMMENT ON FUNCTION sessionq.task_finish(uuid, text, jsonb, bigint, jsonb, uuid, text) IS
  'Task store UpdateTask sent with the settle header: an update to a final or waiting state (anything else is INVALID_ARGUMENT) that also settles the task at the version it makes, in one transaction: task_update then task_settle, with their rules and answers. An identical retry returns the committed version and settles nothing twice.';
