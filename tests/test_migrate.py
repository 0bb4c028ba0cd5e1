"""`sessionq migrate`: Alembic revisions applying procrastinate's and sessionq's schema, idempotent."""

import asyncio

import psycopg
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc
from psycopg.types.json import Jsonb
from sessionq.cli.main import main

from sessionq.db import migrate


def test_migrate_is_idempotent(empty_database_url):
    runner = CliRunner()
    first = runner.invoke(main, ["migrate", "--database-url", empty_database_url])
    assert first.exit_code == 0, first.output
    assert f"database at {migrate.head()} (was empty)" in first.output
    again = runner.invoke(main, ["migrate", "--database-url", empty_database_url])
    assert again.exit_code == 0 and "(already current)" in again.output
    with psycopg.connect(empty_database_url) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT schemaname || '.' || tablename FROM pg_tables WHERE schemaname IN ('public', 'sessionq', 'substrate_sim')")}
        undocumented = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'sessionq' AND c.relkind IN ('r', 'v') AND obj_description(c.oid, 'pg_class') IS NULL").fetchall()
        functions = conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'sessionq' AND obj_description(p.oid, 'pg_proc') IS NULL").fetchall()
    assert {"public.procrastinate_jobs", "sessionq.sessions", "sessionq.tasks", "sessionq.checkpoints"} <= tables
    assert undocumented == []  # every table and view explains itself in \\d+
    assert functions == []  # and every procedure in \df+


OLD_ACCESS = """
CREATE OR REPLACE FUNCTION sessionq.access(
  p_session sessionq.sessions, p_caller text, p_share_hash text, p_of text DEFAULT 'session'
) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN p_session.id IS NULL OR p_session.state = 'DELETED' OR p_session.kind IS DISTINCT FROM p_of THEN NULL
    WHEN p_session.creator = p_caller THEN 'owner'
    ELSE (SELECT max(sh.permission) FROM sessionq.session_shares sh
           WHERE sh.session_id = p_session.id AND sh.token_hash = p_share_hash
             AND (sh.expires_at IS NULL OR sh.expires_at > clock_timestamp()))
  END
$$"""


def test_a_database_made_before_the_coalesced_reads_gets_them(empty_database_url):
    """Revision 0005 brings a database at 0004 up to date: GetSession's batch reads exist after it,
    and the access rule is the inlinable one (share_permission)."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    reads = ("SELECT count(*) FROM pg_proc WHERE proname IN ('get_sessions', 'get_session_views', 'share_permission')"
             " AND pronamespace = 'sessionq'::regnamespace")
    access = "SELECT prosrc FROM pg_proc WHERE proname = 'access' AND pronamespace = 'sessionq'::regnamespace"
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        # what a database made by the code of revision 0004 had: none of the three, access's subquery
        conn.execute("DROP FUNCTION sessionq.get_sessions(uuid[], text[], text[], text[])")
        conn.execute("DROP FUNCTION sessionq.get_session_views(uuid[], text[], text[], text[])")
        conn.execute(OLD_ACCESS)
        conn.execute("DROP FUNCTION sessionq.share_permission(uuid, text)")
        conn.execute("DROP TABLE sessionq.schema_installed")  # made before installs were recorded
        assert conn.execute(reads).fetchone() == (0,)
    command.stamp(migrate.alembic_config(empty_database_url), "0004_suspend_after_cancel_told")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute(reads).fetchone() == (3,)
        source = conn.execute(access).fetchone()
        assert source is not None and "share_permission" in source[0] and "session_shares" not in source[0]


def test_revision_0006_brings_the_list_page_read_to_an_older_database(empty_database_url):
    """Revision 0006 gives a database at 0005 ListSessions' page read (list_session_views)."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    exists = ("SELECT count(*) FROM pg_proc WHERE proname IN ('list_session_views', 'session_page')"
              " AND pronamespace = 'sessionq'::regnamespace")
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        # what a database made by the code of revision 0005 had: neither function, list_sessions its own page
        conn.execute("DROP FUNCTION sessionq.list_session_views(text, boolean, text, text, uuid, integer, text)")
        conn.execute("DROP FUNCTION sessionq.list_sessions(text, boolean, text, text, uuid, integer, text)")
        conn.execute("DROP FUNCTION sessionq.session_page(text, boolean, text, text, uuid, integer, text)")
        conn.execute("DROP TABLE sessionq.schema_installed")  # made before installs were recorded
        assert conn.execute(exists).fetchone() == (0,)
    command.stamp(migrate.alembic_config(empty_database_url), "0005_coalesced_session_reads")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute(exists).fetchone() == (2,)
        rows = conn.execute("SELECT * FROM sessionq.list_session_views('nobody', false, NULL, NULL, NULL, 5)").fetchall()
        assert rows == []
        listed = conn.execute("SELECT count(*) FROM sessionq.list_sessions('nobody', false, NULL, NULL, NULL, 5)")
        assert listed.fetchone() == (0,)


