"""ARCHITECTURE.md is the map: it names every package folder and every schema file, and every
file path it names exists (a moved or deleted file fails here, not in a newcomer's hands)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAP = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
PACKAGE = ROOT / "src" / "sessionq"
# where a path in the map may start: the repository, the package, or one of the package's folders
# (the map says `api/sessions.py` inside the API's paragraph)
BASES = [ROOT, PACKAGE, *(d for d in PACKAGE.iterdir() if d.is_dir())]
PATH = re.compile(r"`([A-Za-z0-9_./-]+/[A-Za-z0-9_.-]+\.(?:py|sql|md|toml))`")


def package_folders() -> list[str]:
    """Every folder of the package that holds Python modules, as a path below src/sessionq."""
    found = []
    for init in PACKAGE.rglob("__init__.py"):
        rel = init.parent.relative_to(PACKAGE)
        if rel.parts and not rel.parts[0].startswith("_pb"):
            found.append(rel.as_posix())
    return sorted(found)


def test_every_package_folder_is_on_the_map() -> None:
    # a nested folder may be named by its own name inside its parent's row (`simulator/`)
    missing = [f for f in package_folders() if f"{f}/" not in MAP and f"`{f.rsplit('/', 1)[-1]}/" not in MAP]
    assert not missing, f"ARCHITECTURE.md names no part for src/sessionq/{{{', '.join(missing)}}}"


def test_every_schema_file_is_in_the_transitions_table() -> None:
    table = MAP[MAP.index("## Where transitions live"):MAP.index("## One request, end to end")]
    named = set(re.findall(r"`(\d\d_[a-z0-9_]+\.sql)`", table))
    files = {p.name for p in (ROOT / "schema").glob("*.sql")}
    assert files - named == set(), f"schema files the table does not name: {sorted(files - named)}"
    assert named - files == set(), f"the table names missing schema files: {sorted(named - files)}"


def test_every_file_the_map_names_exists() -> None:
    gone = [p for p in sorted(set(PATH.findall(MAP))) if not any((base / p).exists() for base in BASES)]
    assert not gone, f"ARCHITECTURE.md names files that do not exist: {gone}"


def test_every_test_folder_of_the_domain_table_exists() -> None:
    table = MAP[MAP.index("## One domain, one home"):MAP.index("## One request, end to end")]
    folders = set(re.findall(r"`(tests/[a-z0-9_]+)/`", table))
    assert len(folders) >= 10, "the domain table names the test folders"
    missing = [f for f in sorted(folders) if not (ROOT / f).is_dir()]
    assert not missing, f"ARCHITECTURE.md names test folders that do not exist: {missing}"
    unnamed = [d.name for d in sorted((ROOT / "tests").iterdir())
               if d.is_dir() and not d.name.startswith((".", "_")) and f"tests/{d.name}" not in folders]
    assert not unnamed, f"test folders ARCHITECTURE.md does not name: {unnamed}"
