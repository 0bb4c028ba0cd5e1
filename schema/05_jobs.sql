-- Where sessionq's SQL defers, moves forward and ends procrastinate jobs.
--
-- Lifecycle procedures admit an intent and queue the job that executes it in the same
-- transaction: the job exists if and only if the admission committed. A completion ends the job
-- that executed it in the same transaction too (finish_operation_job). procrastinate's versioned
-- SQL functions change between releases, so nothing here calls them; these wrappers work on
-- procrastinate_jobs directly (its insert trigger sends the NOTIFY that wakes workers at commit;
-- wake_workers sends it for a job made due by an UPDATE).

-- wake_workers: procrastinate notifies inserts only; a job made due by an UPDATE is announced here.
CREATE OR REPLACE FUNCTION sessionq.wake_workers(p_queue text, p_job bigint) RETURNS void
LANGUAGE sql AS $$
  SELECT pg_notify('procrastinate_queue_v1#' || p_queue, json_build_object('type', 'job_inserted', 'job_id', p_job)::text);
  SELECT pg_notify('procrastinate_any_queue_v1', json_build_object('type', 'job_inserted', 'job_id', p_job)::text);
$$;
COMMENT ON FUNCTION sessionq.wake_workers(text, bigint) IS
  'Send procrastinate''s job_inserted notification for a job made due by an UPDATE (put back to todo, or moved forward), so idle workers fetch it now instead of at their next poll. Delivered at commit.';

-- run_waiting_job: the waiting job of a queueing lock runs no later than p_at (NULL: now).
--
-- A job that finds another attempt's live claim waits for that claim to lapse (a crashed
-- executor's claim expires): it queues itself, under its queueing lock, for the claim's expiry.
-- While it waits it holds the lock, so any later defer of the same work (a newer generation, a
-- client's retry) inserts nothing. Everything that makes the work runnable sooner (a defer, a
-- completion, a released claim) therefore moves the waiting job forward instead.
CREATE OR REPLACE FUNCTION sessionq.run_waiting_job(p_queueing_lock text, p_at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_id bigint;
  v_queue text;
BEGIN
  UPDATE procrastinate_jobs j SET scheduled_at = p_at
   WHERE j.queueing_lock = p_queueing_lock AND j.status = 'todo'
     AND j.scheduled_at IS NOT NULL AND (p_at IS NULL OR j.scheduled_at > p_at)
  RETURNING j.id, j.queue_name INTO v_id, v_queue;
  IF v_id IS NOT NULL AND (p_at IS NULL OR p_at <= clock_timestamp()) THEN
    PERFORM sessionq.wake_workers(v_queue, v_id);
  END IF;
  RETURN v_id;
END $$;
COMMENT ON FUNCTION sessionq.run_waiting_job(text, timestamptz) IS
  'Move the waiting (todo) job of a queueing lock forward to p_at (NULL: due now, and idle workers are woken); a job due sooner is left alone. Returns the job moved, or NULL. Called by defer_job when a job already waits, and by completions and released claims, so that a job waiting for a claim to lapse never outlives the claim''s reason.';

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
  IF v_id IS NULL THEN
    -- a job with this queueing lock is already waiting and will do the work: no later than asked
    PERFORM sessionq.run_waiting_job(p_queueing_lock, p_scheduled_at);
  END IF;
  RETURN v_id;  -- NULL: the waiting job covers it
END $$;
COMMENT ON FUNCTION sessionq.defer_job(text, text, jsonb, text, timestamptz) IS
  'Queue a procrastinate job unless one with the same queueing lock is already waiting (todo); a waiting job scheduled later than p_scheduled_at (NULL: now) is moved forward to it. Returns the new job id, or NULL when the waiting job covers it.';

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