def test_revision_0008_moves_push_deliveries_to_their_own_queue(empty_database_url):
    """Revision 0008 gives a database at 0007 the queue `push` for deliver_push, and moves its
    waiting jobs there; other jobs stay where they are."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        # what a database made by the code of revision 0007 had: deliver_push in a2a, no move_waiting_jobs
        conn.execute("UPDATE sessionq.job_kinds SET queue_name = 'a2a' WHERE task_name = 'deliver_push'")
        conn.execute("DROP FUNCTION sessionq.move_waiting_jobs()")
        conn.execute("UPDATE sessionq.schema_installed SET revision = '0007_schema_installed'")
        conn.execute("SELECT sessionq.defer('deliver_push', 't1', '{\"task_id\": \"t1\"}')")
        conn.execute("SELECT sessionq.defer('cancel_task', 't1', '{\"task_id\": \"t1\"}')")
    command.stamp(migrate.alembic_config(empty_database_url), "0007_schema_installed")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        kinds = conn.execute("SELECT task_name, queue_name FROM sessionq.job_kinds"
                             " WHERE task_name IN ('deliver_push', 'cancel_task') ORDER BY 1").fetchall()
        assert kinds == [("cancel_task", "a2a"), ("deliver_push", "push")]
        jobs = conn.execute("SELECT task_name, queue_name FROM sessionq.job_rows ORDER BY 1").fetchall()
        assert jobs == [("cancel_task", "a2a"), ("deliver_push", "push")]


def test_revision_0009_owns_push_configs_and_cuts_webhook_urls_out_of_job_errors(empty_database_url):
    """Revision 0009 gives a database at 0008 the push-config procedures that keep a config its
    creator's (and its share's), the console's visibility rule, and takes the webhook URLs out of
    recorded delivery errors."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    old_error = "push to http://hooks.example/secret-path-1 failed: HTTP 503"
    old_traceback = ("Traceback (most recent call last):\n  File \"jobs/a2a.py\", line 23, in deliver_push\n"
                     f"sessionq.domain.push.PushFailed: {old_error}\n")
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        # what a database made by the code of revision 0008 had: no console_sees, a replacing create
        conn.execute("DROP FUNCTION sessionq.console_sees(uuid, text)")
        conn.execute("ALTER TABLE sessionq.push_configs DROP COLUMN share_id")
        conn.execute("UPDATE sessionq.schema_installed SET revision = '0008_push_queue'")
        # a config a share holder (bob) made of alice's Session, and one alice made
        session = conn.execute(
            "INSERT INTO sessionq.sessions (creator, request_kind, request_id, request_fingerprint, agent_namespace,"
            " agent_name, actor_atespace, actor_name, actor_template, state, operation)"
            " VALUES ('alice', 'create', 'r', 'f', 'kagent', 'a', 'x', 'y', 'z', 'DELETED', 'NONE') RETURNING id").fetchone()
        assert session is not None
        for config_id, creator in (("by-bob", "bob"), ("by-alice", "alice")):
            conn.execute("INSERT INTO sessionq.push_configs (task_id, id, session_id, url, created_by)"
                         " VALUES ('t', %s, %s, 'http://hooks.example/x', %s)", (config_id, session[0], creator))
        conn.execute("CREATE OR REPLACE FUNCTION sessionq.list_push_configs(p_task text, p_caller text,"
                     " p_share_hash text, p_id text) RETURNS SETOF jsonb LANGUAGE sql AS $$ SELECT NULL::jsonb $$")
        for task, message, trace in (("deliver_push", old_error, old_traceback),
                                     ("execute_operation", "push to keep: unrelated", None)):
            conn.execute("INSERT INTO sessionq.job_attempts (job_id, attempt, task_name, queue_name, outcome,"
                         " error_type, error_message, traceback) VALUES (1, 1, %s, 'a2a', 'retried', 'X', %s, %s)",
                         (task, message, trace))
    command.stamp(migrate.alembic_config(empty_database_url), "0008_push_queue")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute("SELECT sessionq.console_sees(gen_random_uuid(), NULL)").fetchone() == (True,)
        source = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'list_push_configs'").fetchone()
        assert source is not None and "created_by = p_caller" in source[0]
        rows = conn.execute("SELECT task_name, error_message, traceback FROM sessionq.job_attempts ORDER BY id").fetchall()
        owners = conn.execute("SELECT id, created_by, share_id FROM sessionq.push_configs ORDER BY id").fetchall()
    # a share holder's config made before: no share recorded, so it is the Session owner's now
    assert owners == [("by-alice", "alice", None), ("by-bob", "alice", None)]
    assert rows[0] == ("deliver_push", "push notification failed: HTTP 503",
                       old_traceback.replace(old_error, "push notification failed: HTTP 503"))
    assert rows[1] == ("execute_operation", "push to keep: unrelated", None)


