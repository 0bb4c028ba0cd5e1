"""The requirement clauses live in the repository (docs/requirements.md), and every test marker
names one of them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLAUSE = re.compile(r"^- ([A-Z0-9]+-[0-9]+) ", re.MULTILINE)
MARKER = re.compile(r"""clause\(\s*["']([^"']+)["']""")


def clause_ids() -> set[str]:
    return set(CLAUSE.findall((ROOT / "docs" / "requirements.md").read_text(encoding="utf-8")))


def test_requirements_are_numbered_and_unique() -> None:
    text = (ROOT / "docs" / "requirements.md").read_text(encoding="utf-8")
    ids = CLAUSE.findall(text)
    assert len(ids) >= 100
    assert len(ids) == len(set(ids)), "a clause id is used twice"


def test_every_clause_marker_names_a_clause() -> None:
    known = clause_ids()
    unknown = {}
    for path in (ROOT / "tests").rglob("*.py"):
        for marked in MARKER.findall(path.read_text(encoding="utf-8")):
            if marked not in known and marked != "ID":
                unknown.setdefault(marked, []).append(str(path.relative_to(ROOT)))
    assert not unknown, f"markers naming no clause of docs/requirements.md: {unknown}"
