-- The SQL bridge to procrastinate: the one schema file that names procrastinate's objects.
--
-- procrastinate (pinned in pyproject.toml; its schema is applied by the Alembic revision
-- 0001_procrastinate) owns the job queue: the tables procrastinate_jobs, procrastinate_events and
-- procrastinate_workers, their enum types, versioned functions (procrastinate_*_v1/_v2), triggers
-- and NOTIFY channels. Those change between releases, and PL/pgSQL bodies are not dependency
-- tracked, so nothing else in schema/ names them: every other file uses the objects defined here.
-- What this file assumes of procrastinate's schema (columns, statuses, event types, function
-- signatures, the queueing-lock index, the channel names and payload) is pinned by tests/bridge/,
-- and docs/operating.md says how to upgrade procrastinate.
--
-- The bridge, by what it is for:
--   reading     sessionq.job_rows, sessionq.job_events, sessionq.job_event_times(job),
--               sessionq.worker_heartbeats (registered workers)
--   queueing    sessionq.defer_job, sessionq.run_waiting_job, sessionq.wake_workers
--   ending      sessionq.finish_operation_job, sessionq.finish_job, sessionq.retry_job_now,
--               sessionq.cancel_or_abort_job, sessionq.prune_dead_workers
--   guarding    the trigger sessionq_cover_requeued_job on procrastinate_jobs
--               (sessionq.cover_requeued_job: queueing-lock collisions of retried jobs)
--
-- Lifecycle procedures admit an intent and queue the job that executes it in the same
-- transaction: the job exists if and only if the admission committed. A completion ends the job
-- that executed it in the same transaction too (finish_operation_job). sessionq's SQL changes
-- rows of procrastinate_jobs only here: inserts (procrastinate's insert trigger sends the NOTIFY
-- that wakes workers at commit; wake_workers sends it for a job made due by an UPDATE), updates
-- of scheduled_at and status, the delete of a finished operation job, and procrastinate's own
-- versioned functions, each called from exactly one wrapper.
--
-- Job statuses (procrastinate_job_status, the `status` column of sessionq.job_rows) are the bridge's
-- vocabulary: todo, doing, succeeded, failed, cancelled, aborted.

-- -- reading -------------------------------------------------------------------------------------

CREATE OR REPLACE VIEW sessionq.job_rows AS
SELECT j.id, j.queue_name, j.task_name, j.priority, j.lock, j.queueing_lock, j.args, j.status,
       j.scheduled_at, j.attempts, j.abort_requested, j.worker_id
  FROM procrastinate_jobs j;
COMMENT ON VIEW sessionq.job_rows IS
  'The SQL bridge''s view of procrastinate''s job rows (one per job; succeeded jobs are usually deleted at once). Read by the operator views and procedures; operators read sessionq.job_overview. Rows can be locked (FOR UPDATE) through it; they are changed only by the bridge''s functions.';
COMMENT ON COLUMN sessionq.job_rows.status IS 'todo (waiting, maybe scheduled for later), doing, succeeded, failed, cancelled or aborted (procrastinate''s enum, kept as is so that its partial indexes serve comparisons with these literals).';
COMMENT ON COLUMN sessionq.job_rows.queueing_lock IS 'At most one todo job per value.';
COMMENT ON COLUMN sessionq.job_rows.attempts IS 'Attempts made so far (a retried or requeued attempt counts).';
COMMENT ON COLUMN sessionq.job_rows.worker_id IS 'The worker that runs (or last ran) it: sessionq.worker_heartbeats.worker_id, sessionq.worker_info.worker_id.';

CREATE OR REPLACE VIEW sessionq.job_events AS
SELECT e.id, e.job_id, e.type::text AS type, e.at
  FROM procrastinate_events e;
COMMENT ON VIEW sessionq.job_events IS
  'What happened to each job, as procrastinate records it: deferred, started, deferred_for_retry, failed, succeeded, cancelled, abort_requested, aborted, scheduled, retried. Deleted with the job. `sessionq jobs show` lists them.';

