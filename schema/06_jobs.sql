-- sessionq's jobs: every task that SQL defers, with its queue and its queueing lock, in one place.
--
-- Procedures queue work with sessionq.defer(task, subject, args): the queue and the queueing lock
-- (<lock prefix>:<subject>, at most one waiting job per subject) come from sessionq.job_kinds, and
-- sessionq.job_lock names the lock for the procedures that move a waiting job forward. The worker
-- registers a task of the same name and queue for every row (jobs/app.py; a test checks both
-- agree). procrastinate's side of deferring is the bridge's (05_procrastinate.sql, defer_job).

CREATE TABLE sessionq.job_kinds (
  task_name   text PRIMARY KEY,
  queue_name  text NOT NULL,
  lock_prefix text NOT NULL,
  description text NOT NULL
);
COMMENT ON TABLE sessionq.job_kinds IS
  'Every task sessionq''s SQL defers: its procrastinate queue and the prefix of its queueing lock (<prefix>:<subject>: at most one job per subject waits at a time). Read by sessionq.defer and sessionq.job_lock; the worker registers the same tasks (jobs/app.py).';
COMMENT ON COLUMN sessionq.job_kinds.lock_prefix IS 'Tasks that share a prefix share the lock: one waiting job does the work of either (create_checkpoint and delete_checkpoint of one checkpoint).';
INSERT INTO sessionq.job_kinds (task_name, queue_name, lock_prefix, description) VALUES
  ('execute_operation', 'operations', 'operation',  'execute the current lifecycle operation of a Session (subject: the Session id)'),
  ('dispatch_turn',     'dispatch',   'dispatch',   'deliver the admitted turn of a Session to its Actor (subject: the Session id)'),
  ('prepare_revision',  'agents',     'revision',   'prepare an Agent revision in the runtime (subject: the revision id)'),
  ('create_checkpoint', 'operations', 'checkpoint', 'tag the snapshot of a CREATING checkpoint (subject: the checkpoint id)'),
  ('delete_checkpoint', 'operations', 'checkpoint', 'remove the tag of a DELETING checkpoint (subject: the checkpoint id)'),
  ('refresh_snapshot',  'operations', 'snapshot',   'record a pending snapshot once it is durable (subject: the Session id)'),
  ('retry_quiescence',  'operations', 'quiescence', 'retry the claimed idle work of a Session whose worker died (subject: the Session id)'),
  ('cancel_task',       'a2a',        'cancel',     'tell the Actor to stop a canceled A2A task and end it CANCELED (subject: the task id)'),
  ('deliver_push',      'push',       'push',       'deliver the pending push notifications of an A2A task, in order (subject: the task id)'),
  ('deliver_webhooks',  'push',       'webhook',    'deliver the pending webhook deliveries of a subscription, in order per Session (subject: the subscription id)'),
  ('run_bulk_action',   'operations', 'bulk',       'admit the operations of a bulk action page by page (subject: the bulk action id)'),
  ('release_turn_snapshot', 'operations', 'turnpin', 'delete the tag of a released turn pin, then its row (subject: the pin id)');

-- job_lock: the queueing lock of a task's job for one subject. PL/pgSQL, which keeps the query's
-- plan (an SQL function that reads a table is planned again on every call before PostgreSQL 18).
CREATE OR REPLACE FUNCTION sessionq.job_lock(p_task text, p_subject text) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
  RETURN (SELECT k.lock_prefix || ':' || p_subject FROM sessionq.job_kinds k WHERE k.task_name = p_task);
END $$;
COMMENT ON FUNCTION sessionq.job_lock(text, text) IS
  'The queueing lock <lock prefix>:<subject> of task p_task (sessionq.job_kinds); NULL for an unknown task.';

-- defer: queue a job of one of sessionq's tasks.
CREATE OR REPLACE FUNCTION sessionq.defer(p_task text, p_subject text, p_args jsonb, p_at timestamptz DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  k sessionq.job_kinds;
  v_traceparent text := current_setting('sessionq.traceparent', true);
BEGIN
  SELECT * INTO k FROM sessionq.job_kinds WHERE task_name = p_task;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'sessionq.defer: unknown task %', p_task;
  END IF;
  IF v_traceparent <> '' THEN  -- a traced statement: the job's spans join its trace (jobs/tracing.py)
    p_args := p_args || jsonb_build_object('traceparent', v_traceparent);
  END IF;
  RETURN sessionq.defer_job(k.queue_name, p_task, p_args, k.lock_prefix || ':' || p_subject, p_at);
END $$;
COMMENT ON FUNCTION sessionq.defer(text, text, jsonb, timestamptz) IS
  'Queue a job of task p_task (sessionq.job_kinds: its queue, and its queueing lock for subject p_subject) with keyword arguments p_args (and the W3C traceparent of a traced statement, the transaction-local setting sessionq.traceparent), due at p_at (NULL: now). A job already waiting under that lock covers it and runs no later than p_at. Returns the new job id, or NULL.';
