"""The label rules have one authority, the database's (sessionq.label_key_valid, label_value_valid and
check_labels in schema/22_fleet.sql: every stored label passes them). The API's copy in Python
(sessionq.domain.labels.key_valid / value_valid, sessionq.api.fleet.check_labels and its bounds),
which answers bad input without a round trip and parses selectors, is checked against it here:
the same answer for generated keys, values and maps, their edges included."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from sessionq import errors
from sessionq.api import fleet
from sessionq.domain.labels import key_valid, value_valid

# mostly the characters the rules are about, and some they refuse
CHARS = st.sampled_from("abcxyzABZ019-_./") | st.sampled_from(" \n\t:=,!Ωé٣\x00")
NAMES = st.text(CHARS, max_size=70).filter(lambda s: "\x00" not in s)
EDGES = ["", "a", "a" * 63, "a" * 64, "A-b_c.9", "-a", "a-", "a.", "_a", "a/b", "a/b/c", "/a", "a/", "A/b", "a.b/c",
         "a..b/c", "a-/c", "a" * 253 + "/b", "a" * 254 + "/b", "example.com/" + "x" * 63, "example.com/" + "x" * 64,
         "a\n", "٣", "é", "a b"]


@pytest.fixture
def conn(database_url):
    with psycopg.connect(database_url, autocommit=True) as c:
        yield c


def sql_answers(conn: psycopg.Connection[Any], function: str, texts: list[str]) -> list[bool]:
    rows = conn.execute(f"SELECT sessionq.{function}(x) FROM unnest(%s::text[]) WITH ORDINALITY u(x, i) ORDER BY i",
                        (texts,)).fetchall()
    return [r[0] for r in rows]


@pytest.mark.clause("FLEET-1")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(NAMES | NAMES.map(lambda s: s + "/" + s[:5]) | st.sampled_from(EDGES), min_size=1, max_size=60))
@example(EDGES)
def test_key_and_value_rules_agree_with_the_database(conn, texts):
    assert [key_valid(t) for t in texts] == sql_answers(conn, "label_key_valid", texts)
    assert [value_valid(t) for t in texts] == sql_answers(conn, "label_value_valid", texts)


def python_verdict(labels: dict[str, str]) -> bool:
    try:
        fleet.check_labels(labels)
    except errors.SessionqError as e:
        assert len(str(e)) < 300
        return False
    return True


def sql_verdict(conn: psycopg.Connection[Any], labels: dict[str, str]) -> bool:
    try:
        with conn.transaction():
            conn.execute("SELECT sessionq.check_labels(%s)", (Jsonb(labels),))
    except psycopg.Error as e:
        assert e.sqlstate == "SQ400" and e.diag.message_primary and len(e.diag.message_primary) < 300
        return False
    return True


LONG_KEYS = st.integers(0, 40).map(lambda i: f"k{i:02d}.example.com/" + "n" * 50)
MAPS = st.dictionaries(NAMES | LONG_KEYS | st.sampled_from(EDGES), NAMES | st.sampled_from(["", "v" * 63]),
                       max_size=36)


@pytest.mark.clause("FLEET-1")
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(MAPS)
@example({f"k{i}": "v" for i in range(32)})  # the count's edge
@example({f"k{i}": "v" for i in range(33)})
@example({f"k{i:02d}.example.com/" + "n" * 50: "v" * 55 for i in range(32)})  # the size's edge, over
@example({f"k{i:02d}.example.com/" + "n" * 50: "v" * 39 for i in range(32)})  # and under
def test_map_rules_agree_with_the_database(conn, labels):
    assert python_verdict(labels) == sql_verdict(conn, labels)


def test_the_bounds_are_the_databases(conn):
    """The API's bounds are the ones check_labels enforces: the largest map of each passes, one more
    fails (the size measured as the stored JSON's text)."""
    assert sql_verdict(conn, {f"k{i}": "v" for i in range(fleet.MAX_LABELS)})
    assert not sql_verdict(conn, {f"k{i}": "v" for i in range(fleet.MAX_LABELS + 1)})
    big = {f"k{i:02d}.example.com/" + "n" * 50: "v" * 63 for i in range(fleet.MAX_LABELS)}
    text = conn.execute("SELECT %s::jsonb::text", (Jsonb(big),)).fetchone()[0]  # type: ignore[index]
    assert len(text.encode()) > fleet.MAX_LABEL_BYTES
    while len(conn.execute("SELECT %s::jsonb::text", (Jsonb(big),)).fetchone()[0]) > fleet.MAX_LABEL_BYTES:  # type: ignore[index]
        key = next(k for k, v in big.items() if v)
        big[key] = big[key][:-1]
    assert sql_verdict(conn, big) and python_verdict(big)
    key = next(k for k, v in big.items() if len(v) < 63)
    big[key] += "v"
    assert not sql_verdict(conn, big) and not python_verdict(big)
