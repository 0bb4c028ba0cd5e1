"""Helpers for migration revisions: run SQL text on the migration's own transaction."""

from __future__ import annotations

from importlib import resources

from alembic import op


def run_sql(sql: str) -> None:
    """Execute SQL (possibly several statements, possibly containing %) on the migration connection."""
    driver_conn = op.get_bind().connection.driver_connection
    assert driver_conn is not None
    driver_conn.execute(sql)  # no parameters: psycopg sends it as a simple query, % untouched


def schema_file(name: str) -> str:
    return resources.files("sessionq.schema").joinpath(name).read_text()


def apply_sql_files(names: list[str]) -> None:
    for name in names:
        run_sql(schema_file(name))
