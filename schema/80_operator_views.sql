-- Operator surfaces: views for psql users, worker registration and drains, job requeues and
-- the reaper's procedures.
--
-- Everything here reads sessionq's tables and procrastinate's through the SQL bridge
-- (schema/05_procrastinate.sql: sessionq.job_rows, job_events, job_event_times, worker_heartbeats);
-- it changes jobs only through the procedures below (requeue_job, requeue_jobs, cancel_job,
-- reap_stalled_jobs), which call the bridge's functions (retry_job_now, finish_job,
-- cancel_or_abort_job, prune_dead_workers). `\dv+ sessionq.*` lists the views, `\d+
-- sessionq.<view>` explains their columns.
--
-- Stalled: a job in `doing` whose worker stopped heartbeating for longer than the stall timeout
-- (or whose worker row is gone). The timeout is an argument of the procedures; the views use the
-- session setting sessionq.stall_timeout (e.g. `SET sessionq.stall_timeout = '60s'`), default 30 s
-- (procrastinate's heartbeat runs every 10 s).

-- -- helpers -----------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION sessionq.stall_timeout(p_seconds double precision DEFAULT NULL) RETURNS interval
LANGUAGE sql STABLE AS $$
  SELECT coalesce(make_interval(secs => p_seconds),
                  nullif(current_setting('sessionq.stall_timeout', true), '')::interval,
                  interval '30 seconds')
$$;
COMMENT ON FUNCTION sessionq.stall_timeout(double precision) IS
  'The stall timeout as an interval: p_seconds when given, else the session setting sessionq.stall_timeout, else 30 seconds. A worker whose heartbeat is older is considered dead.';

CREATE OR REPLACE FUNCTION sessionq.uuid_v7_time(p_id uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p_id IS NOT NULL THEN
    to_timestamp(('x' || replace(left(p_id::text, 13), '-', ''))::bit(48)::bigint / 1000.0) END
$$;
COMMENT ON FUNCTION sessionq.uuid_v7_time(uuid) IS
  'The creation time embedded in a version 7 UUID (sessionq.uuid_v7): e.g. when an operation generation or a dispatch was admitted.';

-- -- tables ------------------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS sessionq.worker_info (
  worker_id      bigint PRIMARY KEY,
  name           text NOT NULL,
  host           text NOT NULL,
  pid            integer NOT NULL,
  queues         text[],
  concurrency    integer NOT NULL,
  started_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  draining_since timestamptz,
  drain_id       bigint,
  drain_timeout  double precision,
  keep_warm      double precision
);
CREATE INDEX IF NOT EXISTS worker_info_name_idx ON sessionq.worker_info (name);
COMMENT ON TABLE sessionq.worker_info IS
  'One row per live sessionq worker process, keyed by its procrastinate worker id (sessionq.worker_heartbeats has only an id and a heartbeat). Written by the worker at start, removed when it exits; rows of workers that died are removed by the reaper. No foreign key: procrastinate owns its table.';
COMMENT ON COLUMN sessionq.worker_info.worker_id IS 'The procrastinate worker id of the process (sessionq.worker_heartbeats.worker_id; sessionq.job_rows.worker_id of the jobs it runs).';
COMMENT ON COLUMN sessionq.worker_info.name IS 'The worker name (default host-pid): what `sessionq workers drain NAME` names.';
COMMENT ON COLUMN sessionq.worker_info.queues IS 'The queues it fetches from; NULL means every queue.';
COMMENT ON COLUMN sessionq.worker_info.draining_since IS 'Set when the worker began to drain (a drain request or SIGTERM): it fetches no new job and exits once its running jobs finish or the drain timeout aborts them.';
COMMENT ON COLUMN sessionq.worker_info.drain_id IS 'The worker_drains request it acted on (NULL for a drain by signal).';
COMMENT ON COLUMN sessionq.worker_info.drain_timeout IS 'Seconds the drain waits for running jobs before aborting them (NULL: the worker''s workers.shutdownTimeout).';
COMMENT ON COLUMN sessionq.worker_info.keep_warm IS 'The worker''s sessions.keepWarm in seconds (the server-wide keep-warm window its quiescence workers wait out; an Agent''s keepWarm overrides it); NULL: not reported.';

CREATE TABLE IF NOT EXISTS sessionq.worker_drains (
  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  worker       text NOT NULL CHECK (length(worker) BETWEEN 1 AND 200),
  requested_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  timeout      double precision CHECK (timeout IS NULL OR timeout >= 0),
  requested_by text NOT NULL
);
CREATE INDEX IF NOT EXISTS worker_drains_worker_idx ON sessionq.worker_drains (worker, requested_at);
COMMENT ON TABLE sessionq.worker_drains IS
  'Durable drain requests (sessionq.request_drain). A request applies to the workers named worker (or every worker for ''*'') that were started before it; a worker checks at start, on NOTIFY sessionq_drain and every few seconds. Kept as history; the reaper deletes rows older than a week.';
COMMENT ON COLUMN sessionq.worker_drains.worker IS 'A worker name, or * for every worker running at requested_at.';
COMMENT ON COLUMN sessionq.worker_drains.timeout IS 'Seconds to wait for running jobs before aborting them cooperatively; NULL: each worker''s workers.shutdownTimeout.';

CREATE TABLE IF NOT EXISTS sessionq.job_actions (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id     bigint,
  target     text,
  action     text NOT NULL,
  detail     text NOT NULL DEFAULT '',
  covered_by bigint,
  actor      text NOT NULL,
  at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS job_actions_job_idx ON sessionq.job_actions (job_id, id);
CREATE INDEX IF NOT EXISTS job_actions_at_idx ON sessionq.job_actions (at);
COMMENT ON TABLE sessionq.job_actions IS
  'What operators (CLI or web console), the reaper and the queueing-lock guard did to jobs, queues and workers, with who and why. No foreign key: jobs get deleted. Shown by `sessionq jobs show` and the console; the reaper deletes rows older than a week.';
COMMENT ON COLUMN sessionq.job_actions.job_id IS 'The job acted on; NULL for an action on a queue or a worker (target).';
COMMENT ON COLUMN sessionq.job_actions.target IS 'For an action on a queue or a worker: queue NAME or worker NAME.';
COMMENT ON COLUMN sessionq.job_actions.action IS 'On a job: requeued, run_now (a job waiting out its backoff made due), covered (cancelled: a waiting job with the same queueing lock does the work), failed, aborted, cancelled or abort_requested. On a queue: paused, resumed. On a worker: drain_requested.';
COMMENT ON COLUMN sessionq.job_actions.covered_by IS 'For covered: the waiting (todo) job with the same queueing lock.';
COMMENT ON COLUMN sessionq.job_actions.actor IS 'Who: a user name from the CLI, "reaper", or "worker retry" (the guard trigger during procrastinate''s own retry).';

-- -- views -------------------------------------------------------------------------------------

CREATE OR REPLACE VIEW sessionq.job_overview AS
SELECT j.id AS job_id,
       j.queue_name::text AS queue_name,
       j.task_name::text AS task_name,
       j.status::text AS status,
       j.priority,
       j.lock,
       j.queueing_lock,
       j.args,
       j.scheduled_at,
       j.attempts,
       j.abort_requested,
       j.worker_id,
       wi.name AS worker_name,
       ev.deferred_at,
       greatest(ev.status_since, ac.last_action_at) AS status_since,
       now() - greatest(ev.status_since, ac.last_action_at) AS status_age
  FROM sessionq.job_rows j
  LEFT JOIN sessionq.worker_info wi ON wi.worker_id = j.worker_id
  LEFT JOIN LATERAL sessionq.job_event_times(j.id) ev ON true
  LEFT JOIN LATERAL (
    SELECT max(a.at) AS last_action_at FROM sessionq.job_actions a
     WHERE a.job_id = j.id AND a.action IN ('requeued', 'covered', 'failed', 'aborted', 'cancelled')) ac ON true;
COMMENT ON VIEW sessionq.job_overview IS
  'Every procrastinate job with its worker''s name and the time it entered its current status (from sessionq.job_events and sessionq.job_actions). `sessionq jobs list` reads it, newest first.';
COMMENT ON COLUMN sessionq.job_overview.status IS 'todo (waiting, maybe scheduled for later), doing, succeeded (usually deleted at once), failed, cancelled or aborted.';
COMMENT ON COLUMN sessionq.job_overview.queueing_lock IS 'At most one todo job per value: operation:<session>, dispatch:<session>, revision:<revision>.';
COMMENT ON COLUMN sessionq.job_overview.worker_name IS 'The sessionq worker that runs (or last ran) the job; NULL when its worker is gone.';
COMMENT ON COLUMN sessionq.job_overview.deferred_at IS 'When the job was first queued.';
COMMENT ON COLUMN sessionq.job_overview.status_since IS 'When the job entered its current status (for todo: queued or put back).';
COMMENT ON COLUMN sessionq.job_overview.status_age IS 'How long it has been in its current status.';

CREATE OR REPLACE FUNCTION sessionq.lifecycle_blockers(p_session sessionq.sessions, p_kind text) RETURNS text[]
LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(b) FILTER (WHERE b IS NOT NULL), '{}') FROM (VALUES
    (CASE WHEN p_session.state = 'DELETED' THEN 'the session is already deleted' END),
    (CASE WHEN p_session.operation NOT IN ('NONE', p_kind)
               AND NOT (p_kind = 'DELETE' AND p_session.executor_id IS NULL)
          THEN format('a %s operation is pending and was started by executor %s (claim %s %s); retry after it completes',
                      lower(p_session.operation), p_session.executor_id,
                      CASE WHEN p_session.executor_expires_at > clock_timestamp() THEN 'live until' ELSE 'lapsed at' END,
                      p_session.executor_expires_at) END),
    (CASE WHEN p_session.unsettled_task_id IS NOT NULL
          THEN format('task %s is not settled (the Actor has not finished its cleanup)', p_session.unsettled_task_id) END),
    (CASE WHEN p_session.idle_executor IS NOT NULL
          THEN format('quiescence executor %s claimed the idle boundary at %s and has not recorded the outcome',
                      p_session.idle_executor, p_session.idle_claimed_at) END),
    (CASE WHEN p_kind = 'SUSPEND' AND (p_session.active_task_id IS NOT NULL
                                       OR p_session.dispatch_id IS NOT NULL AND p_session.dispatch_expires_at > clock_timestamp())
          THEN 'a turn is running' END),
    (CASE WHEN sessionq.checkpoint_in_progress(p_session.id) THEN 'a checkpoint is being created' END)
  ) AS t(b)
$$;
COMMENT ON FUNCTION sessionq.lifecycle_blockers(sessionq.sessions, text) IS
  'Why an explicit SUSPEND, RESUME or DELETE of this Session would be refused now, one line per reason (empty: nothing blocks it). Mirrors admit_operation and check_lifecycle_blockers.';

CREATE OR REPLACE VIEW sessionq.session_overview AS
SELECT s.id AS session_id,
       s.creator,
       s.agent_namespace,
       s.agent_name,
       s.name,
       s.state,
       s.operation,
       s.operation_id AS generation,
       s.executor_id AS claim_holder,
       s.executor_expires_at AS claim_expires_at,
       CASE WHEN s.executor_id IS NULL THEN NULL
            WHEN s.executor_expires_at > clock_timestamp() THEN 'live' ELSE 'lapsed' END AS claim_state,
       s.failure_reason,
       s.failure_message,
       s.dispatch_id,
       s.dispatch_expires_at,
       s.active_task_id,
       s.unsettled_task_id,
       s.idle_boundary_id,
       s.idle_boundary_at,
       s.idle_executor AS idle_claim_holder,
       s.idle_claimed_at,
       sessionq.lifecycle_blockers(s, 'DELETE') AS delete_blockers,
       s.actor_atespace,
       s.actor_name,
       s.actor_uid,
       s.revision_id,
       s.pinned_checkpoint_id,
       s.created_at,
       s.updated_at,
       s.kind,
       s.expires_at
  FROM sessionq.sessions s;
COMMENT ON VIEW sessionq.session_overview IS
  'Every Session (DELETED tombstones included) with its operation, generation, executor claim, turn, idle boundary and idle claim, and what blocks its deletion. Sandboxes (kind sandbox) are rows here too: the same lifecycle machinery.';
COMMENT ON COLUMN sessionq.session_overview.kind IS 'session, or sandbox (a standalone Sandbox of SandboxService: no turns; it expires at expires_at).';
COMMENT ON COLUMN sessionq.session_overview.expires_at IS 'Sandboxes only: when the expiry sweep deletes it (NULL for Sessions, which expire when idle).';
COMMENT ON COLUMN sessionq.session_overview.generation IS 'The current operation UUID (a UUIDv7: sessionq.uuid_v7_time(generation) is its admission time).';
COMMENT ON COLUMN sessionq.session_overview.claim_holder IS 'The executor attempt that claimed the generation (its id appears as executor_id in the worker logs). Kept after the claim lapses: runtime work may have been issued.';
COMMENT ON COLUMN sessionq.session_overview.claim_state IS 'live (claim_expires_at is in the future), lapsed (a retry may take over), NULL (never claimed).';
COMMENT ON COLUMN sessionq.session_overview.idle_boundary_id IS 'Set when the Actor may be suspended (after a settled turn or a Resume); the quiescence workers claim it.';
COMMENT ON COLUMN sessionq.session_overview.idle_claim_holder IS 'The quiescence executor that claimed the idle boundary; such a claim never expires (runtime work may have been issued).';
COMMENT ON COLUMN sessionq.session_overview.delete_blockers IS 'Why a Delete would be refused right now (empty array: it would be admitted).';

-- console_sees: what the web console shows a viewer who is not an admin.
CREATE OR REPLACE FUNCTION sessionq.console_sees(p_session uuid, p_viewer text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT p_viewer IS NULL
      OR EXISTS (SELECT 1 FROM sessionq.sessions s
                  WHERE s.id = p_session AND sessionq.access(s, p_viewer, NULL, s.kind) = 'owner')
$$;
COMMENT ON FUNCTION sessionq.console_sees(uuid, text) IS
  'Whether the web console shows Session (or Sandbox) p_session, and what hangs off it (its operation, claims, turns, checkpoints, jobs), to p_viewer: an admin (NULL) sees every row; anyone else what the API shows them without a share token: their own live rows (sessionq.access: owner), never another user''s nor a DELETED tombstone.';

CREATE OR REPLACE VIEW sessionq.claims AS
WITH active_jobs AS (
  SELECT j.id, j.task_name, j.status, j.queueing_lock, j.args, j.worker_id
    FROM sessionq.job_rows j WHERE j.status IN ('todo', 'doing')
)
SELECT 'operation'::text AS kind, s.id AS session_id, lower(s.operation) AS work, s.operation_id AS subject,
       s.executor_id AS holder, NULL::timestamptz AS claimed_at, s.executor_expires_at AS expires_at,
       CASE WHEN s.executor_expires_at > clock_timestamp() THEN 'live' ELSE 'lapsed' END AS state,
       j.id AS job_id, j.worker_id, wi.name AS worker_name
  FROM sessionq.sessions s
  LEFT JOIN active_jobs j ON j.status = 'doing' AND j.queueing_lock = 'operation:' || s.id
  LEFT JOIN sessionq.worker_info wi ON wi.worker_id = j.worker_id
 WHERE s.executor_id IS NOT NULL AND s.operation <> 'NONE'
UNION ALL
SELECT 'quiescence', s.id, 'suspend (idle)', s.idle_boundary_id, s.idle_executor, s.idle_claimed_at, NULL,
       'held', NULL, NULL, NULL
  FROM sessionq.sessions s
 WHERE s.idle_executor IS NOT NULL
UNION ALL
SELECT 'dispatch', s.id, 'turn', s.dispatch_id, NULL, sessionq.uuid_v7_time(s.dispatch_id), s.dispatch_expires_at,
       CASE WHEN s.dispatch_expires_at > clock_timestamp() THEN 'live' ELSE 'expired' END,
       j.id, j.worker_id, wi.name
  FROM sessionq.sessions s
  LEFT JOIN active_jobs j ON j.task_name = 'dispatch_turn' AND j.args ->> 'session_id' = s.id::text
  LEFT JOIN sessionq.worker_info wi ON wi.worker_id = j.worker_id
 WHERE s.dispatch_id IS NOT NULL;
COMMENT ON VIEW sessionq.claims IS
  'Who holds what: executor claims of operations (live or lapsed), quiescence claims (held until recorded: they never expire) and dispatch reservations of turns, with the job and worker running them when known.';
COMMENT ON COLUMN sessionq.claims.kind IS 'operation (an executor claim of a generation), quiescence (an idle claim), dispatch (a turn''s reservation).';
COMMENT ON COLUMN sessionq.claims.subject IS 'The generation, idle boundary or dispatch id claimed.';
COMMENT ON COLUMN sessionq.claims.holder IS 'The executor id (as logged by the worker as executor_id); NULL for dispatches.';
COMMENT ON COLUMN sessionq.claims.state IS 'live, lapsed (operation: a retry may claim it), held (quiescence), expired (dispatch: the reaper ends it).';
COMMENT ON COLUMN sessionq.claims.worker_name IS 'The worker running the job that holds it (operations and dispatches), when that job is running.';

CREATE OR REPLACE VIEW sessionq.pending_operations AS
SELECT s.id AS session_id,
       s.operation AS kind,
       s.operation_id AS generation,
       s.state,
       coalesce(sessionq.uuid_v7_time(s.operation_id), s.updated_at) AS admitted_at,
       now() - coalesce(sessionq.uuid_v7_time(s.operation_id), s.updated_at) AS age,
       s.executor_id AS claim_holder,
       s.executor_expires_at AS claim_expires_at,
       CASE WHEN s.executor_id IS NULL THEN NULL
            WHEN s.executor_expires_at > clock_timestamp() THEN 'live' ELSE 'lapsed' END AS claim_state,
       s.failure_reason,
       s.failure_message,
       j.id AS job_id,
       j.status::text AS job_status,
       j.scheduled_at AS job_scheduled_at,
       j.attempts AS job_attempts
  FROM sessionq.sessions s
  LEFT JOIN (
    SELECT DISTINCT ON (pj.queueing_lock) pj.queueing_lock, pj.id, pj.status, pj.scheduled_at, pj.attempts
      FROM sessionq.job_rows pj
     WHERE pj.status IN ('todo', 'doing') AND pj.queueing_lock LIKE 'operation:%'
     ORDER BY pj.queueing_lock, pj.status = 'doing' DESC, pj.id
  ) j ON j.queueing_lock = 'operation:' || s.id
 WHERE s.operation <> 'NONE';
COMMENT ON VIEW sessionq.pending_operations IS
  'Sessions with an admitted lifecycle operation (CREATE, SUSPEND, RESUME, DELETE) that has not completed, with its age, claim and execute_operation job. No job_id means nothing will run it until a client retries or an operator requeues a job.';
COMMENT ON COLUMN sessionq.pending_operations.kind IS 'CREATE, SUSPEND, RESUME or DELETE.';
COMMENT ON COLUMN sessionq.pending_operations.generation IS 'The operation UUID; NULL after a failed preparation (failure_reason says why; a client retry admits a new one).';
COMMENT ON COLUMN sessionq.pending_operations.age IS 'Time since admission (from the UUIDv7 generation; since the last update when there is none).';
COMMENT ON COLUMN sessionq.pending_operations.job_status IS 'todo (waiting; job_scheduled_at says until when) or doing; NULL: no job.';

-- server_keep_warm: the server-wide keep-warm window the live workers report.
CREATE OR REPLACE FUNCTION sessionq.server_keep_warm() RETURNS double precision
LANGUAGE sql STABLE AS $$
  SELECT coalesce(min(wi.keep_warm), 0) FROM sessionq.worker_info wi WHERE wi.keep_warm IS NOT NULL
$$;
COMMENT ON FUNCTION sessionq.server_keep_warm() IS
  'The server-wide sessions.keepWarm (seconds) as the live workers report it (sessionq.worker_info.keep_warm): the smallest, since the first worker whose window has passed claims the boundary; 0 when none reports one.';

CREATE OR REPLACE VIEW sessionq.quiescence_backlog AS
SELECT s.id AS session_id,
       s.state,
       s.idle_boundary_id,
       s.idle_boundary_at,
       now() - s.idle_boundary_at AS waiting,
       s.idle_executor AS claim_holder,
       s.idle_claimed_at,
       now() - s.idle_claimed_at AS claimed_for,
       CASE WHEN s.idle_executor IS NOT NULL THEN 'claimed'
            WHEN s.state <> 'READY' THEN 'ineligible'
            -- 30_tasks.sql: an Actor paused waiting for input, or kept warm by its Agent's keepWarm
            WHEN s.actor_paused_at IS NOT NULL AND s.idle_boundary_at > now() THEN 'paused'
            WHEN s.idle_boundary_at > now() - make_interval(secs => sessionq.keep_warm_of(s.revision_id, sessionq.server_keep_warm())) THEN 'warm'
            WHEN s.operation <> 'NONE' OR s.dispatch_id IS NOT NULL OR s.active_task_id IS NOT NULL
                 OR s.unsettled_task_id IS NOT NULL OR sessionq.checkpoint_in_progress(s.id) THEN 'blocked'
            ELSE 'waiting' END AS status,
       CASE WHEN s.idle_executor IS NOT NULL THEN NULL
            WHEN s.state <> 'READY' THEN format('the session is %s', s.state)
            WHEN s.operation <> 'NONE' THEN format('a %s operation is pending', lower(s.operation))
            WHEN s.dispatch_id IS NOT NULL THEN format('turn dispatch %s is reserved', s.dispatch_id)
            WHEN s.active_task_id IS NOT NULL THEN format('task %s is running', s.active_task_id)
            WHEN s.unsettled_task_id IS NOT NULL THEN format('task %s is not settled', s.unsettled_task_id)
            WHEN sessionq.checkpoint_in_progress(s.id) THEN 'a checkpoint is being created'
       END AS blocked_by
  FROM sessionq.sessions s
 WHERE s.idle_boundary_id IS NOT NULL;
COMMENT ON VIEW sessionq.quiescence_backlog IS
  'Idle boundaries not yet recorded: Sessions whose Actor should be suspended by the quiescence workers. waiting: eligible, not yet claimed; blocked: something must finish first (blocked_by); claimed: a worker is on it (a claim that stays long means the suspend failed: see the worker logs for the claim holder).';
COMMENT ON COLUMN sessionq.quiescence_backlog.waiting IS 'Time since the boundary was marked (the quiescence lag so far).';
COMMENT ON COLUMN sessionq.quiescence_backlog.claimed_for IS 'Time since a quiescence worker claimed it.';
COMMENT ON COLUMN sessionq.quiescence_backlog.status IS 'waiting, blocked, claimed, ineligible (the Session is not READY; the boundary is dropped by the next operation), paused (the Actor is paused waiting for input until the boundary falls due: sessions.pausedRuntimeTtl) or warm (inside its keep-warm window: its Agent''s keepWarm, else the server-wide sessions.keepWarm the workers report, sessionq.server_keep_warm).';

CREATE OR REPLACE VIEW sessionq.agent_overview AS
SELECT a.namespace,
       a.name,
       a.created_by,
       sessionq.redact_agent_spec(a.spec) AS spec,
       d.number AS desired_revision,
       d.state AS desired_state,
       d.failure_message AS desired_failure,
       l.number AS serving_revision,
       (SELECT c ->> 'status' FROM jsonb_array_elements(a.conditions) c WHERE c ->> 'type' = 'Ready') AS ready,
       (SELECT count(*) FROM sessionq.sessions s
         WHERE s.agent_namespace = a.namespace AND s.agent_name = a.name AND s.state <> 'DELETED') AS live_sessions,
       a.created_at,
       a.updated_at
  FROM sessionq.agents a
  JOIN sessionq.revisions d ON d.id = a.desired_revision_id
  LEFT JOIN sessionq.revisions l ON l.id = a.latest_successful_revision_id;
COMMENT ON VIEW sessionq.agent_overview IS
  'Every Agent with its spec (credential header values shown as <redacted>: read this view, not sessionq.agents or sessionq.revisions, whose spec and egress columns hold the values), its desired and serving revisions and its live Sessions.';
COMMENT ON COLUMN sessionq.agent_overview.spec IS 'The desired spec, credential header values redacted (sessionq.redact_agent_spec).';
COMMENT ON COLUMN sessionq.agent_overview.desired_revision IS 'The number of the newest applied revision; desired_state is PENDING, READY or FAILED (desired_failure says why).';
COMMENT ON COLUMN sessionq.agent_overview.serving_revision IS 'The number of the revision new Sessions pin (the newest READY one); NULL until one is prepared.';
COMMENT ON COLUMN sessionq.agent_overview.live_sessions IS 'Sessions of this Agent that are not DELETED.';

-- checkpoints_overview exists only when the checkpoints table does (schema/40_checkpoints.sql).
DO $do$
BEGIN
  IF to_regclass('sessionq.checkpoints') IS NULL THEN
    RETURN;
  END IF;
  EXECUTE $v$
    CREATE OR REPLACE VIEW sessionq.checkpoints_overview AS
    SELECT c.*,
           now() - c.created_at AS age,
           (SELECT count(*) FROM sessionq.sessions s WHERE s.pinned_checkpoint_id = c.id) AS live_forks
      FROM sessionq.checkpoints c
  $v$;
  EXECUTE $c$
    COMMENT ON VIEW sessionq.checkpoints_overview IS
      'Every checkpoint with its age and the number of live Sessions forked from it (live_forks: while it is above zero the checkpoint cannot be deleted).'
  $c$;
  EXECUTE $c$ COMMENT ON COLUMN sessionq.checkpoints_overview.age IS 'Time since the checkpoint was requested.' $c$;
  EXECUTE $c$ COMMENT ON COLUMN sessionq.checkpoints_overview.live_forks IS 'Live Sessions whose source is this checkpoint (they pin it).' $c$;
END
$do$;

CREATE OR REPLACE VIEW sessionq.queue_depth AS
SELECT j.queue_name,
       j.status,
       count(*) AS jobs,
       count(*) FILTER (WHERE j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now())) AS due,
       min(j.status_since) AS oldest_since,
       now() - min(j.status_since) AS oldest_age,
       now() - min(greatest(j.status_since, j.scheduled_at))
         FILTER (WHERE j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now())) AS oldest_due_age
  FROM sessionq.job_overview j
 WHERE j.status <> 'succeeded'
 GROUP BY j.queue_name, j.status;
COMMENT ON VIEW sessionq.queue_depth IS
  'Jobs per queue and status (succeeded jobs, kept for jobs.retention as history, are left out), with the age of the oldest. For todo, due counts the jobs that may run now (not scheduled for later) and oldest_due_age is how long the oldest of them has waited: growing means the workers do not keep up (or none runs).';
COMMENT ON COLUMN sessionq.queue_depth.due IS 'todo jobs whose scheduled time has come (0 for other statuses).';
COMMENT ON COLUMN sessionq.queue_depth.oldest_age IS 'Time the oldest job of this queue and status has been in that status.';
COMMENT ON COLUMN sessionq.queue_depth.oldest_due_age IS 'todo only: how long the oldest runnable job has waited.';

CREATE OR REPLACE FUNCTION sessionq.find_stalled_jobs(p_timeout double precision DEFAULT NULL)
RETURNS TABLE (job_id bigint, queue_name text, task_name text, args jsonb, queueing_lock text, lock text,
               attempts integer, abort_requested boolean, worker_id bigint, worker_name text,
               last_heartbeat timestamptz, heartbeat_age interval, started_at timestamptz)
LANGUAGE sql STABLE
SET search_path = sessionq, public
AS $$
  SELECT j.id, j.queue_name::text, j.task_name::text, j.args, j.queueing_lock, j.lock, j.attempts, j.abort_requested,
         j.worker_id, wi.name, w.last_heartbeat, now() - w.last_heartbeat,
         (SELECT t.started_at FROM sessionq.job_event_times(j.id) t)
    FROM sessionq.job_rows j
    LEFT JOIN sessionq.worker_heartbeats w ON w.worker_id = j.worker_id
    LEFT JOIN sessionq.worker_info wi ON wi.worker_id = j.worker_id
   WHERE j.status = 'doing'
     AND (w.worker_id IS NULL OR w.last_heartbeat < now() - sessionq.stall_timeout(p_timeout))
   ORDER BY j.id
$$;
COMMENT ON FUNCTION sessionq.find_stalled_jobs(double precision) IS
  'Jobs in doing whose worker is gone or has not heartbeaten for p_timeout seconds (default: sessionq.stall_timeout()). procrastinate never retries them by itself; the reaper and `sessionq requeue --stalled` do.';

CREATE OR REPLACE VIEW sessionq.stalled_jobs AS
SELECT * FROM sessionq.find_stalled_jobs();
COMMENT ON VIEW sessionq.stalled_jobs IS
  'Running jobs whose worker stopped heartbeating for longer than the stall timeout (SET sessionq.stall_timeout = ''60s'' to change it for this session; default 30 s) or whose worker row is gone. The reaper puts them back to run every 15 s.';
COMMENT ON COLUMN sessionq.stalled_jobs.worker_name IS 'The dead worker (NULL when procrastinate already pruned its row).';
COMMENT ON COLUMN sessionq.stalled_jobs.heartbeat_age IS 'Time since the worker''s last heartbeat (NULL when its row is gone).';
COMMENT ON COLUMN sessionq.stalled_jobs.started_at IS 'When the job started on that worker.';

CREATE OR REPLACE VIEW sessionq.workers AS
SELECT w.worker_id,
       wi.name,
       wi.host,
       wi.pid,
       wi.queues,
       wi.concurrency,
       (SELECT count(*) FROM sessionq.job_rows j WHERE j.worker_id = w.worker_id AND j.status = 'doing') AS running_jobs,
       w.last_heartbeat,
       now() - w.last_heartbeat AS heartbeat_age,
       CASE WHEN w.last_heartbeat < now() - sessionq.stall_timeout() THEN 'stalled'
            WHEN wi.draining_since IS NOT NULL THEN 'draining'
            ELSE 'running' END AS state,
       wi.started_at,
       wi.draining_since,
       wi.drain_timeout,
       (SELECT min(d.requested_at) FROM sessionq.worker_drains d
         WHERE (d.worker = wi.name OR d.worker = '*') AND d.requested_at >= wi.started_at) AS drain_requested_at
  FROM sessionq.worker_heartbeats w
  LEFT JOIN sessionq.worker_info wi ON wi.worker_id = w.worker_id;
COMMENT ON VIEW sessionq.workers IS
  'Every registered worker process (sessionq.worker_heartbeats) with its sessionq name, host, pid, queues, concurrency, running jobs, heartbeat age and state. Workers not started by sessionq have no name.';
COMMENT ON COLUMN sessionq.workers.queues IS 'The queues it fetches from; NULL: every queue.';
COMMENT ON COLUMN sessionq.workers.running_jobs IS 'Its jobs in doing.';
COMMENT ON COLUMN sessionq.workers.heartbeat_age IS 'Time since its last heartbeat (every 10 s while alive).';
COMMENT ON COLUMN sessionq.workers.state IS 'running; draining (fetches nothing new, exits when its jobs are done or aborted); stalled (no heartbeat for the stall timeout: its jobs are requeued by the reaper).';
COMMENT ON COLUMN sessionq.workers.drain_requested_at IS 'The earliest drain request that applies to it (it acts on it within seconds: state becomes draining).';

-- -- workers and drains -------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION sessionq.register_worker(
  p_worker_id bigint, p_name text, p_host text, p_pid integer, p_queues text[], p_concurrency integer,
  p_keep_warm double precision DEFAULT NULL
) RETURNS void
LANGUAGE sql AS $$
  INSERT INTO sessionq.worker_info (worker_id, name, host, pid, queues, concurrency, keep_warm)
  VALUES (p_worker_id, p_name, p_host, p_pid, p_queues, p_concurrency, p_keep_warm)
  ON CONFLICT (worker_id) DO UPDATE
    SET name = EXCLUDED.name, host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
        concurrency = EXCLUDED.concurrency, keep_warm = EXCLUDED.keep_warm, started_at = clock_timestamp(),
        draining_since = NULL, drain_id = NULL, drain_timeout = NULL;
$$;
COMMENT ON FUNCTION sessionq.register_worker(bigint, text, text, integer, text[], integer, double precision) IS
  'A worker process records its name, host, pid, queues, concurrency and sessions.keepWarm under its procrastinate worker id once procrastinate registered it.';

CREATE OR REPLACE FUNCTION sessionq.unregister_worker(p_worker_id bigint) RETURNS void
LANGUAGE sql AS $$
  DELETE FROM sessionq.worker_info WHERE worker_id = p_worker_id;
$$;
COMMENT ON FUNCTION sessionq.unregister_worker(bigint) IS 'A worker process that exits removes its worker_info row.';

CREATE OR REPLACE FUNCTION sessionq.request_drain(
  p_worker text, p_timeout double precision, p_by text, p_worker_id bigint DEFAULT NULL
) RETURNS TABLE (drain_id bigint, worker_ids bigint[], workers text[])
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_id bigint;
  v_ids bigint[];
  v_names text[];
  v_state text;
BEGIN
  IF p_worker IS NULL OR btrim(p_worker) = '' THEN
    PERFORM sessionq.fail('SQ400', 'name the worker to drain, or * for every worker');
  END IF;
  IF length(p_worker) > 200 THEN
    PERFORM sessionq.fail('SQ400', format('worker name %s is too long (at most 200 characters)', sessionq.clip(p_worker)));
  END IF;
  IF p_timeout IS NOT NULL AND (p_timeout < 0 OR p_timeout = 'NaN'::double precision) THEN
    PERFORM sessionq.fail('SQ400', format('drain timeout %s must be zero or positive seconds', p_timeout));
  END IF;
  IF p_worker_id IS NOT NULL THEN
    -- the console names the worker it showed: if that one changed meanwhile, change nothing
    SELECT w.state INTO v_state FROM sessionq.workers w WHERE w.worker_id = p_worker_id AND w.name = p_worker;
    IF NOT FOUND THEN
      PERFORM sessionq.fail('SQ409', format('worker %s (id %s) is no longer running; nothing was changed',
                                           sessionq.clip(p_worker), p_worker_id));
    ELSIF v_state <> 'running' THEN
      PERFORM sessionq.fail('SQ409', format('worker %s (id %s) is %s now; nothing was changed',
                                           sessionq.clip(p_worker), p_worker_id, v_state));
    END IF;
  END IF;
  SELECT coalesce(array_agg(w.worker_id ORDER BY w.name, w.worker_id), '{}'),
         coalesce(array_agg(w.name ORDER BY w.name, w.worker_id), '{}')
    INTO v_ids, v_names
    FROM sessionq.workers w
   WHERE w.name IS NOT NULL AND (p_worker = '*' OR w.name = p_worker);
  IF p_worker <> '*' AND cardinality(v_ids) = 0 THEN
    PERFORM sessionq.fail('SQ404', format('no running worker is named %s (see `sessionq workers list`)', sessionq.clip(p_worker)));
  END IF;
  INSERT INTO sessionq.worker_drains (worker, timeout, requested_by)
  VALUES (p_worker, p_timeout, coalesce(nullif(p_by, ''), current_user))
  RETURNING id INTO v_id;
  INSERT INTO sessionq.job_actions (target, action, detail, actor)
  VALUES ('worker ' || p_worker, 'drain_requested',
          format('drain %s of %s worker(s)%s', v_id, cardinality(v_ids),
                 CASE WHEN p_timeout IS NULL THEN '' ELSE format(', running jobs get %ss', p_timeout) END),
          coalesce(nullif(p_by, ''), current_user));
  PERFORM sessionq.notify('sessionq_drain', jsonb_build_object('worker', p_worker));
  RETURN QUERY SELECT v_id, v_ids, v_names;
END $$;
COMMENT ON FUNCTION sessionq.request_drain(text, double precision, text, bigint) IS
  'Ask the worker named p_worker (or every worker: *) to drain: fetch no new job, let running jobs finish for up to p_timeout seconds (NULL: its workers.shutdownTimeout), then abort them cooperatively and exit. Durable (a worker_drains row) and immediate (NOTIFY sessionq_drain {"worker"}: the name or *). With p_worker_id (the web console) the request is refused with ABORTED, changing nothing, unless that worker still runs under that name and is not draining. Returns the request id and the workers it applies to; NOT_FOUND for an unknown name.';

CREATE OR REPLACE FUNCTION sessionq.take_drain(p_worker_id bigint)
RETURNS TABLE (drain_id bigint, timeout double precision, requested_by text, requested_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
  v_info sessionq.worker_info;
  v_drain sessionq.worker_drains;
BEGIN
  SELECT * INTO v_info FROM sessionq.worker_info wi WHERE wi.worker_id = p_worker_id FOR UPDATE;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  SELECT * INTO v_drain FROM sessionq.worker_drains d
   WHERE (d.worker = v_info.name OR d.worker = '*') AND d.requested_at >= v_info.started_at
   ORDER BY d.id LIMIT 1;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  UPDATE sessionq.worker_info wi
     SET draining_since = coalesce(wi.draining_since, clock_timestamp()),
         drain_id = coalesce(wi.drain_id, v_drain.id),
         drain_timeout = CASE WHEN wi.draining_since IS NULL THEN v_drain.timeout ELSE wi.drain_timeout END
   WHERE wi.worker_id = p_worker_id;
  RETURN QUERY SELECT v_drain.id, v_drain.timeout, v_drain.requested_by, v_drain.requested_at;
END $$;
COMMENT ON FUNCTION sessionq.take_drain(bigint) IS
  'A worker asks whether a drain request applies to it (its name or *, requested after it started); if so it is marked draining and gets the request (the earliest one).';

CREATE OR REPLACE FUNCTION sessionq.mark_worker_draining(p_worker_id bigint, p_timeout double precision)
RETURNS void LANGUAGE sql AS $$
  UPDATE sessionq.worker_info wi
     SET draining_since = coalesce(wi.draining_since, clock_timestamp()),
         drain_timeout = CASE WHEN wi.draining_since IS NULL THEN p_timeout ELSE wi.drain_timeout END
   WHERE wi.worker_id = p_worker_id;
$$;
COMMENT ON FUNCTION sessionq.mark_worker_draining(bigint, double precision) IS
  'A worker that drains on a signal (SIGTERM, Ctrl-C) shows it: state draining, with the timeout it waits for running jobs.';

-- -- requeue, retry, cancel ------------------------------------------------------------------------

-- requeue_one: where an operator or the reaper puts a job back to todo (or ends a stalled one),
-- through the bridge's retry_job_now and finish_job.
CREATE OR REPLACE FUNCTION sessionq.requeue_one(
  p_job bigint, p_by text, p_stall_timeout double precision, p_dry_run boolean, p_any_terminal boolean
) RETURNS TABLE (job_id bigint, queue_name text, task_name text, previous_status text, action text,
                 covered_by bigint, detail text)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v sessionq.job_rows;
  v_status text;
  v_cover bigint;
  v_heartbeat timestamptz;
  v_worker_alive boolean;
BEGIN
  SELECT * INTO v FROM sessionq.job_rows j WHERE j.id = p_job FOR UPDATE;
  IF NOT FOUND THEN
    RETURN QUERY SELECT p_job, NULL::text, NULL::text, NULL::text, 'refused'::text, NULL::bigint,
                        format('job %s not found', p_job);
    RETURN;
  END IF;
  v_status := v.status::text;
  IF v_status = 'doing' THEN
    SELECT w.last_heartbeat INTO v_heartbeat FROM sessionq.worker_heartbeats w WHERE w.worker_id = v.worker_id;
    v_worker_alive := FOUND AND v_heartbeat >= now() - sessionq.stall_timeout(p_stall_timeout);
    IF v_worker_alive THEN
      RETURN QUERY SELECT v.id, v.queue_name::text, v.task_name::text, v_status, 'refused'::text, NULL::bigint,
        format('job %s is running on worker %s (heartbeat %s s ago); it is not stalled', v.id,
               coalesce((SELECT wi.name FROM sessionq.worker_info wi WHERE wi.worker_id = v.worker_id), v.worker_id::text),
               round(extract(epoch FROM now() - v_heartbeat)::numeric, 1));
      RETURN;
    END IF;
  ELSIF v_status = 'todo' THEN
    RETURN QUERY SELECT v.id, v.queue_name::text, v.task_name::text, v_status, 'refused'::text, NULL::bigint,
                        format('job %s is already waiting to run (todo)', v.id);
    RETURN;
  ELSIF v_status = 'succeeded' OR (v_status <> 'failed' AND NOT p_any_terminal) THEN
    RETURN QUERY SELECT v.id, v.queue_name::text, v.task_name::text, v_status, 'refused'::text, NULL::bigint,
                        format('job %s is %s; only failed and stalled jobs are requeued', v.id, v_status);
    RETURN;
  END IF;

  IF v_status = 'doing' AND v.abort_requested THEN
    -- its abort was requested before its worker died: honour it instead of running it again
    IF NOT p_dry_run THEN
      PERFORM sessionq.record_job_attempt(v.id, 'stalled', 'WorkerLost',
        'its worker stopped heartbeating after the abort was requested: marked aborted');
      PERFORM sessionq.finish_job(v.id, 'aborted');
      INSERT INTO sessionq.job_actions (job_id, action, detail, actor)
      VALUES (v.id, 'aborted', 'stalled after its abort was requested: marked aborted instead of requeued', p_by);
    END IF;
    RETURN QUERY SELECT v.id, v.queue_name::text, v.task_name::text, v_status,
                        CASE WHEN p_dry_run THEN 'would abort' ELSE 'aborted' END, NULL::bigint,
                        'its abort was requested before its worker died'::text;
    RETURN;
  END IF;

  IF v.queueing_lock IS NOT NULL THEN
    SELECT j.id INTO v_cover FROM sessionq.job_rows j
     WHERE j.queueing_lock = v.queueing_lock AND j.status = 'todo' AND j.id <> v.id LIMIT 1;
  END IF;
  IF p_dry_run THEN
    RETURN QUERY SELECT v.id, v.queue_name::text, v.task_name::text, v_status,
                        CASE WHEN v_cover IS NULL THEN 'would requeue' ELSE 'would cancel (covered)' END, v_cover,
                        CASE WHEN v_cover IS NULL THEN ''
                             ELSE format('waiting job %s holds queueing lock %s', v_cover, v.queueing_lock) END;
    RETURN;
  END IF;

  IF v_status = 'doing' THEN  -- the attempt that stalled ends here
    PERFORM sessionq.record_job_attempt(v.id, 'stalled', 'WorkerLost',
      format('worker %s stopped heartbeating while running this attempt; requeued by %s',
             coalesce((SELECT wi.name FROM sessionq.worker_info wi WHERE wi.worker_id = v.worker_id), v.worker_id::text, 'gone'),
             p_by));
  END IF;
  PERFORM set_config('sessionq.actor', p_by, true);  -- for the guard trigger's record
  PERFORM sessionq.retry_job_now(v.id);
  PERFORM set_config('sessionq.actor', '', true);
  SELECT * INTO v FROM sessionq.job_rows j WHERE j.id = p_job;
  IF v.status = 'todo' THEN
    PERFORM sessionq.wake_workers(v.queue_name, v.id);
    INSERT INTO sessionq.job_actions (job_id, action, detail, actor)
    VALUES (v.id, 'requeued', format('%s -> todo', v_status), p_by);
    RETURN QUERY SELECT v.id, v.queue_name::text, v.task_name::text, v_status, 'requeued'::text, NULL::bigint, ''::text;
  ELSE  -- the guard trigger cancelled it: the waiting job covers it
    RETURN QUERY SELECT v.id, v.queue_name::text, v.task_name::text, v_status, 'covered'::text, v_cover,
                        format('cancelled: waiting job %s holds queueing lock %s and does the same work',
                               v_cover, v.queueing_lock);
  END IF;
END $$;
COMMENT ON FUNCTION sessionq.requeue_one(bigint, text, double precision, boolean, boolean) IS
  'Internal: put one failed or stalled job (and, with p_any_terminal, an aborted or cancelled one) back to todo now and wake the workers. A job whose queueing lock is held by a waiting job is cancelled instead (covered); a stalled job whose abort was requested is marked aborted. action: requeued, covered, aborted, refused (detail says why), or would ... in a dry run. Recorded in job_actions.';

CREATE OR REPLACE FUNCTION sessionq.requeue_job(
  p_job bigint, p_by text, p_stall_timeout double precision DEFAULT NULL, p_expect text DEFAULT NULL
) RETURNS TABLE (job_id bigint, queue_name text, task_name text, previous_status text, action text,
               covered_by bigint, detail text)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v sessionq.job_rows;
  r record;
BEGIN
  SELECT * INTO v FROM sessionq.job_rows j WHERE j.id = p_job FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('job %s not found', p_job));
  END IF;
  IF p_expect IS NOT NULL AND v.status::text <> p_expect THEN
    PERFORM sessionq.fail('SQ409', format('job %s is %s now, no longer %s; nothing was changed', p_job, v.status,
                                         sessionq.clip(p_expect, 20)));
  END IF;
  IF v.status = 'todo' THEN
    -- a job waiting out its retry backoff (or scheduled for later) runs now
    IF NOT sessionq.run_job_now(p_job) THEN
      PERFORM sessionq.fail('SQ412', format('job %s is already due and waits for a free worker (see `sessionq status`: is its queue paused, or no worker running?)', p_job));
    END IF;
    INSERT INTO sessionq.job_actions (job_id, action, detail, actor)
    VALUES (p_job, 'run_now', format('was scheduled for %s', v.scheduled_at), p_by);
    RETURN QUERY SELECT v.id, v.queue_name::text, v.task_name::text, 'todo'::text, 'run_now'::text, NULL::bigint,
                        format('was scheduled for %s', v.scheduled_at);
    RETURN;
  END IF;
  SELECT * INTO r FROM sessionq.requeue_one(p_job, p_by, p_stall_timeout, false, true);
  IF r.action = 'refused' THEN
    PERFORM sessionq.fail('SQ412', r.detail);
  END IF;
  RETURN QUERY SELECT r.job_id, r.queue_name, r.task_name, r.previous_status, r.action, r.covered_by, r.detail;
END $$;
COMMENT ON FUNCTION sessionq.requeue_job(bigint, text, double precision, text) IS
  '`sessionq jobs retry ID` (and the web console''s Retry): run a job waiting out its retry backoff now (action run_now), or put a failed, aborted, cancelled or stalled job back to run now (see requeue_one). With p_expect, the job must still be in that status, else ABORTED and nothing changes. NOT_FOUND for an unknown job; FAILED_PRECONDITION for a job that is already due, running on a live worker or succeeded.';

CREATE OR REPLACE FUNCTION sessionq.requeue_jobs(
  p_which text, p_queue text, p_task text, p_since double precision, p_by text,
  p_stall_timeout double precision DEFAULT NULL, p_dry_run boolean DEFAULT false
) RETURNS TABLE (job_id bigint, queue_name text, task_name text, previous_status text, action text,
                 covered_by bigint, detail text)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_id bigint;
BEGIN
  IF p_which IS NULL OR p_which NOT IN ('failed', 'stalled') THEN
    PERFORM sessionq.fail('SQ400', format('requeue failed or stalled jobs, not %s', coalesce(p_which, 'nothing')));
  END IF;
  IF p_since IS NOT NULL AND p_since <= 0 THEN
    PERFORM sessionq.fail('SQ400', 'since must be a positive number of seconds');
  END IF;
  FOR v_id IN
    SELECT j.job_id FROM sessionq.job_overview j
     WHERE p_which = 'failed' AND j.status = 'failed'
       AND (p_queue IS NULL OR j.queue_name = p_queue) AND (p_task IS NULL OR j.task_name = p_task)
       AND (p_since IS NULL OR j.status_since >= now() - make_interval(secs => p_since))
    UNION
    SELECT s.job_id FROM sessionq.find_stalled_jobs(p_stall_timeout) s
     WHERE p_which = 'stalled'
       AND (p_queue IS NULL OR s.queue_name = p_queue) AND (p_task IS NULL OR s.task_name = p_task)
       AND (p_since IS NULL OR s.started_at >= now() - make_interval(secs => p_since))
    ORDER BY 1
  LOOP
    RETURN QUERY SELECT * FROM sessionq.requeue_one(v_id, p_by, p_stall_timeout, p_dry_run, false);
  END LOOP;
END $$;
COMMENT ON FUNCTION sessionq.requeue_jobs(text, text, text, double precision, text, double precision, boolean) IS
  '`sessionq requeue --failed|--stalled`: requeue every failed (or stalled) job of p_queue and p_task (NULL: any) that entered that state within p_since seconds (NULL: ever), one row per job with what was done (see requeue_one). p_dry_run changes nothing.';

CREATE OR REPLACE FUNCTION sessionq.cancel_job(p_job bigint, p_abort boolean, p_by text, p_expect text DEFAULT NULL)
RETURNS TABLE (job_id bigint, previous_status text, status text, action text)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v sessionq.job_rows;
  v_after sessionq.job_rows;
BEGIN
  SELECT * INTO v FROM sessionq.job_rows j WHERE j.id = p_job FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM sessionq.fail('SQ404', format('job %s not found', p_job));
  END IF;
  IF p_expect IS NOT NULL AND v.status::text <> p_expect THEN
    PERFORM sessionq.fail('SQ409', format('job %s is %s now, no longer %s; nothing was changed', p_job, v.status,
                                         sessionq.clip(p_expect, 20)));
  END IF;
  IF v.status = 'doing' AND NOT p_abort THEN
    PERFORM sessionq.fail('SQ412', format('job %s is running; use --abort to ask its worker to abort it', p_job));
  END IF;
  IF v.status NOT IN ('todo', 'doing') THEN
    PERFORM sessionq.fail('SQ412', format('job %s is %s; only waiting or running jobs can be cancelled', p_job, v.status));
  END IF;
  PERFORM sessionq.cancel_or_abort_job(p_job, p_abort);
  SELECT * INTO v_after FROM sessionq.job_rows j WHERE j.id = p_job;
  INSERT INTO sessionq.job_actions (job_id, action, detail, actor)
  VALUES (p_job, CASE WHEN v_after.status = 'doing' THEN 'abort_requested' ELSE 'cancelled' END,
          format('%s -> %s', v.status, v_after.status), p_by);
  RETURN QUERY SELECT p_job, v.status::text, v_after.status::text,
                      CASE WHEN v_after.status = 'doing' THEN 'abort_requested' ELSE 'cancelled' END;
END $$;
COMMENT ON FUNCTION sessionq.cancel_job(bigint, boolean, text, text) IS
  '`sessionq jobs cancel ID [--abort]` (and the web console''s Cancel): a waiting job is cancelled; a running one only with p_abort, which asks its worker to abort it (cooperatively: the task is cancelled and may be retried). With p_expect, the job must still be in that status, else ABORTED and nothing changes. Recorded in job_actions.';

-- -- the reaper -----------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION sessionq.reap_stalled_jobs(p_stall_timeout double precision, p_max_attempts jsonb)
RETURNS TABLE (job_id bigint, queue_name text, task_name text, previous_status text, action text,
               covered_by bigint, detail text)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v sessionq.job_rows;
  v_max jsonb;
BEGIN
  FOR v IN
    SELECT j.* FROM sessionq.job_rows j
     WHERE j.id IN (SELECT s.job_id FROM sessionq.find_stalled_jobs(p_stall_timeout) s)
     ORDER BY j.id
     FOR UPDATE SKIP LOCKED
  LOOP
    v_max := coalesce(p_max_attempts, '{}'::jsonb) -> v.task_name::text;
    IF NOT v.abort_requested AND v_max IS NOT NULL AND jsonb_typeof(v_max) = 'number'
       AND v.attempts + 1 >= (v_max #>> '{}')::integer THEN
      -- the stalled attempt was its last one (or its task is never retried): it failed
      PERFORM sessionq.record_job_attempt(v.id, 'stalled', 'WorkerLost',
        format('worker %s stopped heartbeating while running this attempt; task %s allows no further attempt',
               coalesce((SELECT wi.name FROM sessionq.worker_info wi WHERE wi.worker_id = v.worker_id), v.worker_id::text, 'gone'),
               v.task_name));
      PERFORM sessionq.finish_job(v.id, 'failed');
      IF v.task_name = 'dispatch_turn' THEN
        -- a turn is never replayed (the Actor may have run part of it): its caller is told now
        PERFORM sessionq.fail_dispatch(s.id, s.dispatch_id, 'the worker running it stopped responding, and a turn is never replayed; send the message again', true)
           FROM sessionq.sessions s
          WHERE s.id = (v.args ->> 'session_id')::uuid AND s.dispatch_id IS NOT NULL;
      END IF;
      INSERT INTO sessionq.job_actions (job_id, action, detail, actor)
      VALUES (v.id, 'failed', format('stalled on worker %s; task %s allows no further attempt', v.worker_id, v.task_name),
              'reaper');
      RETURN QUERY SELECT v.id, v.queue_name::text, v.task_name::text, 'doing'::text, 'failed'::text, NULL::bigint,
                          format('stalled; task %s allows no further attempt', v.task_name);
    ELSE
      RETURN QUERY SELECT * FROM sessionq.requeue_one(v.id, 'reaper', p_stall_timeout, false, false);
    END IF;
  END LOOP;
END $$;
COMMENT ON FUNCTION sessionq.reap_stalled_jobs(double precision, jsonb) IS
  'The reaper''s job step: every stalled job (see find_stalled_jobs) is requeued (see requeue_one: a waiting job with the same queueing lock covers it), unless p_max_attempts (task name -> the number of attempts it may make; 0: never retried) says it had its last attempt: then it is marked failed, and a failed dispatch_turn ends its turn at once (fail_dispatch: the caller reads that the worker stopped and that the turn is not replayed). The stalled attempt is recorded in job_attempts (outcome stalled, WorkerLost). Rows locked by someone else are skipped.';

CREATE OR REPLACE FUNCTION sessionq.end_dead_dispatches(p_limit integer DEFAULT 100, p_orphan_grace double precision DEFAULT 10)
RETURNS TABLE (session_id uuid, dispatch_id uuid, reason text)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v record;
BEGIN
  FOR v IN
    SELECT s.id, s.dispatch_id,
           CASE WHEN s.dispatch_expires_at < clock_timestamp() THEN 'the dispatch expired'
                ELSE 'the dispatch job is gone (failed, aborted or cancelled)' END AS reason
      FROM sessionq.sessions s
     WHERE s.dispatch_id IS NOT NULL
       AND (s.dispatch_expires_at < clock_timestamp()
            OR sessionq.uuid_v7_time(s.dispatch_id) < clock_timestamp() - make_interval(secs => p_orphan_grace)
               AND NOT EXISTS (SELECT 1 FROM sessionq.job_rows j
                                WHERE j.status IN ('todo', 'doing') AND j.task_name = 'dispatch_turn'
                                  AND j.args ->> 'session_id' = s.id::text))
     ORDER BY s.dispatch_expires_at
     LIMIT p_limit
     FOR UPDATE OF s SKIP LOCKED
  LOOP
    PERFORM sessionq.fail_dispatch(v.id, v.dispatch_id, v.reason, true);
    RETURN QUERY SELECT v.id, v.dispatch_id, v.reason;
  END LOOP;
END $$;
COMMENT ON FUNCTION sessionq.end_dead_dispatches(integer, double precision) IS
  'The reaper''s dispatch step: end (fail_dispatch, issued) up to p_limit turn reservations that expired, or whose dispatch_turn job is no longer waiting or running p_orphan_grace seconds after admission (its worker was drained or died and it is not retried). Their unfinished task is abandoned and the caller told; the Session takes turns again.';

CREATE OR REPLACE FUNCTION sessionq.prune_operator_rows(p_stalled_worker_age double precision, p_keep double precision DEFAULT 604800)
RETURNS TABLE (workers_pruned integer, rows_deleted integer)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_workers integer := 0;
  v_rows integer := 0;
  n integer;
BEGIN
  IF p_stalled_worker_age IS NOT NULL THEN
    -- workers that died long ago; their stalled jobs were requeued meanwhile
    v_workers := sessionq.prune_dead_workers(p_stalled_worker_age);
  END IF;
  DELETE FROM sessionq.worker_info wi
   WHERE NOT EXISTS (SELECT 1 FROM sessionq.worker_heartbeats w WHERE w.worker_id = wi.worker_id);
  GET DIAGNOSTICS n = ROW_COUNT; v_rows := v_rows + n;
  DELETE FROM sessionq.worker_drains d WHERE d.requested_at < clock_timestamp() - make_interval(secs => p_keep);
  GET DIAGNOSTICS n = ROW_COUNT; v_rows := v_rows + n;
  DELETE FROM sessionq.job_actions a WHERE a.at < clock_timestamp() - make_interval(secs => p_keep);
  GET DIAGNOSTICS n = ROW_COUNT; v_rows := v_rows + n;
  RETURN QUERY SELECT v_workers, v_rows;
END $$;
COMMENT ON FUNCTION sessionq.prune_operator_rows(double precision, double precision) IS
  'The reaper''s housekeeping: remove procrastinate worker rows without a heartbeat for p_stalled_worker_age seconds (NULL: none), worker_info rows of workers that are gone, and drain requests and job actions older than p_keep seconds (default a week).';

-- -- job history, failures and queues --------------------------------------------------------------

-- the worker's name goes with its attempts (worker_info rows go when the worker exits)
CREATE OR REPLACE FUNCTION sessionq.name_attempt_worker() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  SELECT wi.name INTO NEW.worker_name FROM sessionq.worker_info wi WHERE wi.worker_id = NEW.worker_id;
  RETURN NEW;
END $$;
COMMENT ON FUNCTION sessionq.name_attempt_worker() IS
  'Trigger: a recorded job attempt (sessionq.job_attempts) gets its worker''s sessionq name from worker_info, so that it stays known after the worker exits.';

CREATE OR REPLACE TRIGGER sessionq_name_attempt_worker
  BEFORE INSERT ON sessionq.job_attempts
  FOR EACH ROW
  WHEN (NEW.worker_name IS NULL AND NEW.worker_id IS NOT NULL)
  EXECUTE FUNCTION sessionq.name_attempt_worker();
COMMENT ON TRIGGER sessionq_name_attempt_worker ON sessionq.job_attempts IS
  'sessionq: name the worker of a recorded attempt (see sessionq.name_attempt_worker).';

CREATE OR REPLACE VIEW sessionq.recent_failures AS
SELECT a.ended_at AS failed_at,
       a.job_id,
       a.task_name,
       a.queue_name,
       a.attempt,
       a.outcome,
       a.error_type,
       a.error_message,
       a.worker_name,
       a.started_at,
       j.status::text AS job_status,
       j.args,
       a.traceback
  FROM sessionq.job_attempts a
  LEFT JOIN sessionq.job_rows j ON j.id = a.job_id
 WHERE a.outcome <> 'succeeded'
 ORDER BY a.ended_at DESC, a.id DESC;
COMMENT ON VIEW sessionq.recent_failures IS
  'Every attempt that did not succeed, newest first: failed (no attempt left), retried (another attempt is scheduled), aborted, stalled (its worker died), with the error''s type and message. `SELECT * FROM sessionq.recent_failures LIMIT 20` answers "why did it fail?"; `sessionq jobs show ID` has the traceback.';
COMMENT ON COLUMN sessionq.recent_failures.outcome IS 'failed, retried, aborted or stalled (see sessionq.job_attempts.outcome).';
COMMENT ON COLUMN sessionq.recent_failures.job_status IS 'The job''s status now (todo: it will run again; failed: it will not, unless requeued); NULL when the job is gone.';

CREATE OR REPLACE VIEW sessionq.queues AS
WITH names AS (
  SELECT k.queue_name FROM sessionq.job_kinds k
  UNION SELECT 'periodic'
  UNION SELECT p.queue_name FROM sessionq.paused_queues p
  UNION SELECT d.queue_name FROM sessionq.queue_depth d
)
SELECT n.queue_name,
       p.queue_name IS NOT NULL AS paused,
       p.paused_at,
       p.paused_by,
       p.reason AS paused_reason,
       coalesce(sum(d.jobs) FILTER (WHERE d.status = 'todo'), 0)::bigint AS todo,
       coalesce(sum(d.due) FILTER (WHERE d.status = 'todo'), 0)::bigint AS due,
       coalesce(sum(d.jobs) FILTER (WHERE d.status = 'doing'), 0)::bigint AS doing,
       coalesce(sum(d.jobs) FILTER (WHERE d.status = 'failed'), 0)::bigint AS failed,
       max(d.oldest_due_age) AS oldest_due_age
  FROM names n
  LEFT JOIN sessionq.paused_queues p ON p.queue_name = n.queue_name
  LEFT JOIN sessionq.queue_depth d ON d.queue_name = n.queue_name
 GROUP BY n.queue_name, p.queue_name, p.paused_at, p.paused_by, p.reason;
COMMENT ON VIEW sessionq.queues IS
  'Every queue (sessionq''s, and any with jobs or paused) with whether it is paused (`sessionq queues pause|resume`) and its waiting, due, running and failed jobs.';
COMMENT ON COLUMN sessionq.queues.paused IS 'No worker fetches from it (jobs still queue up; running ones finish).';
COMMENT ON COLUMN sessionq.queues.todo IS 'Jobs waiting (todo), due now or scheduled for later.';
COMMENT ON COLUMN sessionq.queues.due IS 'Waiting jobs that may run now.';
COMMENT ON COLUMN sessionq.queues.failed IS 'Failed jobs kept for an operator (`sessionq requeue --failed`).';
COMMENT ON COLUMN sessionq.queues.oldest_due_age IS 'How long the oldest runnable job has waited (growing: no worker keeps up, or the queue is paused).';

CREATE OR REPLACE FUNCTION sessionq.pause_queue(p_queue text, p_by text, p_reason text DEFAULT '')
RETURNS TABLE (queue_name text, paused boolean, changed boolean)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_new boolean;
BEGIN
  IF p_queue IS NULL OR p_queue !~ '^[A-Za-z0-9_.:-]{1,40}$' THEN
    PERFORM sessionq.fail('SQ400', format('%s is not a queue name (1-40 letters, digits, _ . : -)',
                                         coalesce(sessionq.clip(p_queue, 40), 'nothing')));
  END IF;
  IF length(coalesce(p_reason, '')) > 500 THEN
    PERFORM sessionq.fail('SQ400', 'the reason is too long (at most 500 characters)');
  END IF;
  INSERT INTO sessionq.paused_queues (queue_name, paused_by, reason)
  VALUES (p_queue, coalesce(nullif(p_by, ''), current_user), coalesce(p_reason, ''))
  ON CONFLICT ON CONSTRAINT paused_queues_pkey DO NOTHING
  RETURNING true INTO v_new;
  IF v_new THEN
    INSERT INTO sessionq.job_actions (target, action, detail, actor)
    VALUES ('queue ' || p_queue, 'paused', coalesce(p_reason, ''), coalesce(nullif(p_by, ''), current_user));
  END IF;
  RETURN QUERY SELECT p_queue, true, coalesce(v_new, false);
END $$;
COMMENT ON FUNCTION sessionq.pause_queue(text, text, text) IS
  '`sessionq queues pause NAME`: no worker fetches from queue p_queue any more (sessionq.fetch_job), durably, until resume_queue; running jobs finish and new ones still queue up. changed is false when it was paused already. Recorded in job_actions. INVALID_ARGUMENT for a malformed name.';

CREATE OR REPLACE FUNCTION sessionq.resume_queue(p_queue text, p_by text)
RETURNS TABLE (queue_name text, paused boolean, changed boolean)
LANGUAGE plpgsql
SET search_path = sessionq, public
AS $$
DECLARE
  v_done boolean;
  v_job bigint;
BEGIN
  IF p_queue IS NULL OR p_queue !~ '^[A-Za-z0-9_.:-]{1,40}$' THEN
    PERFORM sessionq.fail('SQ400', format('%s is not a queue name (1-40 letters, digits, _ . : -)',
                                         coalesce(sessionq.clip(p_queue, 40), 'nothing')));
  END IF;
  DELETE FROM sessionq.paused_queues p WHERE p.queue_name = p_queue RETURNING true INTO v_done;
  IF v_done THEN
    INSERT INTO sessionq.job_actions (target, action, detail, actor)
    VALUES ('queue ' || p_queue, 'resumed', '', coalesce(nullif(p_by, ''), current_user));
    SELECT j.id INTO v_job FROM sessionq.job_rows j WHERE j.queue_name = p_queue AND j.status = 'todo' LIMIT 1;
    IF v_job IS NOT NULL THEN
      PERFORM sessionq.wake_workers(p_queue, v_job);  -- idle workers fetch now, not at their next poll
    END IF;
  END IF;
  RETURN QUERY SELECT p_queue, false, coalesce(v_done, false);
END $$;
COMMENT ON FUNCTION sessionq.resume_queue(text, text) IS
  '`sessionq queues resume NAME`: workers fetch from queue p_queue again (and are woken at once). changed is false when it was not paused. Recorded in job_actions.';

-- session_snapshots: the snapshots each live Session holds in the runtime (turn pins and checkpoints).
CREATE OR REPLACE VIEW sessionq.session_snapshots AS
SELECT s.id AS session_id,
       s.agent_namespace,
       s.agent_name,
       s.state,
       coalesce(p.pinned, 0) AS turn_pins,
       coalesce(p.pinning, 0) AS turn_pins_pending,
       coalesce(p.releasing, 0) AS turn_pins_releasing,
       coalesce(c.held, 0) AS checkpoints,
       coalesce(p.pinned, 0) + coalesce(p.pinning, 0) + coalesce(p.releasing, 0) + coalesce(c.held, 0) AS snapshots_held,
       p.oldest_task_seq AS oldest_pinned_turn,
       p.newest_task_seq AS newest_pinned_turn
  FROM sessionq.sessions s
  LEFT JOIN (
    SELECT t.session_id,
           count(*) FILTER (WHERE t.state = 'PINNED') AS pinned,
           count(*) FILTER (WHERE t.state = 'PINNING') AS pinning,
           count(*) FILTER (WHERE t.state = 'RELEASING') AS releasing,
           min(t.task_seq) FILTER (WHERE t.state = 'PINNED') AS oldest_task_seq,
           max(t.task_seq) FILTER (WHERE t.state = 'PINNED') AS newest_task_seq
      FROM sessionq.turn_snapshots t GROUP BY t.session_id
  ) p ON p.session_id = s.id
  LEFT JOIN (
    SELECT k.session_id, count(*) AS held FROM sessionq.checkpoints k WHERE k.state <> 'FAILED' GROUP BY k.session_id
  ) c ON c.session_id = s.id
 WHERE s.kind = 'session' AND s.state <> 'DELETED';
COMMENT ON VIEW sessionq.session_snapshots IS
  'Per live Session, the snapshots it holds in the runtime as tags: turn pins (sessions.turnSnapshots: the last N settled turns) and its checkpoints. At steady state turn_pins is min(N, settled turns).';
COMMENT ON COLUMN sessionq.session_snapshots.turn_pins IS 'PINNED turn pins (tags turn-<id>): turns that can be checkpointed or forked now.';
COMMENT ON COLUMN sessionq.session_snapshots.turn_pins_pending IS 'PINNING: a quiescence worker is making the tag.';
COMMENT ON COLUMN sessionq.session_snapshots.turn_pins_releasing IS 'RELEASING: older than the retention, a release_turn_snapshot job deletes the tag.';
COMMENT ON COLUMN sessionq.session_snapshots.checkpoints IS 'Checkpoints of the Session being created, ready or being deleted (each a tag; they outlive the Session).';
COMMENT ON COLUMN sessionq.session_snapshots.snapshots_held IS 'Tags the Session holds in the runtime now: the sum of the four counts.';
COMMENT ON COLUMN sessionq.session_snapshots.oldest_pinned_turn IS 'tasks.seq of the oldest retained turn (NULL: none).';
COMMENT ON COLUMN sessionq.session_snapshots.newest_pinned_turn IS 'tasks.seq of the newest retained turn (NULL: none).';

-- turn_queue: the turns waiting behind their Session's running turn (busy policy enqueue or interrupt).
CREATE OR REPLACE VIEW sessionq.turn_queue AS
SELECT q.session_id,
       row_number() OVER (PARTITION BY q.session_id ORDER BY q.position) AS place,
       q.task_id,
       q.policy,
       q.enqueued_by,
       q.enqueued_at,
       now() - q.enqueued_at AS waiting,
       coalesce(s.active_task_id, s.unsettled_task_id, s.dispatch_task_id) AS running_task_id
  FROM sessionq.queued_turns q
  LEFT JOIN sessionq.sessions s ON s.id = q.session_id;
COMMENT ON VIEW sessionq.turn_queue IS
  'Queued turns: messages sent with busy policy enqueue or interrupt while their Session''s turn ran, each with its SUBMITTED task, in the order they will run. They start one at a time as the running turn settles, fails or is canceled; a long wait means that turn is not ending (see sessions.stalledTurnTimeout).';
COMMENT ON COLUMN sessionq.turn_queue.place IS 'Its place in the Session''s queue: 1 runs next (an interrupting message goes ahead of the waiting ones).';
COMMENT ON COLUMN sessionq.turn_queue.waiting IS 'Time since it was queued.';
COMMENT ON COLUMN sessionq.turn_queue.running_task_id IS 'The task running (or dispatched, or finishing) ahead of it; NULL while a canceled turn''s Actor is being told.';
