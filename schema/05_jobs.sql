-- The one place where sessionq's SQL touches procrastinate's jobs.
--
-- Lifecycle procedures admit an intent and queue the job that executes it in the same
-- transaction: the job exists if and only if the admission committed. A completion ends the job
-- that executed it in the same transaction too (finish_operation_job). procrastinate's versioned
-- SQL functions change between releases, so nothing calls them; these wrappers work on
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
  'Queue a procrastinate job unless one with the same queueing lock is already waiting (todo). Returns the job id, or NULL when the waiting job covers it. With finish_operation_job, the only SQL that touches procrastinate''s tables.';

-- finish_operation_job: the execute_operation job of a Session ends with the completion it made.
-- The worker runs jobs with delete_jobs = 'successful', so procrastinate would delete the row of
-- a succeeded job in its own transaction after the task returned (procrastinate_finish_job_v1);
-- doing it here saves that round trip and commit, and a worker that dies right after the
-- completion leaves no stalled job behind. The worker is told (jobs/manager.py, WorkerJobManager)
-- and skips its own finish call. If the reaper requeued the job meanwhile (its worker was slow to
-- heartbeat), a row back in todo is left alone: it runs again, finds the operation complete and
-- ends. One that another worker already runs goes, as procrastinate's own finish would delete it.
CREATE OR REPLACE FUNCTION sessionq.finish_operation_job(p_job bigint, p_session uuid)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
BEGIN
  DELETE FROM procrastinate_jobs
   WHERE id = p_job AND status = 'doing' AND task_name = 'execute_operation'
     AND args ->> 'session_id' = p_session::text;
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION sessionq.finish_operation_job(bigint, uuid) IS
  'End a running (doing) execute_operation job of the Session as a successful procrastinate job is ended with delete_jobs = successful: its row is deleted. Called by complete_operation in the completing transaction. Returns false (and changes nothing) when the job is not that Session''s running job.';
