-- Upgrade 0008_push_queue: push notification deliveries in a queue of their own.
--
-- Applied by its revision only, to a database whose schema was installed before it; a database
-- installed from schema/ at or after it has all of this already. Frozen: a later change to these
-- statements is a later upgrade, and the canonical text lives in schema/. Every statement is
-- idempotent.
--
-- deliver_push waits on receivers outside sessionq's control, so it runs in the queue `push`, of
-- which a worker runs at most a2a.push.concurrency jobs at a time (jobs/app.py). Its jobs queued
-- before, in `a2a`, move there too (the bridge's move_waiting_jobs).

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

UPDATE sessionq.job_kinds SET queue_name = 'push' WHERE task_name = 'deliver_push' AND queue_name <> 'push';
SELECT sessionq.move_waiting_jobs();
