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
--   queueing    sessionq.defer_job, sessionq.run_waiting_job, sessionq.run_job_now, sessionq.wake_workers,
--               sessionq.move_waiting_jobs
--   fetching    sessionq.fetch_job (procrastinate's fetch, minus the queues in sessionq.paused_queues),
--               sessionq.fetch_job_begun (the same, an execute_operation job's begin_operation with it)
--   ending      sessionq.finish_operation_job, sessionq.end_job_attempt, sessionq.retry_job_attempt,
--               sessionq.finish_job, sessionq.retry_job_now, sessionq.cancel_or_abort_job,
--               sessionq.prune_dead_workers
--   history     sessionq.job_attempts (every attempt, its outcome and error), sessionq.record_job_attempt,
--               sessionq.purge_job_history (succeeded jobs older than jobs.retention)
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

-- job_waiting: whether a job waits (todo) under a queueing lock, read without taking any lock (a
-- defer that conflicts with another transaction's uncommitted job waits for that transaction).
-- PL/pgSQL, which keeps the query's plan (an SQL function that reads a table is planned again on
-- every call before PostgreSQL 18): every lifecycle event with a webhook subscription asks it.
CREATE OR REPLACE FUNCTION sessionq.job_waiting(p_queueing_lock text) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = sessionq, public
AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM procrastinate_jobs j WHERE j.queueing_lock = p_queueing_lock AND j.status = 'todo');
END $$;
COMMENT ON FUNCTION sessionq.job_waiting(text) IS
  'Whether a committed job waits (todo) under queueing lock p_queueing_lock: callers that defer the same work from many concurrent transactions skip the defer then, instead of queueing behind each other''s uncommitted insert.';

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
-- procrastinate would end a succeeded job in its own transaction after the task returned
-- (procrastinate_finish_job_v1); doing it here saves that round trip and commit, and a worker that
-- dies right after the completion leaves no stalled job behind. The worker is told (jobs/bridge.py,
-- WorkerJobManager) and skips its own finish call. With p_keep (jobs.retention above zero) the row
-- is kept as succeeded, with its attempt recorded, until sessionq.purge_job_history removes it;
-- without, it is deleted with its attempts, as procrastinate does under delete_jobs = 'successful'.
-- If the reaper requeued the job meanwhile (its worker was slow to heartbeat), a row back in todo
-- is left alone: it runs again, finds the operation complete and ends. One that another worker
-- already runs ends, as procrastinate's own finish would end it.
CREATE OR REPLACE FUNCTION sessionq.finish_operation_job(p_job bigint, p_session uuid, p_keep boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
BEGIN
  PERFORM 1 FROM procrastinate_jobs
   WHERE id = p_job AND status = 'doing' AND task_name = 'execute_operation'
     AND args ->> 'session_id' = p_session::text
   FOR UPDATE;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  IF p_keep THEN
    PERFORM sessionq.record_job_attempt(p_job, 'succeeded');
    PERFORM procrastinate_finish_job_v1(p_job, 'succeeded', false);
  ELSE
    DELETE FROM procrastinate_jobs WHERE id = p_job;
    DELETE FROM sessionq.job_attempts a WHERE a.job_id = p_job;
  END IF;
  RETURN true;
END $$;
COMMENT ON FUNCTION sessionq.finish_operation_job(bigint, uuid, boolean) IS
  'End a running (doing) execute_operation job of the Session as succeeded: with p_keep (jobs.retention above zero) its row is kept as succeeded and the attempt recorded in job_attempts; without, the row and its attempts are deleted (procrastinate''s delete_jobs = successful). Called by complete_operation in the completing transaction. Returns false (and changes nothing) when the job is not that Session''s running job.';

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

-- -- job attempts: why did it fail? ------------------------------------------------------------

-- Every attempt of a job that ends on a worker is recorded here in the transaction that ends it
-- (end_job_attempt, retry_job_attempt, finish_operation_job), and every stalled attempt by the
-- reaper or an operator's requeue (record_job_attempt): when it started (procrastinate's started
-- event), when it ended, on which worker, and for a failure the error's type, message and the tail
-- of its traceback, as River keeps per-attempt errors. Rows go with their job: a succeeded job
-- deleted at once (jobs.retention 0s) or purged later takes its attempts along.
CREATE TABLE IF NOT EXISTS sessionq.job_attempts (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id        bigint NOT NULL,
  attempt       integer NOT NULL,
  task_name     text NOT NULL,
  queue_name    text NOT NULL,
  worker_id     bigint,
  worker_name   text,
  started_at    timestamptz,
  ended_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  outcome       text NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'retried', 'aborted', 'stalled')),
  error_type    text,
  error_message text,
  traceback     text
);
CREATE INDEX IF NOT EXISTS job_attempts_job_idx ON sessionq.job_attempts (job_id, attempt);
CREATE INDEX IF NOT EXISTS job_attempts_succeeded_idx ON sessionq.job_attempts (ended_at) WHERE outcome = 'succeeded';
CREATE INDEX IF NOT EXISTS job_attempts_failures_idx ON sessionq.job_attempts (ended_at) WHERE outcome <> 'succeeded';
COMMENT ON TABLE sessionq.job_attempts IS
  'One row per ended attempt of a job: when it started and ended, on which worker, how it ended, and for a failure the error type, message and the end of its traceback. Written in the transaction that ends the attempt; deleted with the job (purge_job_history). `sessionq jobs show ID` prints them; sessionq.recent_failures lists the latest failures. No foreign key: procrastinate owns the job rows.';