def test_revision_0011_brings_the_turn_failure_to_an_older_database(empty_database_url):
    """Revision 0011 gives a database at 0010 the procedures that show why a turn could not start
    on the Session (record_turn_failure, clear_turn_failure) and the column comment naming it."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    exists = ("SELECT count(*) FROM pg_proc WHERE proname IN ('record_turn_failure', 'clear_turn_failure')"
              " AND pronamespace = 'sessionq'::regnamespace")
    comment = "SELECT col_description('sessionq.sessions'::regclass, (SELECT attnum FROM pg_attribute" \
              " WHERE attrelid = 'sessionq.sessions'::regclass AND attname = 'failure_reason'))"
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute("DROP FUNCTION sessionq.record_turn_failure(uuid, uuid, text, text)")
        conn.execute("DROP FUNCTION sessionq.clear_turn_failure(uuid, text)")
        conn.execute("COMMENT ON COLUMN sessionq.sessions.failure_reason IS 'before'")
        conn.execute("UPDATE sessionq.schema_installed SET revision = '0010_uncertain_quiescence'")
        assert conn.execute(exists).fetchone() == (0,)
    command.stamp(migrate.alembic_config(empty_database_url), "0010_uncertain_quiescence")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute(exists).fetchone() == (2,)
        described = conn.execute(comment).fetchone()
        assert described is not None and "RestoreFailed" in described[0]
        cleared = conn.execute("SELECT sessionq.clear_turn_failure(gen_random_uuid(), 'RestoreFailed')").fetchone()
        assert cleared == (False,)



def test_revision_0012_brings_lifecycle_events_to_an_older_database(empty_database_url):
    """Revision 0012 gives a database at 0011 the lifecycle events: the table, the triggers that
    derive an event from each transition, and its procedures."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE sessionq.lifecycle_events CASCADE")
        conn.execute("DROP TRIGGER sessions_events_insert ON sessionq.sessions")
        conn.execute("DROP TRIGGER sessions_events_update ON sessionq.sessions")
        conn.execute("DROP TRIGGER sessions_events_delete ON sessionq.sessions")
        conn.execute("DROP TRIGGER checkpoints_events ON sessionq.checkpoints")
        conn.execute("UPDATE sessionq.schema_installed SET revision = '0011_turn_failure'")
    command.stamp(migrate.alembic_config(empty_database_url), "0011_turn_failure")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        triggers = conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname IN ('sessions_events_insert',"
                                " 'sessions_events_update', 'sessions_events_delete', 'checkpoints_events')").fetchone()
        assert triggers == (4,)
        assert conn.execute("SELECT sessionq.purge_lifecycle_events(0, 10)").fetchone() == (0,)


