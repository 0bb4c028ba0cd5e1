"""`sessionq migrate`: bring a database to the current schema. Idempotent."""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from sessionq.db.connection import conninfo


def _sqlalchemy_url(url: str) -> str:
    """The URL for SQLAlchemy's psycopg dialect. A multi-host URL (``postgresql://u@h1:p1,h2:p2/db?
    target_session_attrs=read-write``, as for an HA pair) is rewritten to the dialect's form of it
    (``postgresql+psycopg://u@/db?host=h1:p1&host=h2:p2&...``): SQLAlchemy cannot parse the first."""
    url = conninfo(url)
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    rest = url[len("postgresql://") :]
    netloc, _, tail = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if "," in hosts:
        path, question, query = tail.partition("?")
        params = "&".join(f"host={h}" for h in hosts.split(",") if h)
        rest = f"{userinfo}{at}/{path}?{params}" + (f"&{query}" if question and query else "")
    return "postgresql+psycopg://" + rest


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("sessionq.db.migrations")))
    cfg.set_main_option("sqlalchemy.url", _sqlalchemy_url(url).replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Apply every pending revision (procrastinate's schema, then sessionq's)."""
    command.upgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    engine = create_engine(_sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head() -> str | None:
    return ScriptDirectory.from_config(alembic_config("postgresql://unused/")).get_current_head()
