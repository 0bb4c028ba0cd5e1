"""The SQL shown to operators in the README and docs/operating.md runs against the real schema."""

import re
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "docs" / "operating.md"]


def statements() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for block in re.findall(r"```sql\n(.*?)```", doc.read_text(), re.S):
            body = "\n".join(line for line in block.splitlines() if not line.strip().startswith("--"))
            out += [(doc.name, stmt.strip()) for stmt in body.split(";") if stmt.strip()]
    return out


@pytest.mark.parametrize("doc, sql", statements())
def test_documented_query_runs(module_database_url, doc, sql):
    sql = re.sub(r"'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'", "gen_random_uuid()", sql)
    # rolled back: the module's statements share one database and each sees the schema as made
    with psycopg.connect(module_database_url, autocommit=True) as conn, conn.transaction(force_rollback=True):
        try:
            conn.execute(sql)
        except psycopg.Error as e:
            # a procedure may refuse the example's made-up target with one of our own errors: it ran
            assert (e.sqlstate or "").startswith("SQ"), f"{doc}: {sql}\n{e}"


def test_every_sql_function_is_defined_once():
    """No file redefines another's function (behaviour would depend on file order): a rule that
    spans domains is composed once, after them (schema/70_lifecycle_rules.sql)."""
    defined: dict[str, list[str]] = {}
    for path in sorted((ROOT / "schema").glob("*.sql")):
        for name in re.findall(r"CREATE (?:OR REPLACE )?FUNCTION\s+([\w.]+)\s*\(", path.read_text(), re.I):
            defined.setdefault(name.lower(), []).append(path.name)
    twice = {name: files for name, files in defined.items() if len(files) > 1}
    assert not twice, f"functions defined more than once: {twice}"