def test_revision_0014_makes_agent_changes_notify_on_an_older_database(empty_database_url):
    """Revision 0014 gives a database at 0011 the trigger that NOTIFYs sessionq_agent on every
    change of an Agent."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    exists = "SELECT count(*) FROM pg_trigger WHERE tgname = 'agents_notify'"
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER agents_notify ON sessionq.agents")
        conn.execute("DROP FUNCTION sessionq.notify_agent_change()")
        conn.execute("UPDATE sessionq.schema_installed SET revision = '0011_turn_failure'")
        assert conn.execute(exists).fetchone() == (0,)
    command.stamp(migrate.alembic_config(empty_database_url), "0011_turn_failure")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        assert conn.execute(exists).fetchone() == (1,)
        fires = conn.execute("SELECT tgtype FROM pg_trigger WHERE tgname = 'agents_notify'").fetchone()
        assert fires is not None and fires[0] & (4 | 8 | 16) == 4 | 8 | 16  # INSERT, DELETE, UPDATE


def test_revision_0015_brings_turn_pins_to_an_older_database(empty_database_url):
    """Revision 0015 gives a database at 0011 the turn pins: the table, its procedures, the
    trigger that releases a deleted Session's pins, the job kind and the operators' view."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    exists = ("SELECT (SELECT count(*) FROM pg_proc WHERE proname IN ('admit_fork_at_turn', 'list_turns')"
              " AND pronamespace = 'sessionq'::regnamespace),"
              " to_regclass('sessionq.turn_snapshots') IS NOT NULL, to_regclass('sessionq.session_snapshots') IS NOT NULL,"
              " (SELECT count(*) FROM sessionq.job_kinds WHERE task_name = 'release_turn_snapshot')")
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute("DROP VIEW sessionq.session_snapshots")
        conn.execute("DROP TRIGGER sessions_release_turn_pins ON sessionq.sessions")
        conn.execute("DROP TABLE sessionq.turn_snapshots CASCADE")
        for fn in ("admit_fork_at_turn(uuid, text, text, text)", "admit_turn_checkpoint(uuid, text, text, text)",
                   "list_turns(uuid, text, integer, integer)"):
            conn.execute(f"DROP FUNCTION sessionq.{fn}")
        conn.execute("DELETE FROM sessionq.job_kinds WHERE task_name = 'release_turn_snapshot'")
        conn.execute("UPDATE sessionq.schema_installed SET revision = '0011_turn_failure'")
        assert conn.execute(exists).fetchone() == (0, False, False, 0)
    command.stamp(migrate.alembic_config(empty_database_url), "0011_turn_failure")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute(exists).fetchone() == (2, True, True, 1)


