-- Push notification deliveries in a queue of their own.
--
-- The deliver_push job waits on receivers outside sessionq's control, so it runs in the queue
-- `push`, of which a worker runs at most a2a.push.concurrency jobs at a time (jobs/app.py): slow
-- receivers hold those slots only, never the ones lifecycle operations, turns and periodic work
-- need. Jobs of it queued before, in `a2a`, move there too.
--
-- Applied by migration 0002 (every file of schema/) on a clean database, where it changes
-- nothing, and again by 0007 on a database made before it: every statement here is idempotent.

UPDATE sessionq.job_kinds SET queue_name = 'push' WHERE task_name = 'deliver_push' AND queue_name <> 'push';
SELECT sessionq.move_waiting_jobs();
