-- 0022_creation_path: an execute_operation job begins its operation in the statement that fetches it.
CREATE OR REPLACE FUNCTION sessionq.fetch_job_begun(
  p_queues varchar[], p_worker_id bigint, p_executor uuid, p_lifetime double precision
) RETURNS TABLE (id bigint, status procrastinate_job_status, task_name varchar, priority integer, lock text,
                 queueing_lock text, args jsonb, scheduled_at timestamptz, queue_name varchar, attempts integer,
                 worker_id bigint, begun_status text, begun_previous_executor uuid, begun_expires_at timestamptz,
                 begun_session jsonb, begun_revision jsonb)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v procrastinate_jobs;
  b_status text;
  b_previous uuid;
  b_expires timestamptz;
  b_session jsonb;
  b_revision jsonb;
BEGIN
  v := sessionq.fetch_job(p_queues, p_worker_id);
  IF v.id IS NOT NULL AND v.task_name = 'execute_operation' AND p_executor IS NOT NULL THEN
    BEGIN
      SELECT o.status, o.previous_executor, o.expires_at, o.session, o.revision
        INTO b_status, b_previous, b_expires, b_session, b_revision
        FROM sessionq.begin_operation((v.args->>'session_id')::uuid, p_executor, p_lifetime) o;
    EXCEPTION WHEN OTHERS THEN
      b_status := NULL;  -- rolled back alone: the job's own begin_operation meets the error and reports it
    END;
  END IF;
  RETURN QUERY SELECT v.id, v.status, v.task_name, v.priority, v.lock, v.queueing_lock, v.args, v.scheduled_at,
                      v.queue_name, v.attempts, v.worker_id, b_status, b_previous, b_expires, b_session,
                      b_revision;
END $$;
COMMENT ON FUNCTION sessionq.fetch_job_begun(varchar[], bigint, uuid, double precision) IS
  'sessionq.fetch_job, and for an execute_operation job sessionq.begin_operation of its Session by executor p_executor (claim lifetime p_lifetime seconds) in the same transaction: its columns begun_* (NULL when the job is of another task, or the begin failed and was rolled back alone). A worker passes p_executor NULL to fetch only.';