def test_revision_0016_brings_queued_turns_to_an_older_database(empty_database_url):
    """Revision 0016 gives a database at 0011 the queued turns: the table, the task phase queued and
    admit_turn with a busy policy (its old signature gone)."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    signatures = ("SELECT p.oid::regprocedure::text FROM pg_proc p WHERE proname = 'admit_turn'"
                  " AND pronamespace = 'sessionq'::regnamespace")
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE sessionq.queued_turns CASCADE")  # and the view sessionq.turn_queue
        conn.execute("DROP FUNCTION sessionq.admit_turn(uuid, text, text, jsonb, text, double precision, text, integer)")
        conn.execute("CREATE FUNCTION sessionq.admit_turn(uuid, text, text, jsonb, text, double precision)"
                     " RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'")
        conn.execute("ALTER TABLE sessionq.tasks DROP CONSTRAINT tasks_phase_check")
        conn.execute("ALTER TABLE sessionq.tasks ADD CONSTRAINT tasks_phase_check"
                     " CHECK (phase IN ('active', 'settled', 'abandoned'))")
        conn.execute("UPDATE sessionq.schema_installed SET revision = '0011_turn_failure'")
    command.stamp(migrate.alembic_config(empty_database_url), "0011_turn_failure")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute(signatures).fetchall() == [
            ("sessionq.admit_turn(uuid,text,text,jsonb,text,double precision,text,integer)",)]
        assert conn.execute("SELECT count(*) FROM sessionq.queued_turns").fetchone() == (0,)
        check = conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'tasks_phase_check'"
                             ).fetchone()
        assert check is not None and "queued" in check[0]


def test_revision_0027_moves_label_search_to_one_index_on_an_older_database(empty_database_url):
    """Revision 0027 gives a database at 0026 (the pairs' stored column and index, the keys'
    expression index) the one terms column and index: the labelled Sessions it holds are found by
    a pair and by a key through the new index, and the old column, indexes and functions are gone."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE sessionq.sessions DROP COLUMN label_terms")
        conn.execute("DROP FUNCTION sessionq.label_terms(jsonb)")
        conn.execute("CREATE FUNCTION sessionq.label_pairs(p jsonb) RETURNS text[] LANGUAGE sql IMMUTABLE AS"
                     " $$ SELECT ARRAY(SELECT jsonb_build_object(e.key, e.value)::text FROM jsonb_each(p) e) $$")
        conn.execute("CREATE FUNCTION sessionq.label_keys(p jsonb) RETURNS text[] LANGUAGE sql IMMUTABLE AS"
                     " $$ SELECT ARRAY(SELECT jsonb_object_keys(p)) $$")
        conn.execute("ALTER TABLE sessionq.sessions ADD COLUMN label_pairs text[] GENERATED ALWAYS AS"
                     " (CASE WHEN labels <> '{}'::jsonb THEN sessionq.label_pairs(labels) END) STORED")
        conn.execute("CREATE INDEX sessions_label_pairs_idx ON sessionq.sessions USING gin (label_pairs)"
                     " WHERE state <> 'DELETED' AND label_pairs IS NOT NULL")
        conn.execute("CREATE INDEX sessions_label_keys_idx ON sessionq.sessions USING gin (sessionq.label_keys(labels))"
                     " WHERE state <> 'DELETED' AND labels <> '{}'::jsonb")
        rev = conn.execute(
            "INSERT INTO sessionq.revisions (agent_namespace, agent_name, number, spec, spec_hash, image,"
            " template_atespace, template_name) VALUES ('kagent', 'a1', 1, '{}', 'h', 'img', 'ns', 'tpl') RETURNING id"
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO sessionq.sessions (creator, request_kind, request_id, request_fingerprint, agent_namespace,"
            " agent_name, revision_id, state, operation, actor_atespace, actor_name, actor_template, labels)"
            " SELECT 'alice', 'create', 'r' || g, 'f', 'kagent', 'a1', %s, 'READY', 'NONE', 'ns', 'session-' || g,"
            " 'ns/tpl', CASE WHEN g = 7 THEN '{\"team\": \"rare\", \"odd\": \"\"}'::jsonb"
            " WHEN g %% 3 = 0 THEN '{}'::jsonb ELSE '{\"team\": \"common\"}'::jsonb END"
            " FROM generate_series(1, 3000) g", (rev,))
        conn.execute("UPDATE sessionq.schema_installed SET revision = '0026_plpgsql_quiescence'")
    command.stamp(migrate.alembic_config(empty_database_url), "0026_plpgsql_quiescence")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'sessionq' AND indexname LIKE 'sessions_label%'"
        ).fetchall() == [("sessions_label_terms_idx",)]
        assert conn.execute("SELECT count(*) FROM pg_proc WHERE proname IN ('label_pairs', 'label_keys')").fetchone() == (0,)
        assert conn.execute("SELECT label_terms FROM sessionq.sessions WHERE request_id = 'r7'").fetchone() == (
            ['{"odd": ""}', "odd", '{"team": "rare"}', "team"],)
        conn.execute("SET enable_seqscan = off")  # the index answers, whatever a small table's costs say
        for selector, expected in (([{"key": "team", "op": "in", "values": ["rare"]}], 1),
                                   ([{"key": "odd", "op": "exists"}], 1),
                                   ([{"key": "team", "op": "in", "values": ["common"]}], 1999)):
            f = Jsonb({"selector": selector})
            assert conn.execute("SELECT sessionq.count_sessions('alice', NULL, false, %s)", (f,)).fetchone() == (expected,)
            sql = conn.execute("SELECT sessionq.session_filter_sql('alice', NULL, false, %s)", (f,)).fetchone()[0]
            plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN SELECT count(*) FROM sessionq.sessions t WHERE {sql}"))
            assert "sessions_label_terms_idx" in plan, plan


