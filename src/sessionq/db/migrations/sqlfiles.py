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


def function_definitions(file: str, names: list[str]) -> str:
    """The statements of a schema file that define the functions `names` (sessionq.<name>): each
    `CREATE OR REPLACE FUNCTION` with its `COMMENT ON FUNCTION`, up to the blank line after them.
    For a revision that brings changed functions to a database made before them, where the file
    as a whole cannot be applied twice (it creates tables)."""
    text = schema_file(file)
    found = []
    for name in names:
        start = text.find(f"CREATE OR REPLACE FUNCTION sessionq.{name}(")
        end = text.find("\n\n", start)
        block = text[start:end if end >= 0 else len(text)]
        if start < 0 or f"COMMENT ON FUNCTION sessionq.{name}(" not in block or not block.rstrip().endswith(";"):
            raise ValueError(f"{file} has no whole definition of sessionq.{name} (a statement and its comment)")
        found.append(block)
    return "\n\n".join(found)


def apply_functions(file: str, names: list[str]) -> None:
    run_sql(function_definitions(file, names))
