"""`sessionq migrate`: Alembic revisions applying procrastinate's and sessionq's schema, idempotent."""

import asyncio

import psycopg
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


def test_a_database_made_before_the_coalesced_reads_gets_them(empty_database_url):
    """Revision 0005 brings a database at 0004 up to date: GetSession's batch reads exist after it."""
    from alembic import command

    migrate.upgrade(empty_database_url)
    reads = "SELECT count(*) FROM pg_proc WHERE proname IN ('get_sessions', 'get_session_views')"
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        # what a database made by the code of revision 0004 had: neither function
        conn.execute("DROP FUNCTION sessionq.get_sessions(uuid[], text[], text[], text[])")
        conn.execute("DROP FUNCTION sessionq.get_session_views(uuid[], text[], text[], text[])")
        assert conn.execute(reads).fetchone() == (0,)
    command.stamp(migrate.alembic_config(empty_database_url), "0004_suspend_after_cancel_told")
    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head() == "0005_coalesced_session_reads"
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute(reads).fetchone() == (2,)


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