CATALOG = {
    "functions": "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), obj_description(p.oid, 'pg_proc')"
                 " FROM pg_proc p WHERE p.pronamespace = 'sessionq'::regnamespace ORDER BY 1",
    "columns": "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns"
               " WHERE table_schema = 'sessionq' ORDER BY 1, 2",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'sessionq' ORDER BY 1",
    "comments": "SELECT c.relname, obj_description(c.oid, 'pg_class') FROM pg_class c"
                " WHERE c.relnamespace = 'sessionq'::regnamespace AND c.relkind IN ('r', 'v') ORDER BY 1",
    "column comments": "SELECT c.relname, a.attname, col_description(c.oid, a.attnum) FROM pg_class c"
                       " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
                       " WHERE c.relnamespace = 'sessionq'::regnamespace AND c.relkind = 'r' ORDER BY 1, 2",
}


def _catalog(url: str) -> dict[str, list[tuple[object, ...]]]:
    with psycopg.connect(url) as conn:
        return {name: conn.execute(sql).fetchall() for name, sql in CATALOG.items()}


def test_a_clean_install_skips_the_upgrades_it_already_holds(empty_database_url):
    """0002 installs the canonical files and records the head: no upgrade file runs after it
    (an upgrade's frozen text would otherwise replace a newer canonical one)."""
    migrate.upgrade(empty_database_url)
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute("SELECT revision FROM sessionq.schema_installed").fetchall() == [(migrate.head(),)]


