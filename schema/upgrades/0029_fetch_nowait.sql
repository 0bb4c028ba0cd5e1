-- 0029_fetch_nowait: the fetch of an execute_operation job takes its Session's row NOWAIT. The fetch
-- holds the job's row; a retried CreateSession holds the Session's row and, joining its creation,
-- defers the job, which waits on the job's row: the fetch waiting for the Session closed a deadlock.
-- An execute_operation job begins its operation in the statement that fetches it (jobs/bridge.py,
-- WorkerJobManager with begin_operations_at_fetch): one round trip instead of two per operation.
-- sessionq.begin_operation claims only a first attempt at a plain creation; it runs in a
-- subtransaction, so that its failure leaves the fetch alone (the job then begins as before).
-- The Session's row is taken NOWAIT: this transaction already holds the job's row, and an
-- admission that holds the Session's row may be deferring that job (a retried CreateSession
-- joining its creation waits on the job's row), so waiting here would close a deadlock. A Session
-- busy elsewhere is begun by the job itself, as any other operation is.
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
      PERFORM 1 FROM sessionq.sessions s WHERE s.id = (v.args->>'session_id')::uuid FOR UPDATE NOWAIT;
      SELECT o.status, o.previous_executor, o.expires_at, o.session, o.revision
        INTO b_status, b_previous, b_expires, b_session, b_revision
        FROM sessionq.begin_operation((v.args->>'session_id')::uuid, p_executor, p_lifetime) o;
    EXCEPTION WHEN OTHERS THEN
      b_status := NULL;  -- rolled back alone: the job's own begin_operation meets the error (or the lock) again
    END;
  END IF;
  RETURN QUERY SELECT v.id, v.status, v.task_name, v.priority, v.lock, v.queueing_lock, v.args, v.scheduled_at,
                      v.queue_name, v.attempts, v.worker_id, b_status, b_previous, b_expires, b_session,
                      b_revision;
END $$;
COMMENT ON FUNCTION sessionq.fetch_job_begun(varchar[], bigint, uuid, double precision) IS
  'sessionq.fetch_job, and for an execute_operation job sessionq.begin_operation of its Session by executor p_executor (claim lifetime p_lifetime seconds) in the same transaction: its columns begun_* (NULL when the job is of another task, the Session''s row is locked by another transaction (taken NOWAIT: an admission holding it may be deferring this job), or the begin failed and was rolled back alone). A worker passes p_executor NULL to fetch only.';
