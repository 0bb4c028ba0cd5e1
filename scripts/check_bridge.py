"""Check that procrastinate's internals are named only by its two bridges.

One SQL file (schema/05_procrastinate.sql) and one Python module (jobs/bridge.py) may name
anything of procrastinate's beyond its public API; everything else calls them (docs/operating.md,
"Upgrading procrastinate"). This check does not depend on import-linter: it reads the files.

- schema/*.sql other than 05_procrastinate.sql: no `procrastinate_` name at all (tables, types,
  versioned functions, triggers, NOTIFY channels), comments included. The frozen upgrade files
  (schema/upgrades/) are not read: a bridge function they carry is a copy of 05's text, which
  tests/test_migrate.py holds them to.
- sessionq's Python (src/, jobs/, cli/, scripts/) other than jobs/bridge.py: procrastinate is
  imported only as `from procrastinate import <public names>` (PUBLIC below), and no
  `procrastinate_...` or `procrastinate.<module>` name appears (SQL in strings, module paths).
  The Alembic revisions may read procrastinate's own SQL files (`procrastinate.sql`): that is
  how its schema and its migrations are applied.

Tests are not checked: they set up job states on purpose, and tests/bridge pins the bridges.

    python scripts/check_bridge.py            # make lint runs this
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SQL_BRIDGE = "schema/05_procrastinate.sql"
PYTHON_BRIDGE = "jobs/bridge.py"
PYTHON_FOLDERS = ("src", "jobs", "cli", "scripts")
SKIPPED = ("src/sessionq/_pb/", "scripts/check_bridge.py")  # generated code; this checker names the patterns

# procrastinate's public API as sessionq uses it outside the bridge
PUBLIC = frozenset({"App", "JobContext", "RetryStrategy", "PsycopgConnector"})
# file (glob, relative to the root) -> names it may use: the Alembic revisions apply procrastinate's SQL
ALLOWED = {"src/sessionq/db/migrations/versions/*.py": frozenset({"procrastinate.sql"})}

SQL_NAME = re.compile(r"procrastinate_\w*", re.I)
PYTHON_NAME = re.compile(r"\bprocrastinate(?:_\w*|\.[A-Za-z_]\w*)")


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def check_sql(path: str, text: str) -> list[Violation]:
    if path == SQL_BRIDGE:
        return []
    return [
        Violation(path, number, f"names procrastinate's {match.group(0)}: use the SQL bridge ({SQL_BRIDGE})")
        for number, line in enumerate(text.splitlines(), 1)
        for match in SQL_NAME.finditer(line)
    ]


def _allowed(path: str) -> frozenset[str]:
    names: set[str] = set()
    for pattern, allowed in ALLOWED.items():
        if Path(path).match(pattern):
            names |= allowed
    return frozenset(names)


def check_python(path: str, text: str) -> list[Violation]:
    if path == PYTHON_BRIDGE or path.startswith(SKIPPED):
        return []
    out: list[Violation] = []
    for node in ast.walk(ast.parse(text, filename=path)):
        if isinstance(node, ast.Import):
            out += [Violation(path, node.lineno, f"imports {alias.name}: use `from procrastinate import "
                              f"{', '.join(sorted(PUBLIC))}` or the Python bridge ({PYTHON_BRIDGE})")
                    for alias in node.names if alias.name.split(".")[0] == "procrastinate"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "procrastinate":
                continue
            if node.module != "procrastinate":
                out.append(Violation(path, node.lineno, f"imports from {node.module}: only the Python bridge "
                                     f"({PYTHON_BRIDGE}) uses procrastinate's modules"))
                continue
            out += [Violation(path, node.lineno, f"imports procrastinate.{alias.name}, not in the public API "
                              f"sessionq uses ({', '.join(sorted(PUBLIC))}): use the Python bridge ({PYTHON_BRIDGE})")
                    for alias in node.names if alias.name not in PUBLIC]
    allowed = _allowed(path)
    for number, line in enumerate(text.splitlines(), 1):
        for match in PYTHON_NAME.finditer(line):
            name = match.group(0)
            if name in allowed or line.lstrip().startswith(("from procrastinate.", "import procrastinate.")):
                continue  # allowed, or an import already reported above
            out.append(Violation(path, number, f"names procrastinate's {name}: use the bridge "
                                 f"({PYTHON_BRIDGE} or {SQL_BRIDGE})"))
    return out


def violations(root: Path = ROOT) -> list[Violation]:
    out: list[Violation] = []
    for sql in sorted((root / "schema").glob("*.sql")):
        out += check_sql(sql.relative_to(root).as_posix(), sql.read_text(encoding="utf-8"))
    for folder in PYTHON_FOLDERS:
        for module in sorted((root / folder).rglob("*.py")):
            out += check_python(module.relative_to(root).as_posix(), module.read_text(encoding="utf-8"))
    return out


def main() -> int:
    found = violations()
    for v in found:
        print(v)
    print(f"procrastinate bridge: {len(found)} violation(s)" if found else
          f"procrastinate bridge: kept (only {SQL_BRIDGE} and {PYTHON_BRIDGE} name its internals)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