def test_the_upgrades_bring_a_database_to_the_canonical_schema(empty_database_url, database_url):
    """Every upgrade file, applied in order as on a database made before all of them (no record of
    its install), leaves the schema exactly as the canonical files make it: each function an
    upgrade defines ends as its canonical text, every column, index and comment too. A change to a
    canonical function without an upgrade that brings it fails here."""
    from alembic import command

    canonical = _catalog(database_url)
    migrate.upgrade(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE sessionq.schema_installed")
    command.stamp(migrate.alembic_config(empty_database_url), "0002_sessionq_base")
    migrate.upgrade(empty_database_url)
    upgraded = _catalog(empty_database_url)
    for part in CATALOG:
        differ = sorted({row[:2] for row in set(canonical[part]) ^ set(upgraded[part])}, key=str)
        assert not differ, f"{part} differ after the upgrades: {[str(row)[:200] for row in differ[:5]]}"


def test_bad_database_url_is_one_clear_line():
    result = CliRunner().invoke(main, ["migrate"], env={"SESSIONQ_DATABASE__URL": ""})
    assert result.exit_code != 0 and "database URL is required" in result.output


async def test_health_and_reflection_are_on(api):
    stub = health_pb2_grpc.HealthStub(api.channel)
    r = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert r.status == health_pb2.HealthCheckResponse.SERVING
    r = await stub.Check(health_pb2.HealthCheckRequest(service="kagent.api.v1alpha1.SessionService"), timeout=5)
    assert r.status == health_pb2.HealthCheckResponse.SERVING
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    refl = reflection_pb2_grpc.ServerReflectionStub(api.channel)

    async def ask():
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    names = []
    async for resp in refl.ServerReflectionInfo(ask()):
        names = [s.name for s in resp.list_services_response.service]
    assert {"kagent.api.v1alpha1.SessionService", "kagent.api.v1alpha1.CheckpointService",
            "lf.a2a.v1.A2AService", "grpc.health.v1.Health"} <= set(names)
    await asyncio.sleep(0)


def test_a_multi_host_url_reaches_the_dialect_as_a_host_list() -> None:
    """`sessionq migrate` on an HA pair's URL (HA-1: migrations take the direct URL, which may list
    the primary and the standby with target_session_attrs=read-write)."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    from sessionq.db.migrate import _sqlalchemy_url

    url = make_url(_sqlalchemy_url("postgresql://postgres@127.0.0.1:5433,127.0.0.1:5434/sessionq"
                                   "?target_session_attrs=read-write"))
    engine = create_engine(url)
    _, args = engine.dialect.create_connect_args(url)
    assert (args["host"], args["port"], args["dbname"]) == ("127.0.0.1,127.0.0.1", "5433,5434", "sessionq")
    assert args["target_session_attrs"] == "read-write"
    assert _sqlalchemy_url("postgresql://u@h:5/d") == "postgresql+psycopg://u@h:5/d"


def test_revision_0010_brings_uncertain_quiescence_claims_to_an_older_database(empty_database_url):
    """Revision 0010 gives a database at 0009 the uncertain claim's columns and procedures, the leased
    take-over in place of the old one, and finish_idle that ends an uncertain claim."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        # what a database made by the code of revision 0009 had
        conn.execute("UPDATE sessionq.schema_installed SET revision = '0009_push_config_owners'")
        for f in ("idle_attempt_failed(uuid, uuid, uuid, text, text, boolean, double precision)",
                  "take_over_uncertain_idle(uuid, double precision)", "mark_lapsed_idle_claims(double precision)",
                  "idle_work_state(double precision)", "take_over_idle_claim(uuid, uuid, double precision)"):
            conn.execute(f"DROP FUNCTION sessionq.{f}")
        conn.execute("CREATE FUNCTION sessionq.take_over_idle_claim(p_session uuid, p_executor uuid) RETURNS jsonb"
                     " LANGUAGE sql AS $$ SELECT NULL::jsonb $$")
        conn.execute("DROP INDEX sessionq.sessions_idle_uncertain_idx")
        conn.execute("ALTER TABLE sessionq.sessions DROP COLUMN idle_uncertain_at, DROP COLUMN idle_retry_at,"
                     " DROP COLUMN idle_attempts, DROP COLUMN idle_unsent")
    command.stamp(migrate.alembic_config(empty_database_url), "0009_push_config_owners")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        takeovers = conn.execute("SELECT pg_get_function_identity_arguments(oid) FROM pg_proc"
                                 " WHERE proname = 'take_over_idle_claim'").fetchall()
        assert takeovers == [("p_session uuid, p_executor uuid, p_lease double precision",)]
        assert conn.execute("SELECT blocked, retry_in FROM sessionq.idle_work_state()").fetchone() == (False, None)
        # finish_idle's record (record_idle_outcome since 0017) ends an uncertain claim too
        finish = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'record_idle_outcome'").fetchone()
        assert finish is not None and "idle_uncertain_at = NULL" in finish[0]
        blockers = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'check_turn_blockers'").fetchone()
        assert blockers is not None and "idle_uncertain_at" in blockers[0]
