-- The one place where sessionq's SQL defers procrastinate jobs.
--
-- Lifecycle procedures admit an intent and queue the job that executes it in the same
-- transaction: the job exists if and only if the admission committed. procrastinate's versioned
-- SQL functions change between releases, so nothing else calls them; this wrapper inserts into
-- procrastinate_jobs directly (its insert trigger sends the NOTIFY that wakes workers at commit).

CREATE OR REPLACE FUNCTION sessionq.defer_job(
  p_queue text,
  p_task text,
  p_args jsonb,
  p_queueing_lock text,
  p_scheduled_at timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_id bigint;
BEGIN
  INSERT INTO procrastinate_jobs (queue_name, task_name, priority, lock, queueing_lock, args, scheduled_at)
  VALUES (p_queue, p_task, 0, NULL, p_queueing_lock, p_args, p_scheduled_at)
  ON CONFLICT (queueing_lock) WHERE status = 'todo' DO NOTHING
  RETURNING id INTO v_id;
  RETURN v_id;  -- NULL: a job with this queueing lock is already waiting, and it will do the work
END $$;
COMMENT ON FUNCTION sessionq.defer_job(text, text, jsonb, text, timestamptz) IS
  'Queue a procrastinate job unless one with the same queueing lock is already waiting (todo). Returns the job id, or NULL when the waiting job covers it. The only caller of procrastinate from SQL.';
