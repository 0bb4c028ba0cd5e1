"""The sessions row documents its column groups instead of being split (issue 16).

Four state machines share the row so that their writes stay HOT updates of one row
(test_hot_updates.py) and their cross rules run under one row lock; in exchange every column
says, in \\d+, which group it belongs to.
"""

from __future__ import annotations

import psycopg

GROUPS = ("[audit]", "[lifecycle]", "[turns]", "[quiescence]", "[snapshot]", "[fork]")


def test_every_sessions_column_names_its_group(database_url):
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT a.attname, col_description(a.attrelid, a.attnum) FROM pg_attribute a"
            " WHERE a.attrelid = 'sessionq.sessions'::regclass AND a.attnum > 0 AND NOT a.attisdropped"
            " ORDER BY a.attnum"
        ).fetchall()
        table = conn.execute("SELECT obj_description('sessionq.sessions'::regclass, 'pg_class')").fetchone()
    assert len(rows) >= 40
    undocumented = [name for name, comment in rows if not comment]
    assert undocumented == []
    ungrouped = [name for name, comment in rows if not comment.startswith(GROUPS)]
    assert ungrouped == []
    assert table is not None and all(group in table[0] for group in GROUPS)
    assert "HOT" in table[0] and "not split" in table[0]  # why the row stays whole
