"""`sessionq migrate`: Alembic revisions applying procrastinate's and sessionq's schema, idempotent."""

import asyncio

import psycopg
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc
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


def test_revision_0007_brings_the_turn_failure_to_an_older_database(empty_database_url):
    """Revision 0007 gives a database at 0006 the procedures that show why a turn could not start
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
        assert conn.execute(exists).fetchone() == (0,)
    command.stamp(migrate.alembic_config(empty_database_url), "0006_session_list_views")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute(exists).fetchone() == (2,)
        described = conn.execute(comment).fetchone()
        assert described is not None and "RestoreFailed" in described[0]
        cleared = conn.execute("SELECT sessionq.clear_turn_failure(gen_random_uuid(), 'RestoreFailed')").fetchone()
        assert cleared == (False,)


def test_a_function_definition_is_taken_whole_from_its_schema_file():
    from sessionq.db.migrations.sqlfiles import function_definitions

    sql = function_definitions("20_sessions.sql", ["share_permission", "access"])
    assert sql.count("CREATE OR REPLACE FUNCTION") == 2 and sql.count("COMMENT ON FUNCTION") == 2
    assert sql.index("sessionq.share_permission(") < sql.index("FUNCTION sessionq.access(")
    with pytest.raises(ValueError, match=r"no whole definition of sessionq\.nonexistent"):
        function_definitions("20_sessions.sql", ["nonexistent"])


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
