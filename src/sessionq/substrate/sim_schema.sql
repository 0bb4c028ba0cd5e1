-- State of the simulated Substrate runtime (sessionq.substrate.simulator).
--
-- It lives in its own schema, outside the control plane's tables and transactions, and is shared by
-- every process connected to the database: API and worker processes see one runtime. Idempotent:
-- install_schema() runs this file under a transaction-level advisory lock on every install.
-- Names and keys use the "C" collation so keyset order matches byte (code point) order.

CREATE SCHEMA IF NOT EXISTS substrate_sim;
COMMENT ON SCHEMA substrate_sim IS
    'Simulated Substrate runtime (ateapi.Control) shared by all sessionq processes; not control-plane state.';

CREATE TABLE IF NOT EXISTS substrate_sim.templates (
    atespace    text COLLATE "C" NOT NULL,
    name        text COLLATE "C" NOT NULL,
    uid         text NOT NULL UNIQUE,
    image       text NOT NULL,
    version     bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (atespace, name)
);
COMMENT ON TABLE substrate_sim.templates IS
    'ActorTemplates (one per prepared revision), addressed as "<atespace>/<name>" by create_actor.';

CREATE TABLE IF NOT EXISTS substrate_sim.workers (
    name             text COLLATE "C" PRIMARY KEY,
    idx              integer NOT NULL UNIQUE CHECK (idx >= 0),
    atespace         text NOT NULL,
    ip               text NOT NULL,
    state            text NOT NULL DEFAULT 'WORKER_STATE_READY',
    holder_atespace  text,
    holder_name      text,
    holder_uid       text UNIQUE,
    CHECK ((holder_uid IS NULL) = (holder_name IS NULL) AND (holder_uid IS NULL) = (holder_atespace IS NULL))
);
COMMENT ON TABLE substrate_sim.workers IS
    'Fixed worker pool created by install_schema; holder_* names the Actor that holds the worker while it is '
    'RUNNING or PAUSED (kept in step with actors.worker in the same transaction).';

CREATE TABLE IF NOT EXISTS substrate_sim.actors (
    atespace    text COLLATE "C" NOT NULL,
    name        text COLLATE "C" NOT NULL,
    uid         text NOT NULL UNIQUE,
    template    text NOT NULL,
    state       text NOT NULL,
    worker      text UNIQUE REFERENCES substrate_sim.workers (name),
    version     bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    env         jsonb NOT NULL DEFAULT '{}'::jsonb,
    durable     jsonb,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (atespace, name),
    CHECK ((state IN ('ACTOR_STATE_RUNNING', 'ACTOR_STATE_PAUSED')) = (worker IS NOT NULL))
);
COMMENT ON TABLE substrate_sim.actors IS
    'Actors: server-assigned uid, version +1 per mutation, the worker held while RUNNING/PAUSED, the '
    'creation env and durable = the Actor''s durable directory /data (NULL until first materialised).';

CREATE TABLE IF NOT EXISTS substrate_sim.snapshots (
    actor_uid     text NOT NULL,
    atespace      text COLLATE "C" NOT NULL,
    actor_name    text COLLATE "C" NOT NULL,
    generation    integer NOT NULL CHECK (generation >= 1),
    fidelity      text NOT NULL,
    status        text NOT NULL,
    uri           text NOT NULL,
    durable       jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at  timestamptz,
    PRIMARY KEY (actor_uid, generation)
);
COMMENT ON TABLE substrate_sim.snapshots IS
    'Snapshots of an Actor by increasing generation, with a copy of its durable directory; deleted with '
    'the Actor unless a tag pins them (no foreign key: tagged snapshots outlive their Actor).';

CREATE TABLE IF NOT EXISTS substrate_sim.egress_policies (
    actor_uid   text PRIMARY KEY REFERENCES substrate_sim.actors (uid) ON DELETE CASCADE,
    atespace    text COLLATE "C" NOT NULL,
    actor_name  text COLLATE "C" NOT NULL,
    name        text NOT NULL DEFAULT 'default' CHECK (name = 'default'),
    rules       jsonb NOT NULL DEFAULT '[]'::jsonb,
    version     bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE substrate_sim.egress_policies IS
    'The single egress policy named default of an Actor; rules is a JSON list (an unordered allow-set).';

CREATE TABLE IF NOT EXISTS substrate_sim.tags (
    atespace             text COLLATE "C" NOT NULL,
    name                 text COLLATE "C" NOT NULL,
    actor_name           text NOT NULL,
    actor_uid            text NOT NULL,
    snapshot_generation  integer NOT NULL,
    fidelity             text NOT NULL,
    uri                  text NOT NULL,
    durable              jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (atespace, name)
);
COMMENT ON TABLE substrate_sim.tags IS
    'Tags pinning a copy of a suspended Actor''s snapshot (with its durable directory); create_actor(from_tag) '
    'seeds a new Actor from it.';

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
