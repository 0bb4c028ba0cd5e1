-- State of the simulated Substrate runtime (sessionq.runtime.simulator): what it adds to the stand-in
-- core's tables and functions (runtime/stand_in/core.sql, installed into this schema before this
-- file: the schema, templates, workers, actors, snapshots, tags, egress policies, fail, lock_actor).
--
-- It lives in its own schema, outside the control plane's tables and transactions, and is shared by
-- every process connected to the database: API and worker processes see one runtime. Idempotent:
-- install_schema() runs this file under a transaction-level advisory lock on every install.

COMMENT ON SCHEMA substrate_sim IS
    'Simulated Substrate runtime (ateapi.Control) shared by all sessionq processes; not control-plane state.';

-- a simulated worker is a pod of a Deployment: its atespace and its state
ALTER TABLE substrate_sim.workers ADD COLUMN IF NOT EXISTS atespace text NOT NULL;
ALTER TABLE substrate_sim.workers ADD COLUMN IF NOT EXISTS state text NOT NULL DEFAULT 'WORKER_STATE_READY';
COMMENT ON COLUMN substrate_sim.workers.atespace IS 'The atespace of the simulated worker pod.';
COMMENT ON COLUMN substrate_sim.workers.state IS 'The worker''s ateapi WorkerState (always READY).';
-- a resume takes the lowest free index: this keeps that one index step instead of a scan of every free worker
CREATE INDEX IF NOT EXISTS workers_free_idx ON substrate_sim.workers (idx) WHERE holder_uid IS NULL;

-- the Actor's durable directory /data, kept in the row
ALTER TABLE substrate_sim.actors ADD COLUMN IF NOT EXISTS durable jsonb;
COMMENT ON COLUMN substrate_sim.actors.durable IS
    'The Actor''s durable directory /data (file name -> content), NULL until first materialised.';

-- a snapshot is a copy of the durable directory, named by a sim:// URI
ALTER TABLE substrate_sim.snapshots ADD COLUMN IF NOT EXISTS uri text NOT NULL;
ALTER TABLE substrate_sim.snapshots ADD COLUMN IF NOT EXISTS durable jsonb NOT NULL DEFAULT '{}'::jsonb;
COMMENT ON COLUMN substrate_sim.snapshots.uri IS 'The snapshot''s URI (sim://snapshots/<actor uid>/<generation>).';
COMMENT ON COLUMN substrate_sim.snapshots.durable IS
    'A copy of the Actor''s durable directory; deleted with the Actor unless a tag pins the snapshot.';

-- a tag pins the snapshot's copy of the durable directory and the template it was taken under
ALTER TABLE substrate_sim.tags ADD COLUMN IF NOT EXISTS uri text NOT NULL;
ALTER TABLE substrate_sim.tags ADD COLUMN IF NOT EXISTS durable jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE substrate_sim.tags ADD COLUMN IF NOT EXISTS template_uid text NOT NULL DEFAULT '';
COMMENT ON COLUMN substrate_sim.tags.uri IS 'The URI of the tagged snapshot.';
COMMENT ON COLUMN substrate_sim.tags.durable IS 'The tagged snapshot''s durable directory, seeding create_actor(from_tag).';
COMMENT ON COLUMN substrate_sim.tags.template_uid IS
    'The template the tagged snapshot was taken under (ateapi TagStatus.actor_template_uid).';

-- the policy's name, always default
ALTER TABLE substrate_sim.egress_policies
    ADD COLUMN IF NOT EXISTS name text NOT NULL DEFAULT 'default' CHECK (name = 'default');
COMMENT ON COLUMN substrate_sim.egress_policies.name IS 'The policy''s name: an Actor has one, default.';

