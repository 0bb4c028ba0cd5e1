-- State of the process runtime (sessionq.runtime.process), whose Actors are OS processes on this
-- machine: what it adds to the stand-in core's tables and functions (runtime/stand_in/core.sql,
-- installed into this schema before this file: the schema, templates, workers, actors, snapshots,
-- tags, egress policies, fail, lock_actor).
--
-- Its own schema, outside the control plane's tables and transactions. One runtime server owns the
-- schema at a time (a session-level advisory lock held while it runs); the processes are its
-- children. Idempotent: install_schema() runs this file under a transaction-level advisory lock.
--
-- The transitions are the functions below; ProcessSubstrate calls one per step and does the process
-- and file work (start, signal, archive, restore) between them, with no transaction open. Errors are
-- raised with sessionq_process.fail (SQLSTATE PX001, the runtime Code name in DETAIL).

COMMENT ON SCHEMA sessionq_process IS
    'The process runtime (Actors are local OS processes): templates, actors, snapshots, tags, worker slots, egress policies.';

-- what an Actor runs: argv = command followed by args, with env
ALTER TABLE sessionq_process.templates ADD COLUMN IF NOT EXISTS command jsonb NOT NULL DEFAULT '[]'::jsonb;
ALTER TABLE sessionq_process.templates ADD COLUMN IF NOT EXISTS args jsonb NOT NULL DEFAULT '[]'::jsonb;
ALTER TABLE sessionq_process.templates ADD COLUMN IF NOT EXISTS env jsonb NOT NULL DEFAULT '{}'::jsonb;
COMMENT ON COLUMN sessionq_process.templates.command IS 'The start of the argv an Actor of the template runs.';
COMMENT ON COLUMN sessionq_process.templates.args IS 'The rest of the argv, after command.';
COMMENT ON COLUMN sessionq_process.templates.env IS 'The environment of the template''s Actors (under the Actor''s own).';

-- the process of an Actor (a worker is a process slot, held from RESUMING to SUSPENDING) and its crash
ALTER TABLE sessionq_process.actors ADD COLUMN IF NOT EXISTS server text;
ALTER TABLE sessionq_process.actors ADD COLUMN IF NOT EXISTS pid integer;
ALTER TABLE sessionq_process.actors ADD COLUMN IF NOT EXISTS pid_start bigint;
ALTER TABLE sessionq_process.actors ADD COLUMN IF NOT EXISTS port integer;
ALTER TABLE sessionq_process.actors ADD COLUMN IF NOT EXISTS last_generation integer NOT NULL DEFAULT 0;
ALTER TABLE sessionq_process.actors ADD COLUMN IF NOT EXISTS crash_exit_status integer;
ALTER TABLE sessionq_process.actors ADD COLUMN IF NOT EXISTS crash_message text;
COMMENT ON COLUMN sessionq_process.actors.server IS 'The runtime server (instance id) that started the Actor''s process.';
COMMENT ON COLUMN sessionq_process.actors.pid IS 'The Actor''s process (the leader of its process group).';
COMMENT ON COLUMN sessionq_process.actors.pid_start IS
    'The process''s start time in clock ticks, telling a reused pid apart.';
COMMENT ON COLUMN sessionq_process.actors.port IS 'The port of the Actor''s private A2A endpoint on 127.0.0.1.';
COMMENT ON COLUMN sessionq_process.actors.last_generation IS 'The last snapshot generation assigned.';
COMMENT ON COLUMN sessionq_process.actors.crash_exit_status IS 'The exit status of the process, when CRASHED.';
COMMENT ON COLUMN sessionq_process.actors.crash_message IS 'Why the Actor CRASHED (the tail of its stderr).';

-- a snapshot is a compressed archive of the durable directory: IN_PROGRESS until the archive is
-- renamed into place, then COMPLETED; only a COMPLETED one is ever restored
ALTER TABLE sessionq_process.snapshots ADD COLUMN IF NOT EXISTS path text NOT NULL;
ALTER TABLE sessionq_process.snapshots ADD COLUMN IF NOT EXISTS size_bytes bigint;
COMMENT ON COLUMN sessionq_process.snapshots.path IS 'The archive (its URI is file://<path>); empty while IN_PROGRESS.';
COMMENT ON COLUMN sessionq_process.snapshots.size_bytes IS 'The archive''s size.';

