"""Helpers for migration revisions: run SQL text on the migration's own transaction.

Two kinds of SQL (pgmq's layout): the canonical schema, `schema/*.sql` (one file a domain, every
function's current text), which `0002_sessionq_base` installs whole on a clean database and records
as installed at the head revision (`sessionq.schema_installed`); and the upgrades,
`schema/upgrades/<revision>.sql`, frozen, each applied only by its own revision and only to a
database whose schema was installed before that revision (`apply_upgrade`).
"""

from __future__ import annotations

from importlib import resources

from alembic import op

UPGRADES = "upgrades"


def run_sql(sql: str) -> None:
    """Execute SQL (possibly several statements, possibly containing %) on the migration connection."""
    driver_conn = op.get_bind().connection.driver_connection
    assert driver_conn is not None
    driver_conn.execute(sql)  # no parameters: psycopg sends it as a simple query, % untouched


def canonical_files() -> list[str]:
    """The canonical schema's files, in the order they are applied (their names')."""
    return sorted(f.name for f in resources.files("sessionq.schema").iterdir() if f.name.endswith(".sql"))


def schema_file(name: str) -> str:
    return resources.files("sessionq.schema").joinpath(name).read_text()


def upgrade_file(revision: str) -> str:
    return resources.files("sessionq.schema").joinpath(UPGRADES, f"{revision}.sql").read_text()


def install_canonical(head: str) -> None:
    """Apply every canonical file and record the schema as installed at `head` (it holds every
    upgrade up to and including head's)."""
    for name in canonical_files():
        run_sql(schema_file(name))
    run_sql(f"INSERT INTO sessionq.schema_installed (revision) VALUES ('{head}')")


def revision_number(revision: str) -> int:
    """A revision's position: the number its id starts with (`0005_coalesced_session_reads` -> 5)."""
    return int(revision.split("_", 1)[0])


def installed_at() -> str | None:
    """The revision the database's schema was installed at from the canonical files (None: made
    before that was recorded, so every upgrade applies)."""
    conn = op.get_bind().connection.driver_connection
    assert conn is not None
    if conn.execute("SELECT to_regclass('sessionq.schema_installed')").fetchone() == (None,):
        return None
    row = conn.execute("SELECT revision FROM sessionq.schema_installed").fetchone()
    return None if row is None else str(row[0])


def apply_upgrade(revision: str) -> None:
    """Run `schema/upgrades/<revision>.sql`, unless the schema was installed at or after `revision`
    (the canonical files already hold the change)."""
    installed = installed_at()
    if installed is not None and revision_number(installed) >= revision_number(revision):
        return
    run_sql(upgrade_file(revision))