CREATE OR REPLACE FUNCTION sessionq.job_event_times(p_job bigint)
RETURNS TABLE (deferred_at timestamptz, status_since timestamptz, started_at timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT min(e.at) FILTER (WHERE e.type = 'deferred'),
         max(e.at) FILTER (WHERE e.type IN ('deferred', 'started', 'deferred_for_retry', 'failed', 'succeeded',
                                            'cancelled', 'aborted', 'retried')),
         max(e.at) FILTER (WHERE e.type = 'started')
    FROM sessionq.job_events e
   WHERE e.job_id = p_job
$$;
COMMENT ON FUNCTION sessionq.job_event_times(bigint) IS
  'When job p_job was first queued (deferred_at), entered its current status as procrastinate recorded it (status_since: the latest status-changing event) and last started on a worker (started_at). One row; NULLs when it has no events. Inlined into the query that calls it.';

CREATE OR REPLACE VIEW sessionq.worker_heartbeats AS
SELECT w.id AS worker_id, w.last_heartbeat
  FROM procrastinate_workers w;
COMMENT ON VIEW sessionq.worker_heartbeats IS
  'Every worker registered with procrastinate and its last heartbeat (every 10 s while alive). A worker deregisters when it stops; rows of dead workers are pruned (sessionq.prune_dead_workers). sessionq.worker_info adds its name, host and pid.';

-- -- queueing and waking ---------------------------------------------------------------------------

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

-- -- ending and putting back ------------------------------------------------------------------------

-- finish_operation_job: the execute_operation job of a Session ends with the completion it made.
-- The worker runs jobs with delete_jobs = 'successful', so procrastinate would delete the row of
-- a succeeded job in its own transaction after the task returned (procrastinate_finish_job_v1);
-- doing it here saves that round trip and commit, and a worker that dies right after the
-- completion leaves no stalled job behind. The worker is told (jobs/bridge.py, WorkerJobManager)
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

-- finish_job, retry_job_now, cancel_or_abort_job, prune_dead_workers: procrastinate's versioned
-- functions, each called from exactly one wrapper.

CREATE OR REPLACE FUNCTION sessionq.finish_job(p_job bigint, p_status text) RETURNS void
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
BEGIN
  PERFORM procrastinate_finish_job_v1(p_job, p_status::procrastinate_job_status, false);
END $$;
COMMENT ON FUNCTION sessionq.finish_job(bigint, text) IS
  'End a waiting or running job with status p_status (failed or aborted; succeeded for completeness), keeping its row; a running attempt counts. Raises when the job is not todo or doing.';

CREATE OR REPLACE FUNCTION sessionq.retry_job_now(p_job bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_status text;
BEGIN
  SELECT j.status::text INTO v_status FROM procrastinate_jobs j WHERE j.id = p_job FOR UPDATE;
  IF v_status IN ('doing', 'failed') THEN
    PERFORM procrastinate_retry_job_v2(p_job, now(), NULL, NULL, NULL);
  ELSIF v_status IN ('aborted', 'cancelled') THEN
    -- procrastinate refuses to retry those; put it back the same way
    UPDATE procrastinate_jobs j SET status = 'todo', abort_requested = false, scheduled_at = NULL,
                                    attempts = j.attempts + 1
     WHERE j.id = p_job;
  ELSE
    RAISE 'job % is %, it cannot be put back to todo', p_job, coalesce(v_status, 'not found');
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.retry_job_now(bigint) IS
  'Put a running (stalled), failed, aborted or cancelled job back to todo, due now, counting an attempt (procrastinate''s retry; by hand for aborted and cancelled jobs, which it refuses). A running job whose abort was requested is marked failed instead (procrastinate''s rule). The queueing-lock guard (cover_requeued_job) may cancel it instead. Does not wake the workers: see wake_workers.';

CREATE OR REPLACE FUNCTION sessionq.cancel_or_abort_job(p_job bigint, p_abort boolean) RETURNS bigint
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
BEGIN
  RETURN procrastinate_cancel_job_v1(p_job, p_abort, false);
END $$;
COMMENT ON FUNCTION sessionq.cancel_or_abort_job(bigint, boolean) IS
  'Cancel a waiting (todo) job; with p_abort, also ask the worker of a running (doing) job to abort it (abort_requested; its worker is notified). Rows are kept. Returns the job id, or NULL when nothing changed.';

CREATE OR REPLACE FUNCTION sessionq.prune_dead_workers(p_age double precision) RETURNS integer
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  n integer;
BEGIN
  SELECT count(*) INTO n FROM procrastinate_prune_stalled_workers_v1(p_age);
  RETURN n;
END $$;
COMMENT ON FUNCTION sessionq.prune_dead_workers(double precision) IS
  'Remove the registrations of workers without a heartbeat for p_age seconds (their running jobs keep a NULL worker and show as stalled). Returns how many were removed.';

-- -- the queueing-lock guard -------------------------------------------------------------------

-- Putting a job back to todo while another todo job holds the same queueing lock violates
-- procrastinate's unique index; inside a worker's retry that leaves the job in doing forever.
-- Our jobs are idempotent and the waiting job does the same work, so the returning job is
-- cancelled instead, and the waiting job is moved forward to when the retry would have run.
-- What it did is recorded in sessionq.job_actions (schema/80_operator_views.sql).
CREATE OR REPLACE FUNCTION sessionq.cover_requeued_job() RETURNS trigger
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_cover procrastinate_jobs;
BEGIN
  SELECT * INTO v_cover FROM procrastinate_jobs j
   WHERE j.queueing_lock = NEW.queueing_lock AND j.status = 'todo' AND j.id <> NEW.id
   LIMIT 1;
  IF v_cover.id IS NULL THEN
    RETURN NEW;
  END IF;
  IF v_cover.scheduled_at IS NOT NULL AND (NEW.scheduled_at IS NULL OR v_cover.scheduled_at > NEW.scheduled_at) THEN
    UPDATE procrastinate_jobs SET scheduled_at = NEW.scheduled_at WHERE id = v_cover.id AND status = 'todo';
    IF NEW.scheduled_at IS NULL OR NEW.scheduled_at <= now() THEN
      PERFORM sessionq.wake_workers(v_cover.queue_name, v_cover.id);
    END IF;
  END IF;
  NEW.status := 'cancelled';
  NEW.abort_requested := false;
  NEW.scheduled_at := OLD.scheduled_at;
  IF OLD.status <> 'doing' THEN
    NEW.attempts := OLD.attempts;  -- only an attempt that was running counts
  END IF;
  INSERT INTO sessionq.job_actions (job_id, action, detail, covered_by, actor)
  VALUES (NEW.id, 'covered',
          format('cancelled instead of going back to todo: waiting job %s holds queueing lock %s and does the same work',
                 v_cover.id, NEW.queueing_lock),
          v_cover.id, coalesce(nullif(current_setting('sessionq.actor', true), ''), 'worker retry'));
  RETURN NEW;
END $$;
COMMENT ON FUNCTION sessionq.cover_requeued_job() IS
  'Trigger: a job going back to todo (a retry, a requeue) while another todo job holds its queueing lock is cancelled instead (recorded in job_actions as covered); the waiting job runs no later than the retry would have.';

CREATE OR REPLACE TRIGGER sessionq_cover_requeued_job
  BEFORE UPDATE OF status ON procrastinate_jobs
  FOR EACH ROW
  WHEN (NEW.status = 'todo' AND OLD.status <> 'todo' AND NEW.queueing_lock IS NOT NULL)
  EXECUTE FUNCTION sessionq.cover_requeued_job();
COMMENT ON TRIGGER sessionq_cover_requeued_job ON procrastinate_jobs IS
  'sessionq: resolve queueing-lock collisions of retried and requeued jobs (see sessionq.cover_requeued_job).';