-- a tag holds its own copy of the snapshot's archive; create_actor(from_tag) makes a further copy
ALTER TABLE sessionq_process.tags ADD COLUMN IF NOT EXISTS uid text NOT NULL UNIQUE;
ALTER TABLE sessionq_process.tags ADD COLUMN IF NOT EXISTS snapshot_path text NOT NULL;
ALTER TABLE sessionq_process.tags ADD COLUMN IF NOT EXISTS path text NOT NULL;
COMMENT ON COLUMN sessionq_process.tags.uid IS 'The tag''s server-assigned uid.';
COMMENT ON COLUMN sessionq_process.tags.snapshot_path IS
    'The tagged snapshot''s archive, which names the snapshot (its URI is file://<snapshot_path>).';
COMMENT ON COLUMN sessionq_process.tags.path IS 'The tag''s own copy of the archive.';

COMMENT ON COLUMN sessionq_process.egress_policies.rules IS
    'The rules, stored and returned but NOT enforced: the process runtime isolates nothing.';

-- ------------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION sessionq_process.begin_resume(
  p_atespace text, p_name text, p_uid text, p_server text
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_row sessionq_process.actors;
  v_worker text;
  v_snapshot text;
BEGIN
  v_row := sessionq_process.lock_actor(p_atespace, p_name, p_uid);
  IF v_row.state = 'ACTOR_STATE_RUNNING' THEN
    RETURN jsonb_build_object('action', 'none');
  END IF;
  IF v_row.state = 'ACTOR_STATE_PAUSED' THEN
    RETURN jsonb_build_object('action', 'continue', 'pid', v_row.pid, 'server', v_row.server);
  END IF;
  IF v_row.state NOT IN ('ACTOR_STATE_SUSPENDED', 'ACTOR_STATE_CRASHED') THEN
    PERFORM sessionq_process.fail('FAILED_PRECONDITION',
      format('actor %s/%s cannot resume from %s', p_atespace, p_name, v_row.state));
  END IF;
  SELECT w.name INTO v_worker FROM sessionq_process.workers w
   WHERE w.holder_uid IS NULL ORDER BY w.idx LIMIT 1 FOR UPDATE SKIP LOCKED;
  IF NOT FOUND THEN
    PERFORM sessionq_process.fail('RESOURCE_EXHAUSTED',
      format('no free process slot to resume actor %s/%s (all slots hold running actors)', p_atespace, p_name));
  END IF;
  UPDATE sessionq_process.workers SET holder_atespace = p_atespace, holder_name = p_name, holder_uid = p_uid
   WHERE name = v_worker;
  SELECT s.path INTO v_snapshot FROM sessionq_process.snapshots s
   WHERE s.actor_uid = p_uid AND s.status = 'SNAPSHOT_STORAGE_STATUS_COMPLETED'
   ORDER BY s.generation DESC LIMIT 1;
  UPDATE sessionq_process.actors
     SET state = 'ACTOR_STATE_RESUMING', worker = v_worker, server = p_server, pid = NULL, pid_start = NULL,
         port = NULL, crash_exit_status = NULL, crash_message = NULL,
         version = version + 1, updated_at = clock_timestamp()
   WHERE uid = p_uid;
  RETURN jsonb_build_object('action', 'start', 'snapshot', v_snapshot, 'env', v_row.env,
    'template', (SELECT jsonb_build_object('command', t.command, 'args', t.args, 'env', t.env)
                   FROM sessionq_process.templates t
                  WHERE t.atespace = split_part(v_row.template, '/', 1)
                    AND t.name = split_part(v_row.template, '/', 2)));
END $$;
COMMENT ON FUNCTION sessionq_process.begin_resume(text, text, text, text) IS
    'Start resuming an Actor: RUNNING -> {"action":"none"}; PAUSED -> {"action":"continue", pid} (SIGCONT); '
    'SUSPENDED or CRASHED -> takes the lowest free slot (RESOURCE_EXHAUSTED when none), RESUMING, and returns '
    '{"action":"start", snapshot: the latest COMPLETED archive or null, env, template: {command, args, env}}.';

CREATE OR REPLACE FUNCTION sessionq_process.finish_resume(
  p_uid text, p_server text, p_pid integer, p_pid_start bigint, p_port integer
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq_process.actors
     SET state = 'ACTOR_STATE_RUNNING', pid = p_pid, pid_start = p_pid_start, port = p_port,
         version = version + 1, updated_at = clock_timestamp()
   WHERE uid = p_uid AND state = 'ACTOR_STATE_RESUMING' AND server = p_server;
  IF NOT FOUND THEN
    PERFORM sessionq_process.fail('ABORTED', format('actor %s is no longer resuming', p_uid));
  END IF;
END $$;
COMMENT ON FUNCTION sessionq_process.finish_resume(text, text, integer, bigint, integer) IS
    'A RESUMING Actor''s process started: RUNNING with its pid, start time and port; ABORTED if it is no longer '
    'RESUMING under this server.';

CREATE OR REPLACE FUNCTION sessionq_process.crash(
  p_uid text, p_pid integer, p_exit_status integer, p_message text
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq_process.actors
     SET state = 'ACTOR_STATE_CRASHED', worker = NULL, pid = NULL, pid_start = NULL, port = NULL,
         crash_exit_status = p_exit_status, crash_message = p_message,
         version = version + 1, updated_at = clock_timestamp()
   WHERE uid = p_uid
     AND state IN ('ACTOR_STATE_RESUMING', 'ACTOR_STATE_RUNNING', 'ACTOR_STATE_PAUSED', 'ACTOR_STATE_SUSPENDING')
     AND (p_pid IS NULL OR pid IS NULL OR pid = p_pid);
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM sessionq_process.release_worker(p_uid);
  -- a generation that was being written when the process went away never completes
  DELETE FROM sessionq_process.snapshots WHERE actor_uid = p_uid AND status = 'SNAPSHOT_STORAGE_STATUS_IN_PROGRESS';
  RETURN true;
END $$;
COMMENT ON FUNCTION sessionq_process.crash(text, integer, integer, text) IS
    'The Actor''s process ended on its own (or could not start): CRASHED with the exit status and message, its '
    'slot freed, an in-progress snapshot dropped. Only while it has a process, and (p_pid given) only for that '
    'process: false when nothing changed.';

CREATE OR REPLACE FUNCTION sessionq_process.begin_suspend(
  p_atespace text, p_name text, p_uid text, p_fidelity text
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_row sessionq_process.actors;
  v_generation integer;
BEGIN
  v_row := sessionq_process.lock_actor(p_atespace, p_name, p_uid);
  IF v_row.state = 'ACTOR_STATE_SUSPENDED' THEN
    RETURN jsonb_build_object('action', 'none');
  END IF;
  IF v_row.state NOT IN ('ACTOR_STATE_RUNNING', 'ACTOR_STATE_PAUSED', 'ACTOR_STATE_SUSPENDING') THEN
    PERFORM sessionq_process.fail('FAILED_PRECONDITION',
      format('actor %s/%s cannot suspend from %s', p_atespace, p_name, v_row.state));
  END IF;
  -- an interrupted suspend's generation never completes: a retry writes a new one
  DELETE FROM sessionq_process.snapshots WHERE actor_uid = p_uid AND status = 'SNAPSHOT_STORAGE_STATUS_IN_PROGRESS';
  v_generation := v_row.last_generation + 1;
  INSERT INTO sessionq_process.snapshots (actor_uid, atespace, actor_name, generation, fidelity, status, path)
    VALUES (p_uid, p_atespace, p_name, v_generation, p_fidelity, 'SNAPSHOT_STORAGE_STATUS_IN_PROGRESS', '');
  UPDATE sessionq_process.actors
     SET state = 'ACTOR_STATE_SUSPENDING', last_generation = v_generation,
         version = version + 1, updated_at = clock_timestamp()
   WHERE uid = p_uid;
  RETURN jsonb_build_object('action', 'stop', 'generation', v_generation, 'pid', v_row.pid,
                            'server', v_row.server, 'paused', v_row.state = 'ACTOR_STATE_PAUSED');
END $$;
COMMENT ON FUNCTION sessionq_process.begin_suspend(text, text, text, text) IS
    'Start suspending: SUSPENDED -> {"action":"none"} (idempotent); RUNNING, PAUSED or SUSPENDING (a retry) -> '
    'SUSPENDING with the next generation IN_PROGRESS: {"action":"stop", generation, pid, paused}.';

CREATE OR REPLACE FUNCTION sessionq_process.finish_suspend(
  p_uid text, p_generation integer, p_path text, p_size bigint, p_keep integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_dropped jsonb;
BEGIN
  UPDATE sessionq_process.snapshots
     SET status = 'SNAPSHOT_STORAGE_STATUS_COMPLETED', path = p_path, size_bytes = p_size,
         completed_at = clock_timestamp()
   WHERE actor_uid = p_uid AND generation = p_generation AND status = 'SNAPSHOT_STORAGE_STATUS_IN_PROGRESS';
  IF NOT FOUND THEN
    PERFORM sessionq_process.fail('ABORTED', format('snapshot generation %s of actor %s is no longer in progress',
                                                    p_generation, p_uid));
  END IF;
  PERFORM sessionq_process.release_worker(p_uid);
  UPDATE sessionq_process.actors
     SET state = 'ACTOR_STATE_SUSPENDED', worker = NULL, pid = NULL, pid_start = NULL, port = NULL,
         version = version + 1, updated_at = clock_timestamp()
   WHERE uid = p_uid;
  -- keep the newest p_keep completed generations; older archives are the caller's to remove
  WITH old AS (
    DELETE FROM sessionq_process.snapshots s
     WHERE s.actor_uid = p_uid AND s.status = 'SNAPSHOT_STORAGE_STATUS_COMPLETED'
       AND s.generation NOT IN (
         SELECT k.generation FROM sessionq_process.snapshots k
          WHERE k.actor_uid = p_uid AND k.status = 'SNAPSHOT_STORAGE_STATUS_COMPLETED'
          ORDER BY k.generation DESC LIMIT p_keep)
    RETURNING s.path)
  SELECT coalesce(jsonb_agg(path), '[]'::jsonb) INTO v_dropped FROM old;
  RETURN jsonb_build_object('dropped', v_dropped);
END $$;
COMMENT ON FUNCTION sessionq_process.finish_suspend(text, integer, text, bigint, integer) IS
    'The archive of generation p_generation is in place: COMPLETED, the Actor SUSPENDED, its slot freed; the '
    'completed generations older than the newest p_keep are forgotten, their paths returned for removal '
    '({"dropped": [...]}). Tags hold their own copies, so this never touches a tagged snapshot.';

CREATE OR REPLACE FUNCTION sessionq_process.begin_delete(
  p_atespace text, p_name text, p_uid text, p_any_state boolean
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_row sessionq_process.actors;
  v_paths jsonb;
BEGIN
  v_row := sessionq_process.lock_actor(p_atespace, p_name, p_uid);
  IF NOT p_any_state AND v_row.state NOT IN ('ACTOR_STATE_SUSPENDED', 'ACTOR_STATE_CRASHED') THEN
    PERFORM sessionq_process.fail('FAILED_PRECONDITION',
      format('actor %s/%s is %s; only SUSPENDED or CRASHED actors can be deleted', p_atespace, p_name, v_row.state));
  END IF;
  PERFORM sessionq_process.release_worker(p_uid);
  WITH gone AS (DELETE FROM sessionq_process.snapshots WHERE actor_uid = p_uid RETURNING path)
  SELECT coalesce(jsonb_agg(path), '[]'::jsonb) INTO v_paths FROM gone;
  DELETE FROM sessionq_process.egress_policies WHERE actor_uid = p_uid;
  DELETE FROM sessionq_process.actors WHERE uid = p_uid;
  RETURN jsonb_build_object('pid', v_row.pid, 'server', v_row.server, 'paths', v_paths);
END $$;
COMMENT ON FUNCTION sessionq_process.begin_delete(text, text, text, boolean) IS
    'Delete an Actor (SUSPENDED or CRASHED, any state with p_any_state): its rows, snapshots and egress policy; '
    'returns {pid, paths} for the caller to stop the process and remove the archives and the directory. Tags '
    'keep their own copies.';

CREATE OR REPLACE FUNCTION sessionq_process.pause(p_atespace text, p_name text, p_uid text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_row sessionq_process.actors;
BEGIN
  v_row := sessionq_process.lock_actor(p_atespace, p_name, p_uid);
  IF v_row.state = 'ACTOR_STATE_PAUSED' THEN
    RETURN jsonb_build_object('action', 'none');
  END IF;
  IF v_row.state <> 'ACTOR_STATE_RUNNING' THEN
    PERFORM sessionq_process.fail('FAILED_PRECONDITION',
      format('actor %s/%s cannot pause from %s', p_atespace, p_name, v_row.state));
  END IF;
  UPDATE sessionq_process.actors SET state = 'ACTOR_STATE_PAUSED', version = version + 1,
         updated_at = clock_timestamp() WHERE uid = p_uid;
  RETURN jsonb_build_object('action', 'stop', 'pid', v_row.pid);
END $$;
COMMENT ON FUNCTION sessionq_process.pause(text, text, text) IS
    'RUNNING -> PAUSED keeping the slot (the caller sends SIGSTOP to the process group): {"action":"stop", pid}; '
    'PAUSED -> {"action":"none"}.';

CREATE OR REPLACE FUNCTION sessionq_process.continue_paused(p_uid text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sessionq_process.actors SET state = 'ACTOR_STATE_RUNNING', version = version + 1,
         updated_at = clock_timestamp()
   WHERE uid = p_uid AND state = 'ACTOR_STATE_PAUSED';
  IF NOT FOUND THEN
    PERFORM sessionq_process.fail('ABORTED', format('actor %s is no longer paused', p_uid));
  END IF;
END $$;
COMMENT ON FUNCTION sessionq_process.continue_paused(text) IS
    'PAUSED -> RUNNING after the caller sent SIGCONT; ABORTED when it is no longer PAUSED.';

CREATE OR REPLACE FUNCTION sessionq_process.reconcile(p_server text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_lost jsonb;
BEGIN
  WITH lost AS (
    SELECT uid, pid, pid_start FROM sessionq_process.actors
     WHERE state IN ('ACTOR_STATE_RESUMING', 'ACTOR_STATE_RUNNING', 'ACTOR_STATE_PAUSED', 'ACTOR_STATE_SUSPENDING')
       AND server IS DISTINCT FROM p_server
       FOR UPDATE
  ), crashed AS (
    UPDATE sessionq_process.actors a
       SET state = 'ACTOR_STATE_CRASHED', worker = NULL, pid = NULL, pid_start = NULL, port = NULL,
           crash_exit_status = NULL,
           crash_message = 'the process runtime restarted; the actor''s process did not survive it',
           version = a.version + 1, updated_at = clock_timestamp()
      FROM lost WHERE a.uid = lost.uid
    RETURNING lost.uid, lost.pid, lost.pid_start
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object('uid', uid, 'pid', pid, 'pid_start', pid_start)), '[]'::jsonb)
    INTO v_lost FROM crashed;
  UPDATE sessionq_process.workers SET holder_atespace = NULL, holder_name = NULL, holder_uid = NULL
   WHERE holder_uid IS NOT NULL
     AND holder_uid NOT IN (SELECT uid FROM sessionq_process.actors WHERE worker IS NOT NULL);
  DELETE FROM sessionq_process.snapshots s
   WHERE s.status = 'SNAPSHOT_STORAGE_STATUS_IN_PROGRESS'
     AND EXISTS (SELECT 1 FROM sessionq_process.actors a WHERE a.uid = s.actor_uid AND a.state = 'ACTOR_STATE_CRASHED');
  RETURN v_lost;
END $$;
COMMENT ON FUNCTION sessionq_process.reconcile(text) IS
    'At the start of runtime server p_server: every Actor recorded with a process started by another server '
    '(RESUMING, RUNNING, PAUSED, SUSPENDING) becomes CRASHED (its process did not survive the restart), slots '
    'are freed, unfinished snapshots dropped; returns [{uid, pid, pid_start}] so the caller can kill any survivor.';
