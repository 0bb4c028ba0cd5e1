-- The tables and functions both stand-in runtimes define the same way, installed into each runtime's
-- schema before its own schema.sql (database.install_schema): the schema; the core columns of its
-- templates, workers, actors, snapshots, tags and egress policies; fail, lock_actor and
-- release_worker. A runtime's schema.sql adds its own columns (ALTER TABLE ... ADD COLUMN IF NOT
-- EXISTS, each with its COMMENT ON COLUMN), tables and functions.
--
-- This text is a format string (psycopg.sql): {schema} is the schema (substrate_sim,
-- sessionq_process), {fail_sqlstate} the SQLSTATE its fail raises (SX001, PX001), {worker_states}
-- the Actor states in which an Actor holds a worker; a literal brace is doubled ('{{}}'::jsonb).
-- Idempotent. Names and keys use the "C" collation so keyset order matches byte (code point) order.

CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {schema}.templates (
    atespace    text COLLATE "C" NOT NULL,
    name        text COLLATE "C" NOT NULL,
    uid         text NOT NULL UNIQUE,
    image       text NOT NULL,
    version     bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (atespace, name)
);
COMMENT ON TABLE {schema}.templates IS
    'ActorTemplates (one per prepared revision), addressed as "<atespace>/<name>" by create_actor.';

CREATE TABLE IF NOT EXISTS {schema}.workers (
    name             text COLLATE "C" PRIMARY KEY,
    idx              integer NOT NULL UNIQUE CHECK (idx >= 0),
    ip               text NOT NULL,
    holder_atespace  text,
    holder_name      text,
    holder_uid       text UNIQUE,
    CHECK ((holder_uid IS NULL) = (holder_name IS NULL) AND (holder_uid IS NULL) = (holder_atespace IS NULL))
);
COMMENT ON TABLE {schema}.workers IS
    'The fixed worker pool (its rows created by install_schema): holder_* names the Actor that holds the worker '
    'while it is in a state that holds one, kept in step with actors.worker in the same transaction.';

CREATE TABLE IF NOT EXISTS {schema}.actors (
    atespace    text COLLATE "C" NOT NULL,
    name        text COLLATE "C" NOT NULL,
    uid         text NOT NULL UNIQUE,
    template    text NOT NULL,
    state       text NOT NULL,
    worker      text UNIQUE REFERENCES {schema}.workers (name),
    version     bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    env         jsonb NOT NULL DEFAULT '{{}}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (atespace, name),
    CHECK ((state IN ({worker_states})) = (worker IS NOT NULL))
);
COMMENT ON TABLE {schema}.actors IS
    'Actors: server-assigned uid, version +1 per mutation, the creation env, and the worker held while in a '
    'state that holds one.';

CREATE TABLE IF NOT EXISTS {schema}.snapshots (
    actor_uid     text NOT NULL,
    atespace      text COLLATE "C" NOT NULL,
    actor_name    text COLLATE "C" NOT NULL,
    generation    integer NOT NULL CHECK (generation >= 1),
    fidelity      text NOT NULL,
    status        text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at  timestamptz,
    PRIMARY KEY (actor_uid, generation)
);
COMMENT ON TABLE {schema}.snapshots IS
    'Snapshots of an Actor''s durable directory by increasing generation (no foreign key to the Actor: what a '
    'tag pins outlives it).';

CREATE TABLE IF NOT EXISTS {schema}.tags (
    atespace             text COLLATE "C" NOT NULL,
    name                 text COLLATE "C" NOT NULL,
    actor_name           text NOT NULL,
    actor_uid            text NOT NULL,
    snapshot_generation  integer NOT NULL,
    fidelity             text NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (atespace, name)
);
COMMENT ON TABLE {schema}.tags IS
    'Tags pinning a copy of a suspended Actor''s snapshot; create_actor(from_tag) seeds a new Actor from it, '
    'and deleting the Actor never loses it.';

CREATE TABLE IF NOT EXISTS {schema}.egress_policies (
    actor_uid   text PRIMARY KEY REFERENCES {schema}.actors (uid) ON DELETE CASCADE,
    atespace    text COLLATE "C" NOT NULL,
    actor_name  text COLLATE "C" NOT NULL,
    rules       jsonb NOT NULL DEFAULT '[]'::jsonb,
    version     bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE {schema}.egress_policies IS
    'The single egress policy named default of an Actor; rules is a JSON list (an unordered allow-set).';

CREATE OR REPLACE FUNCTION {schema}.fail(p_code text, p_message text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = {fail_sqlstate}, MESSAGE = p_message, DETAIL = p_code;
END $$;
COMMENT ON FUNCTION {schema}.fail(text, text) IS
    'Raise a runtime error: the schema''s SQLSTATE (substrate_sim SX001, sessionq_process PX001), the message, and '
    'the runtime Code name (e.g. NOT_FOUND) in DETAIL; the runtime turns it into SubstrateError(Code(detail), message).';

CREATE OR REPLACE FUNCTION {schema}.lock_actor(p_atespace text, p_name text, p_uid text)
RETURNS {schema}.actors LANGUAGE plpgsql AS $$
DECLARE
  v_row {schema}.actors;
BEGIN
  SELECT * INTO v_row FROM {schema}.actors WHERE atespace = p_atespace AND name = p_name FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM {schema}.fail('NOT_FOUND', format('actor %s/%s not found', p_atespace, p_name));
  END IF;
  IF p_uid IS NOT NULL AND v_row.uid <> p_uid THEN
    PERFORM {schema}.fail('FAILED_PRECONDITION',
      format('actor uid mismatch for %s/%s: expected %s, found %s', p_atespace, p_name, p_uid, v_row.uid));
  END IF;
  RETURN v_row;
END $$;
COMMENT ON FUNCTION {schema}.lock_actor(text, text, text) IS
    'Lock (FOR UPDATE) and return the Actor row; NOT_FOUND if missing, FAILED_PRECONDITION if p_uid is given and differs.';

CREATE OR REPLACE FUNCTION {schema}.release_worker(p_uid text)
RETURNS void LANGUAGE sql AS $$
  UPDATE {schema}.workers SET holder_atespace = NULL, holder_name = NULL, holder_uid = NULL
   WHERE holder_uid = p_uid
$$;
COMMENT ON FUNCTION {schema}.release_worker(text) IS
    'Free the worker Actor p_uid holds, if any (the caller clears actors.worker in the same transaction).';