CREATE TABLE IF NOT EXISTS substrate_sim.faults (
    id             bigserial PRIMARY KEY,
    method         text NOT NULL,
    kind           text NOT NULL
        CHECK (kind IN ('delay', 'fail_before', 'lose_after', 'block', 'empty_page', 'stuck_token')),
    actor          text,
    code           text NOT NULL DEFAULT 'UNAVAILABLE',
    delay          double precision NOT NULL DEFAULT 0 CHECK (delay >= 0),
    remaining      integer CHECK (remaining >= 0),
    hits           integer NOT NULL DEFAULT 0,
    released       boolean NOT NULL DEFAULT false,
    blocked        integer NOT NULL DEFAULT 0,
    blocked_total  integer NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE substrate_sim.faults IS
    'Injected faults matched by Protocol method name and (optionally) actor name; remaining NULL = until '
    'cleared; blocked counts calls currently waiting on a block fault until released.';

CREATE TABLE IF NOT EXISTS substrate_sim.options (
    key         text PRIMARY KEY,
    value       jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE substrate_sim.options IS
    'Simulator switches, e.g. snapshot_pending = true keeps new snapshots IN_PROGRESS until complete_snapshots.';

CREATE TABLE IF NOT EXISTS substrate_sim.calls (
    id        bigserial PRIMARY KEY,
    method    text NOT NULL,
    atespace  text,
    name      text,
    uid       text,
    detail    jsonb,
    pid       integer NOT NULL,
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS calls_name_idx ON substrate_sim.calls (name);
COMMENT ON TABLE substrate_sim.calls IS
    'Log of every runtime mutation that took effect (one row per call), with the calling process id.';

-- ------------------------------------------------------------------------------------------------
-- Functions of the hot calls.
--
-- SimulatedSubstrate runs create_actor, get_actor, suspend_actor, resume_actor, delete_actor and
-- create_egress_policy as ONE statement each (one round trip, one autocommit transaction):
--   SELECT CASE WHEN t.faults IS NULL THEN substrate_sim.<call>(...) ELSE {"faults": t.faults} END
--     FROM substrate_sim.take_faults('<call>', <target>) AS t(faults)
-- so the call's faults are consumed first and, when one matched, nothing else happens; the caller
-- then honours them (waits, fail_before, lose_after) and applies the call with a plain SELECT of the
-- function (SimulatedSubstrate._call_fn). Each function does what the Python code did in its own
-- transaction (same locks, same checks in the same order, same messages), logs the mutation in
-- substrate_sim.calls with the caller's pid and returns its result as jsonb. Errors are raised with
-- substrate_sim.fail. Argument validation (names, template, fidelity, egress rules) and uid
-- generation stay in Python. State strings are the values of sessionq.substrate.base's enums.

-- take_faults: consume the faults of one call (the oldest matching wait fault and the oldest matching
-- outcome fault); used by every call of SimulatedSubstrate.
CREATE OR REPLACE FUNCTION substrate_sim.take_faults(p_method text, p_target text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_faults jsonb;
BEGIN
  -- the usual case: no live fault names the method; a look at the near-empty table, no locking query
  IF NOT EXISTS (SELECT FROM substrate_sim.faults
                  WHERE method = p_method AND (remaining IS NULL OR remaining > 0)) THEN
    RETURN NULL;
  END IF;
  WITH candidates AS (
    SELECT id, kind, code, delay, kind IN ('delay', 'block') AS is_wait
      FROM substrate_sim.faults
     WHERE method = p_method AND (actor IS NULL OR actor = p_target) AND (remaining IS NULL OR remaining > 0)
     ORDER BY id
       FOR UPDATE
  ), chosen AS (
    (SELECT * FROM candidates WHERE is_wait ORDER BY id LIMIT 1)
    UNION ALL
    (SELECT * FROM candidates WHERE NOT is_wait ORDER BY id LIMIT 1)
  ), consumed AS (
    UPDATE substrate_sim.faults f SET remaining = f.remaining - 1, hits = f.hits + 1
      FROM chosen WHERE f.id = chosen.id
  )
  SELECT jsonb_agg(jsonb_build_object('id', id, 'kind', kind, 'code', code, 'delay', delay) ORDER BY id)
    INTO v_faults
    FROM chosen;
  RETURN v_faults;
END $$;
COMMENT ON FUNCTION substrate_sim.take_faults(text, text) IS
    'Consume (remaining - 1, hits + 1, under FOR UPDATE) the oldest fault of a wait kind (delay, block) and the '
    'oldest of an outcome kind matching the method and target (faults naming no actor match any target); '
    'returns them as a jsonb array of {id, kind, code, delay} ordered by id, NULL when none matched.';

-- snapshot_size: what a simulated snapshot takes, deterministically: the bytes of the durable state it keeps.
CREATE OR REPLACE FUNCTION substrate_sim.snapshot_size(p_durable jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT octet_length(coalesce(p_durable, '{}'::jsonb)::text)::bigint $$;
COMMENT ON FUNCTION substrate_sim.snapshot_size(jsonb) IS
    'A simulated snapshot''s size in bytes: the length of the durable state it keeps, as jsonb text (deterministic).';

-- actor_json: an Actor as the simulator returns it, with its snapshots. PL/pgSQL, which keeps the
-- query's plan (an SQL function that reads a table is planned again on every call before PostgreSQL 18).
CREATE OR REPLACE FUNCTION substrate_sim.actor_json(p_atespace text, p_name text)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT jsonb_build_object(
           'atespace', a.atespace, 'name', a.name, 'uid', a.uid, 'template', a.template, 'state', a.state,
           'worker', a.worker, 'worker_ip', w.ip, 'version', a.version,
           'created_at', a.created_at, 'updated_at', a.updated_at,
           'snapshots', coalesce(
             (SELECT jsonb_agg(jsonb_build_object('generation', s.generation, 'fidelity', s.fidelity,
                                                  'status', s.status, 'uri', s.uri, 'created_at', s.created_at,
                                                  'size_bytes', substrate_sim.snapshot_size(s.durable))
                               ORDER BY s.generation)
                FROM substrate_sim.snapshots s WHERE s.actor_uid = a.uid),
             '[]'::jsonb))
    FROM substrate_sim.actors a LEFT JOIN substrate_sim.workers w ON w.name = a.worker
   WHERE a.atespace = p_atespace AND a.name = p_name);
END $$;
COMMENT ON FUNCTION substrate_sim.actor_json(text, text) IS
    'The Actor as jsonb: its columns but env and durable, worker_ip from its worker, and snapshots (generation, '
    'fidelity, status, uri, created_at, size_bytes) ascending by generation; NULL when there is no such Actor.';

-- release_worker (one argument): runtime/stand_in/core.sql; a schema installed before the core had it
-- holds a two-argument form, dropped here.
DROP FUNCTION IF EXISTS substrate_sim.release_worker(text, text);

-- create_actor: create a SUSPENDED Actor from a template, seeded from a tag's snapshot when p_from_tag is set.
CREATE OR REPLACE FUNCTION substrate_sim.create_actor(
  p_atespace text, p_name text, p_template text, p_from_tag text, p_env jsonb,
  p_uid text, p_pid integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_tag substrate_sim.tags;
BEGIN
  -- p_template is '<atespace>/<name>' with exactly one slash (checked by the caller)
  PERFORM 1 FROM substrate_sim.templates
    WHERE atespace = split_part(p_template, '/', 1) AND name = split_part(p_template, '/', 2)
    FOR KEY SHARE;
  IF NOT FOUND THEN
    PERFORM substrate_sim.fail('NOT_FOUND',
      format('actor template %s not found (creating actor %s/%s)', p_template, p_atespace, p_name));
  END IF;
  IF p_from_tag IS NOT NULL THEN
    SELECT * INTO v_tag FROM substrate_sim.tags WHERE atespace = p_atespace AND name = p_from_tag FOR KEY SHARE;
    IF NOT FOUND THEN
      PERFORM substrate_sim.fail('NOT_FOUND',
        format('tag %s/%s not found (creating actor %s/%s)', p_atespace, p_from_tag, p_atespace, p_name));
    END IF;
  END IF;
  INSERT INTO substrate_sim.actors (atespace, name, uid, template, state, env, durable)
    VALUES (p_atespace, p_name, p_uid, p_template, 'ACTOR_STATE_SUSPENDED', p_env, v_tag.durable)
    ON CONFLICT (atespace, name) DO NOTHING;
  IF NOT FOUND THEN
    PERFORM substrate_sim.fail('ALREADY_EXISTS', format('actor %s/%s already exists', p_atespace, p_name));
  END IF;
  IF p_from_tag IS NOT NULL THEN
    INSERT INTO substrate_sim.snapshots (actor_uid, atespace, actor_name, generation, fidelity, status, uri,
                                         durable, completed_at)
      VALUES (p_uid, p_atespace, p_name, 1, v_tag.fidelity, 'SNAPSHOT_STORAGE_STATUS_COMPLETED',
              format('sim://snapshots/%s/1', p_uid), v_tag.durable, clock_timestamp());
  END IF;
  INSERT INTO substrate_sim.calls (method, atespace, name, uid, detail, pid)
    VALUES ('create_actor', p_atespace, p_name, p_uid,
            jsonb_build_object('template', p_template, 'from_tag', p_from_tag), p_pid);
  RETURN jsonb_build_object('actor', substrate_sim.actor_json(p_atespace, p_name));
END $$;
COMMENT ON FUNCTION substrate_sim.create_actor(text, text, text, text, jsonb, text, integer) IS
    'SimulatedSubstrate.create_actor (its faults already taken by the caller): {"actor": ...}.';

-- get_actor: read an Actor.
CREATE OR REPLACE FUNCTION substrate_sim.get_actor(p_atespace text, p_name text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_actor jsonb;
BEGIN
  v_actor := substrate_sim.actor_json(p_atespace, p_name);
  IF v_actor IS NULL THEN
    PERFORM substrate_sim.fail('NOT_FOUND', format('actor %s/%s not found', p_atespace, p_name));
  END IF;
  RETURN jsonb_build_object('actor', v_actor);
END $$;
COMMENT ON FUNCTION substrate_sim.get_actor(text, text) IS
    'SimulatedSubstrate.get_actor (its faults already taken by the caller): {"actor": ...}.';

-- resume_actor: put an Actor onto a worker (the lowest free index below p_pool_size) and make it RUNNING.
CREATE OR REPLACE FUNCTION substrate_sim.resume_actor(
  p_atespace text, p_name text, p_uid text, p_pool_size integer, p_pid integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_row substrate_sim.actors;
  v_worker text;
  v_restored jsonb := 'null'::jsonb;
BEGIN
  v_row := substrate_sim.lock_actor(p_atespace, p_name, p_uid);
  p_uid := v_row.uid;  -- a caller without a UID precondition (a plain ateapi client) acts on this Actor
  IF v_row.state = 'ACTOR_STATE_RUNNING' THEN
    RETURN jsonb_build_object('actor', substrate_sim.actor_json(p_atespace, p_name), 'changed', false);
  END IF;
  IF v_row.state NOT IN ('ACTOR_STATE_SUSPENDED', 'ACTOR_STATE_PAUSED', 'ACTOR_STATE_CRASHED') THEN
    PERFORM substrate_sim.fail('FAILED_PRECONDITION',
      format('actor %s/%s cannot resume from %s', p_atespace, p_name, v_row.state));
  END IF;
  v_worker := v_row.worker;
  IF v_worker IS NULL THEN
    SELECT w.name INTO v_worker FROM substrate_sim.workers w
     WHERE w.holder_uid IS NULL AND w.idx < p_pool_size
     ORDER BY w.idx LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
      PERFORM substrate_sim.fail('RESOURCE_EXHAUSTED',
        format('no free worker to resume actor %s/%s', p_atespace, p_name));
    END IF;
    UPDATE substrate_sim.workers SET holder_atespace = p_atespace, holder_name = p_name, holder_uid = p_uid
     WHERE name = v_worker;
  END IF;
  IF v_row.durable IS NULL THEN
    -- the durable directory comes back from the latest completed snapshot (empty without one)
    SELECT s.durable INTO v_restored FROM substrate_sim.snapshots s
     WHERE s.actor_uid = p_uid AND s.status = 'SNAPSHOT_STORAGE_STATUS_COMPLETED'
     ORDER BY s.generation DESC LIMIT 1;
    IF NOT FOUND THEN
      v_restored := '{}'::jsonb;
    END IF;
  END IF;
  UPDATE substrate_sim.actors
     SET state = 'ACTOR_STATE_RUNNING', worker = v_worker, durable = coalesce(durable, v_restored),
         version = version + 1, updated_at = clock_timestamp()
   WHERE uid = p_uid;
  INSERT INTO substrate_sim.calls (method, atespace, name, uid, detail, pid)
    VALUES ('resume_actor', p_atespace, p_name, p_uid,
            jsonb_build_object('from', v_row.state, 'worker', v_worker), p_pid);
  RETURN jsonb_build_object('actor', substrate_sim.actor_json(p_atespace, p_name), 'changed', true);
END $$;
COMMENT ON FUNCTION substrate_sim.resume_actor(text, text, text, integer, integer) IS
    'SimulatedSubstrate.resume_actor (its faults already taken by the caller): {"actor": ..., "changed": false when it was already RUNNING}.';

-- suspend_actor: release the Actor's worker and write a snapshot (IN_PROGRESS while the option
-- snapshot_pending is true) holding a copy of its durable directory.
CREATE OR REPLACE FUNCTION substrate_sim.suspend_actor(
  p_atespace text, p_name text, p_uid text, p_fidelity text, p_pid integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_row substrate_sim.actors;
  v_generation integer;
  v_pending boolean;
BEGIN
  v_row := substrate_sim.lock_actor(p_atespace, p_name, p_uid);
  p_uid := v_row.uid;  -- a caller without a UID precondition (a plain ateapi client) acts on this Actor
  IF v_row.state = 'ACTOR_STATE_SUSPENDED' THEN
    RETURN jsonb_build_object('actor', substrate_sim.actor_json(p_atespace, p_name));
  END IF;
  IF v_row.state NOT IN ('ACTOR_STATE_RUNNING', 'ACTOR_STATE_PAUSED') THEN
    PERFORM substrate_sim.fail('FAILED_PRECONDITION',
      format('actor %s/%s cannot suspend from %s', p_atespace, p_name, v_row.state));
  END IF;
  PERFORM substrate_sim.release_worker(v_row.uid);
  SELECT coalesce(max(s.generation), 0) + 1 INTO v_generation
    FROM substrate_sim.snapshots s WHERE s.actor_uid = p_uid;
  v_pending := coalesce(
    (SELECT o.value = 'true'::jsonb FROM substrate_sim.options o WHERE o.key = 'snapshot_pending'), false);
  INSERT INTO substrate_sim.snapshots (actor_uid, atespace, actor_name, generation, fidelity, status, uri,
                                       durable, completed_at)
    VALUES (p_uid, p_atespace, p_name, v_generation, p_fidelity,
            CASE WHEN v_pending THEN 'SNAPSHOT_STORAGE_STATUS_IN_PROGRESS'
                 ELSE 'SNAPSHOT_STORAGE_STATUS_COMPLETED' END,
            format('sim://snapshots/%s/%s', p_uid, v_generation),
            CASE WHEN v_row.durable IS NULL OR v_row.durable = 'null'::jsonb THEN '{}'::jsonb
                 ELSE v_row.durable END,
            CASE WHEN v_pending THEN NULL ELSE clock_timestamp() END);
  UPDATE substrate_sim.actors
     SET state = 'ACTOR_STATE_SUSPENDED', worker = NULL, version = version + 1, updated_at = clock_timestamp()
   WHERE uid = p_uid;
  INSERT INTO substrate_sim.calls (method, atespace, name, uid, detail, pid)
    VALUES ('suspend_actor', p_atespace, p_name, p_uid,
            jsonb_build_object('from', v_row.state, 'generation', v_generation, 'fidelity', p_fidelity,
                               'size_bytes', (SELECT substrate_sim.snapshot_size(s.durable) FROM substrate_sim.snapshots s
                                               WHERE s.actor_uid = p_uid AND s.generation = v_generation)), p_pid);
  RETURN jsonb_build_object('actor', substrate_sim.actor_json(p_atespace, p_name));
END $$;
COMMENT ON FUNCTION substrate_sim.suspend_actor(text, text, text, text, integer) IS
    'SimulatedSubstrate.suspend_actor (its faults already taken by the caller; p_fidelity already validated): {"actor": ...}.';

-- delete_actor: delete a SUSPENDED or CRASHED Actor (any state with p_any_state), its egress policy
-- and the snapshots no tag pins.
CREATE OR REPLACE FUNCTION substrate_sim.delete_actor(
  p_atespace text, p_name text, p_uid text, p_any_state boolean, p_pid integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_row substrate_sim.actors;
BEGIN
  v_row := substrate_sim.lock_actor(p_atespace, p_name, p_uid);
  p_uid := v_row.uid;  -- a caller without a UID precondition (a plain ateapi client) acts on this Actor
  IF NOT p_any_state AND v_row.state NOT IN ('ACTOR_STATE_SUSPENDED', 'ACTOR_STATE_CRASHED') THEN
    PERFORM substrate_sim.fail('FAILED_PRECONDITION',
      format('actor %s/%s is %s; only SUSPENDED or CRASHED actors can be deleted', p_atespace, p_name, v_row.state));
  END IF;
  PERFORM substrate_sim.release_worker(v_row.uid);
  DELETE FROM substrate_sim.egress_policies WHERE actor_uid = p_uid;
  DELETE FROM substrate_sim.snapshots s WHERE s.actor_uid = p_uid AND NOT EXISTS (
    SELECT 1 FROM substrate_sim.tags t WHERE t.actor_uid = s.actor_uid AND t.snapshot_generation = s.generation);
  DELETE FROM substrate_sim.actors WHERE uid = p_uid;
  INSERT INTO substrate_sim.calls (method, atespace, name, uid, detail, pid)
    VALUES ('delete_actor', p_atespace, p_name, p_uid, jsonb_build_object('from', v_row.state), p_pid);
  RETURN '{}'::jsonb;
END $$;
COMMENT ON FUNCTION substrate_sim.delete_actor(text, text, text, boolean, integer) IS
    'SimulatedSubstrate.delete_actor (its faults already taken by the caller): {}.';

-- create_egress_policy: create the Actor's egress policy default with canonical rules.
CREATE OR REPLACE FUNCTION substrate_sim.create_egress_policy(
  p_atespace text, p_actor text, p_uid text, p_rules jsonb, p_pid integer
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_policy jsonb;
BEGIN
  PERFORM substrate_sim.lock_actor(p_atespace, p_actor, p_uid);
  INSERT INTO substrate_sim.egress_policies (actor_uid, atespace, actor_name, rules)
    VALUES (p_uid, p_atespace, p_actor, p_rules)
    ON CONFLICT (actor_uid) DO NOTHING
    RETURNING jsonb_build_object('actor_uid', actor_uid, 'rules', rules, 'version', version) INTO v_policy;
  IF NOT FOUND THEN
    PERFORM substrate_sim.fail('ALREADY_EXISTS',
      format('egress policy default of actor %s/%s already exists', p_atespace, p_actor));
  END IF;
  INSERT INTO substrate_sim.calls (method, atespace, name, uid, detail, pid)
    VALUES ('create_egress_policy', p_atespace, p_actor, p_uid, jsonb_build_object('rules', p_rules), p_pid);
  RETURN jsonb_build_object('policy', v_policy);
END $$;
COMMENT ON FUNCTION substrate_sim.create_egress_policy(text, text, text, jsonb, integer) IS
    'SimulatedSubstrate.create_egress_policy (its faults already taken by the caller; p_rules already canonical): {"policy": {actor_uid, rules, version}}.';

CREATE TABLE IF NOT EXISTS substrate_sim.turn_cancels (
    actor_uid   text NOT NULL,
    task_id     text NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (actor_uid, task_id)
);
COMMENT ON TABLE substrate_sim.turn_cancels IS
    'Cancel requests the simulated Actors received (cancel_turn): a turn of that task stops at its next check, without further task writes.';