COMMENT ON COLUMN sessionq.job_attempts.attempt IS 'The attempt''s number, from 1 (procrastinate''s attempts counter before the attempt ended, plus one).';
COMMENT ON COLUMN sessionq.job_attempts.worker_name IS 'The sessionq worker (sessionq.worker_info.name) that ran it, kept after the worker is gone; NULL for a worker sessionq did not start.';
COMMENT ON COLUMN sessionq.job_attempts.started_at IS 'When the attempt started on its worker (procrastinate''s started event).';
COMMENT ON COLUMN sessionq.job_attempts.outcome IS 'succeeded; failed (no attempt left: the job is failed); retried (it failed and another attempt is scheduled); aborted (cancelled by an operator or a drain; a drain retries it); stalled (its worker stopped heartbeating; the reaper or an operator requeued or failed it).';
COMMENT ON COLUMN sessionq.job_attempts.error_type IS 'The exception''s class (module.Name), or WorkerLost for a stalled attempt; NULL when it succeeded.';
COMMENT ON COLUMN sessionq.job_attempts.error_message IS 'The exception''s message, at most 2000 characters.';
COMMENT ON COLUMN sessionq.job_attempts.traceback IS 'The last 8000 characters of the formatted traceback (its innermost frames).';

CREATE OR REPLACE FUNCTION sessionq.record_job_attempt(
  p_job bigint, p_outcome text, p_error_type text DEFAULT NULL, p_message text DEFAULT NULL,
  p_traceback text DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  j procrastinate_jobs;
BEGIN
  SELECT * INTO j FROM procrastinate_jobs WHERE id = p_job;
  IF NOT FOUND OR j.status <> 'doing' THEN
    RETURN false;  -- only a running attempt ends
  END IF;
  INSERT INTO sessionq.job_attempts (job_id, attempt, task_name, queue_name, worker_id, started_at, outcome,
                                     error_type, error_message, traceback)
  VALUES (j.id, j.attempts + 1, j.task_name, j.queue_name, j.worker_id,
          (SELECT max(e.at) FROM procrastinate_events e WHERE e.job_id = j.id AND e.type = 'started'),
          p_outcome, left(p_error_type, 200), left(p_message, 2000), right(p_traceback, 8000));
  RETURN true;
END $$;
COMMENT ON FUNCTION sessionq.record_job_attempt(bigint, text, text, text, text) IS
  'Record how the running attempt of job p_job ended (outcome, and for a failure the error type, message and traceback, cut to their bounds), with its start time and worker, before the attempt is ended. Returns false and records nothing when the job is not running (doing).';

CREATE OR REPLACE FUNCTION sessionq.end_job_attempt(
  p_job bigint, p_status text, p_delete boolean, p_error_type text DEFAULT NULL, p_message text DEFAULT NULL,
  p_traceback text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
BEGIN
  IF p_delete THEN
    DELETE FROM sessionq.job_attempts a WHERE a.job_id = p_job;  -- the job goes: so does its history
  ELSE
    PERFORM sessionq.record_job_attempt(p_job, p_status, p_error_type, p_message, p_traceback);
  END IF;
  PERFORM procrastinate_finish_job_v1(p_job, p_status::procrastinate_job_status, p_delete);
END $$;
COMMENT ON FUNCTION sessionq.end_job_attempt(bigint, text, boolean, text, text, text) IS
  'A worker ends the running attempt of a job for good (procrastinate''s finish: succeeded, failed or aborted) and records it in job_attempts in the same transaction; p_delete deletes the job and its attempts instead (delete_jobs = successful, jobs.retention 0s). Raises when the job is not todo or doing.';

CREATE OR REPLACE FUNCTION sessionq.retry_job_attempt(
  p_job bigint, p_retry_at timestamptz, p_priority integer, p_queue text, p_lock text, p_outcome text,
  p_error_type text DEFAULT NULL, p_message text DEFAULT NULL, p_traceback text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
BEGIN
  PERFORM sessionq.record_job_attempt(p_job, p_outcome, p_error_type, p_message, p_traceback);
  PERFORM procrastinate_retry_job_v2(p_job, p_retry_at, p_priority, p_queue, p_lock);
END $$;
COMMENT ON FUNCTION sessionq.retry_job_attempt(bigint, timestamptz, integer, text, text, text, text, text, text) IS
  'A worker ends a failed (outcome retried) or aborted attempt that is to run again at p_retry_at (procrastinate''s retry, with its optional new priority, queue and lock) and records it in job_attempts in the same transaction.';

CREATE OR REPLACE FUNCTION sessionq.purge_job_history(p_retention double precision, p_limit integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_ids bigint[];
  n integer;
BEGIN
  IF p_retention IS NULL OR p_retention < 0 OR p_limit IS NULL OR p_limit < 1 THEN
    RAISE EXCEPTION 'purge_job_history: a retention of zero or more seconds and a positive limit, not % and %',
      p_retention, p_limit;
  END IF;
  SELECT array_agg(a.job_id) INTO v_ids FROM (
    SELECT a.job_id FROM sessionq.job_attempts a
     WHERE a.outcome = 'succeeded' AND a.ended_at < clock_timestamp() - make_interval(secs => p_retention)
     ORDER BY a.ended_at
     LIMIT p_limit) a;
  IF v_ids IS NULL THEN
    RETURN 0;
  END IF;
  DELETE FROM procrastinate_jobs j WHERE j.id = ANY (v_ids) AND j.status = 'succeeded';
  GET DIAGNOSTICS n = ROW_COUNT;
  DELETE FROM sessionq.job_attempts a WHERE a.job_id = ANY (v_ids);
  RETURN n;
END $$;
COMMENT ON FUNCTION sessionq.purge_job_history(double precision, integer) IS
  'Delete up to p_limit succeeded jobs whose success was recorded more than p_retention seconds ago (oldest first), with their events and attempts. Returns how many jobs were deleted; the periodic purge_job_history task calls it in bounded batches.';

-- -- fetching, and pausing queues -----------------------------------------------------------------

-- procrastinate 3.10 cannot pause a queue. Its workers fetch through sessionq.fetch_job
-- (jobs/bridge.py, WorkerJobManager.fetch_job), which leaves out the queues in paused_queues: a pause
-- is durable and applies to every worker at its next fetch. Jobs keep being queued meanwhile.
CREATE TABLE IF NOT EXISTS sessionq.paused_queues (
  queue_name text PRIMARY KEY CHECK (length(queue_name) BETWEEN 1 AND 40),
  paused_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  paused_by  text NOT NULL,
  reason     text NOT NULL DEFAULT ''
);
COMMENT ON TABLE sessionq.paused_queues IS
  'Queues no worker fetches from (`sessionq queues pause NAME`; sessionq.pause_queue and resume_queue). Jobs are still queued into them and run once the queue is resumed; running jobs finish.';

CREATE OR REPLACE FUNCTION sessionq.fetch_job(p_queues varchar[], p_worker_id bigint)
RETURNS procrastinate_jobs
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_queues varchar[];
  v_row procrastinate_jobs;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sessionq.paused_queues) THEN
    RETURN procrastinate_fetch_job_v2(p_queues, p_worker_id);
  END IF;
  IF p_queues IS NULL THEN  -- every queue with a waiting job, but the paused ones
    SELECT array_agg(q.queue_name) INTO v_queues FROM (
      SELECT DISTINCT j.queue_name FROM procrastinate_jobs j WHERE j.status = 'todo') q
     WHERE NOT EXISTS (SELECT 1 FROM sessionq.paused_queues p WHERE p.queue_name = q.queue_name);
  ELSE
    SELECT array_agg(q) INTO v_queues FROM unnest(p_queues) q
     WHERE NOT EXISTS (SELECT 1 FROM sessionq.paused_queues p WHERE p.queue_name = q);
  END IF;
  IF v_queues IS NULL THEN
    RETURN v_row;  -- all NULL: nothing to do, as procrastinate's fetch says it
  END IF;
  RETURN procrastinate_fetch_job_v2(v_queues, p_worker_id);
END $$;
COMMENT ON FUNCTION sessionq.fetch_job(varchar[], bigint) IS
  'procrastinate''s fetch of the next job for worker p_worker_id from p_queues (NULL: every queue), leaving out the paused queues (sessionq.paused_queues). Returns the job row, marked doing, or a row of NULLs when there is none.';

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

CREATE OR REPLACE FUNCTION sessionq.run_job_now(p_job bigint) RETURNS boolean
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_queue text;
BEGIN
  UPDATE procrastinate_jobs j SET scheduled_at = NULL
   WHERE j.id = p_job AND j.status = 'todo' AND j.scheduled_at > now()
  RETURNING j.queue_name INTO v_queue;
  IF v_queue IS NULL THEN
    RETURN false;
  END IF;
  PERFORM sessionq.wake_workers(v_queue, p_job);
  RETURN true;
END $$;
COMMENT ON FUNCTION sessionq.run_job_now(bigint) IS
  'Make a waiting (todo) job scheduled for later - a retry waiting out its backoff - due now, and wake the workers. Returns false (and changes nothing) when the job is not waiting for a later time.';

CREATE OR REPLACE FUNCTION sessionq.move_waiting_jobs() RETURNS integer
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_moved integer;
BEGIN
  UPDATE procrastinate_jobs j SET queue_name = k.queue_name
    FROM sessionq.job_kinds k
   WHERE j.status = 'todo' AND j.task_name = k.task_name AND j.queue_name <> k.queue_name;
  GET DIAGNOSTICS v_moved = ROW_COUNT;
  RETURN v_moved;
END $$;
COMMENT ON FUNCTION sessionq.move_waiting_jobs() IS
  'Move every waiting (todo) job of one of sessionq''s tasks into the queue sessionq.job_kinds names for its task, when it waits in another (a task moved to another queue: its migration calls this once). Running jobs are left alone. Returns how many moved.';

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
