"""Search and count (sessionq.search_session_ids, the rows of those ids: sessionq.search_sessions and
sessionq.search_session_views; sessionq.count_sessions) against a brute-force filter over a few
thousand generated Sessions, and the index a selective label filter reads."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from sessionq.domain.labels import matches, parse_selector

CREATORS = ["alice", "bob", "carol"]
AGENTS = [("kagent", "a1"), ("kagent", "a2"), ("other", "a1")]
STATES = ["READY", "SUSPENDED", "DELETED", "CREATING", "DELETING"]
VOCABULARY = {"team": ["billing", "search", "infra"], "tier": ["a", "b", "c"], "env": ["prod", "dev"],
              "example.com/legacy": [""]}
NOW = datetime(2026, 12, 1, tzinfo=UTC)
OPERATION = {"READY": "NONE", "SUSPENDED": "NONE", "DELETED": "NONE", "CREATING": "CREATE", "DELETING": "DELETE"}


def populate(conn: psycopg.Connection[Any], n: int, seed: int = 7) -> list[dict[str, Any]]:
    """n Sessions of three creators, three Agents, every state, labels from a small vocabulary,
    creation and activity over ten days; the rows as the brute force sees them."""
    rnd = random.Random(seed)
    rev = conn.execute(
        "INSERT INTO sessionq.revisions (agent_namespace, agent_name, number, spec, spec_hash, image,"
        " template_atespace, template_name) VALUES ('kagent', 'a1', 1, '{}', 'h', 'img', 'ns', 'tpl') RETURNING id"
    ).fetchone()[0]
    rows = []
    for i in range(n):
        state = rnd.choice(STATES)
        ns, agent = rnd.choice(AGENTS)
        labels = {k: rnd.choice(v) for k, v in VOCABULARY.items() if rnd.random() < 0.5}
        created = NOW - timedelta(seconds=rnd.randrange(10 * 86400))
        last = created + timedelta(seconds=rnd.randrange(86400)) if rnd.random() < 0.6 else None
        running = state == "READY" and rnd.random() < 0.3
        sid = uuid.UUID(int=(int(created.timestamp() * 1000) << 80) | (0x7 << 76) | (2 << 62) | i)
        rows.append({"id": sid, "creator": rnd.choice(CREATORS), "namespace": ns, "agent": agent, "state": state,
                     "labels": labels, "created_at": created, "last_event_at": last, "running": running})
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO sessionq.sessions (id, creator, request_kind, request_id, request_fingerprint, agent_namespace,"
            " agent_name, revision_id, state, operation, operation_id, actor_atespace, actor_name, actor_template,"
            " labels, created_at, last_event_at, idle_boundary_id, idle_boundary_at, deletion_reason)"
            " VALUES (%s, %s, 'create', %s, 'f', %s, %s, %s, %s, %s, %s, 'ns', %s, 'ns/tpl', %s, %s, %s, %s, %s, %s)",
            [(r["id"], r["creator"], f"req-{i}", r["namespace"], r["agent"], None if r["state"] == "DELETED" else rev,
              r["state"], OPERATION[r["state"]], uuid.uuid4() if OPERATION[r["state"]] != "NONE" else None,
              f"session-{r['id']}", Jsonb(r["labels"]), r["created_at"], r["last_event_at"],
              uuid.uuid4() if r["running"] else None, NOW if r["running"] else None,
              "user_requested" if r["state"] in ("DELETED", "DELETING") else None)
             for i, r in enumerate(rows)],
        )
    # shares (get_session's rule): tok-live grants one of alice's live Sessions, tok-expired one of
    # carol's but has expired, tok-deleted one of bob's DELETED Sessions (invisible to everyone)
    live = next(r for r in rows if r["creator"] == "alice" and r["state"] == "READY")
    carols = next(r for r in rows if r["creator"] == "carol" and r["state"] == "READY")
    deleted = next(r for r in rows if r["creator"] == "bob" and r["state"] == "DELETED")
    for token, r, expires in (("tok-live", live, None), ("tok-expired", carols, NOW),
                              ("tok-deleted", deleted, None)):
        conn.execute("INSERT INTO sessionq.session_shares (session_id, permission, token_hash, created_by, expires_at)"
                     " VALUES (%s, 'READ_ONLY', %s, %s, %s)", (r["id"], token, r["creator"], expires))
        SHARES[token] = r["id"] if expires is None else None
    conn.execute("ANALYZE sessionq.sessions")
    return rows


SHARES: dict[str, uuid.UUID | None] = {}  # token hash -> the Session it grants (None: expired)


def actor_state(r: dict[str, Any]) -> str | None:
    if r["state"] == "SUSPENDED":
        return "suspended"
    if r["state"] != "READY":
        return None
    return "running" if r["running"] else "suspended"


def brute_force(rows: list[dict[str, Any]], caller: str, share: str | None, all_creators: bool,
                f: dict[str, Any]) -> list[uuid.UUID]:
    selector = parse_selector(f.get("selector_text", ""))
    shared = SHARES.get(share) if share else None
    out = []
    for r in rows:
        clock = max(r["created_at"], r["last_event_at"] or r["created_at"])
        if (
            r["state"] == "DELETED"
            or (not all_creators and r["creator"] != caller and r["id"] != shared)
            or ("creator" in f and r["creator"] != f["creator"])
            or ("namespace" in f and (r["namespace"], r["agent"]) != (f["namespace"], f["agent"]))
            or (f.get("states") and r["state"] not in f["states"])
            or (f.get("actor_states") and actor_state(r) not in f["actor_states"])
            or ("created_after" in f and r["created_at"] < f["created_after"])
            or ("created_before" in f and r["created_at"] >= f["created_before"])
            or ("active_after" in f and clock < f["active_after"])
            or ("active_before" in f and clock >= f["active_before"])
            or not matches(r["labels"], selector)
        ):
            continue
        out.append(r["id"])
    return sorted(out)


def requirement() -> st.SearchStrategy[str]:
    key = st.sampled_from([*VOCABULARY, "missing"])
    value = st.sampled_from(["billing", "search", "infra", "a", "b", "c", "prod", "dev", "", "zzz"])
    return st.one_of(
        st.builds(lambda k, v: f"{k}={v}", key, value),
        st.builds(lambda k, v: f"{k}!={v}", key, value),
        st.builds(lambda k, vs: f"{k} in ({','.join(vs)})", key, st.lists(value, min_size=1, max_size=3)),
        st.builds(lambda k, vs: f"{k} notin ({','.join(vs)})", key, st.lists(value, min_size=1, max_size=3)),
        key,
        key.map(lambda k: f"!{k}"),
    )


def when() -> st.SearchStrategy[datetime]:
    return st.integers(0, 11 * 86400).map(lambda s: NOW - timedelta(seconds=s))


FILTERS = st.fixed_dictionaries({}, optional={
    "selector_text": st.lists(requirement(), max_size=3).map(",".join),
    "agent_ref": st.sampled_from(AGENTS),
    "states": st.lists(st.sampled_from(STATES), min_size=1, max_size=3, unique=True),
    "actor_states": st.lists(st.sampled_from(["running", "suspended", "paused"]), min_size=1, max_size=2, unique=True),
    "creator": st.sampled_from(CREATORS),
    "created_after": when(), "created_before": when(), "active_after": when(), "active_before": when(),
})


def as_sql_filter(f: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in f.items():
        if k == "selector_text":
            out["selector"] = [r.to_json() for r in parse_selector(v)]
        elif k == "agent_ref":
            continue
        elif isinstance(v, datetime):
            out[k] = v.isoformat()
        else:
            out[k] = v
    return out


@pytest.fixture(scope="module")
def population(pg_admin_url, template_database):
    """One database of 3,000 generated Sessions for the module (the tests only read it)."""
    name = f"sq_fleet_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    from conftest import _with_database

    url = _with_database(pg_admin_url, name)
    with psycopg.connect(url, autocommit=True) as conn:
        rows = populate(conn, 3000)
    yield url, rows
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.clause("FLEET-2")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(f=FILTERS, who=st.sampled_from([("alice", None, False), ("bob", None, False), ("admin", None, True),
                                       ("bob", "tok-live", False), ("alice", "tok-expired", False),
                                       ("carol", "tok-deleted", False), ("carol", "tok-unknown", False)]))
def test_search_and_count_agree_with_a_brute_force_filter(population, f, who):
    """Over what the caller may read: its own, the Session its share token grants (unexpired, live),
    everyone's for an administrator asking for it."""
    url, rows = population
    if "agent_ref" in f:
        f["namespace"], f["agent"] = f["agent_ref"]
    caller, share, all_creators = who
    sql_filter = as_sql_filter(f)
    if "namespace" in f:
        sql_filter["namespace"], sql_filter["agent"] = f["namespace"], f["agent"]
    expected = brute_force(rows, caller, share, all_creators, f)
    args = (caller, share, all_creators, Jsonb(sql_filter))
    with psycopg.connect(url) as conn:
        found: list[uuid.UUID] = []
        after = None
        while True:  # page through with ListSessions' cursor rule: after the last id, limit + 1
            ids = conn.execute("SELECT sessionq.search_session_ids(%s, %s, %s, %s, %s, %s)",
                               (*args, after, 101)).fetchone()[0]
            page = [uuid.UUID(r[0]["id"]) for r in conn.execute(
                "SELECT p FROM sessionq.search_sessions(%s, %s, %s, %s, %s, %s) p", (*args, after, 101)).fetchall()]
            views = conn.execute("SELECT ord, id FROM sessionq.search_session_views(%s, %s, %s, %s, %s, %s)",
                                 (*args, after, 101)).fetchall()
            # the page's ids, the rows of those ids as JSON and as SearchSessions' columns: one page
            assert ids == page
            assert views == [(i, str(sid)) for i, sid in enumerate(page, 1)]
            found += page[:100]
            if len(page) <= 100:
                break
            after = page[99]
        counted = conn.execute("SELECT sessionq.count_sessions(%s, %s, %s, %s)", args).fetchone()[0]
    assert found == expected
    assert counted == len(expected)


@pytest.mark.clause("FLEET-2")
def test_a_selective_label_filter_reads_the_index(database_url):
    """A label that 20 of 30,000 Sessions carry: the page and the count read sessions_label_terms_idx
    (a bitmap of the few matches), never the whole table; a key that 20 carry, the same index."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rev = conn.execute(
            "INSERT INTO sessionq.revisions (agent_namespace, agent_name, number, spec, spec_hash, image,"
            " template_atespace, template_name) VALUES ('kagent', 'a1', 1, '{}', 'h', 'img', 'ns', 'tpl') RETURNING id"
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO sessionq.sessions (creator, request_kind, request_id, request_fingerprint, agent_namespace,"
            " agent_name, revision_id, state, operation, actor_atespace, actor_name, actor_template, labels)"
            " SELECT CASE WHEN g %% 2 = 0 THEN 'alice' ELSE 'bob' END, 'create', 'r' || g, 'f', 'kagent', 'a1', %s,"
            " 'READY', 'NONE', 'ns', 'session-' || g, 'ns/tpl',"
            " CASE WHEN g %% 1500 = 0 THEN '{\"team\": \"rare\"}'::jsonb WHEN g %% 1500 = 1 THEN '{\"odd\": \"\"}'::jsonb"
            " WHEN g %% 7 = 0 THEN '{}'::jsonb ELSE jsonb_build_object('team', 'common', 'n', (g %% 50)::text) END"
            " FROM generate_series(1, 30000) g", (rev,))
        # as autovacuum leaves it: the GIN pending list merged into the index (20,000 labelled
        # inserts fill it: a small table's seq scan beats reading it), the statistics fresh
        conn.execute("VACUUM ANALYZE sessionq.sessions")
        for all_creators, selector, index in ((True, "team=rare", "sessions_label_terms_idx"),
                                              (False, "team=rare", "sessions_label_terms_idx"),
                                              (True, "team in (rare,gone)", "sessions_label_terms_idx"),
                                              (True, "odd", "sessions_label_terms_idx"),
                                              (False, "odd,!n", "sessions_label_terms_idx")):
            sql = conn.execute("SELECT sessionq.session_filter_sql('alice', NULL, %s, %s)",
                               (all_creators, Jsonb({"selector": [r.to_json() for r in parse_selector(selector)]}))
                               ).fetchone()[0]
            for query in (f"SELECT t.id FROM sessionq.sessions t WHERE {sql} ORDER BY t.id LIMIT 51",
                          f"SELECT count(*) FROM sessionq.sessions t WHERE {sql}"):
                plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + query).fetchall())
                assert index in plan, (selector, plan)
                assert "Seq Scan" not in plan, plan
        n = conn.execute("SELECT sessionq.count_sessions('x', NULL, true, %s)",
                         (Jsonb({"selector": [{"key": "team", "op": "in", "values": ["rare"]}]}),)).fetchone()[0]
        assert n == 20


@pytest.mark.clause("FLEET-2")
def test_a_label_pair_is_answered_by_its_index_and_follows_the_labels(database_url):
    """Equality, set membership and existence compare the labels' terms (sessions.label_terms: the
    pairs and the keys), whose GIN index is exact: neither the page's plan nor the count's reads a
    row's labels again (an index of the jsonb hashes its entries, so every match's labels were
    rechecked, the last columns of a wide row). The terms follow the labels: set at creation,
    changed, replaced and removed (set_session_labels)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rev = conn.execute(
            "INSERT INTO sessionq.revisions (agent_namespace, agent_name, number, spec, spec_hash, image,"
            " template_atespace, template_name) VALUES ('kagent', 'a1', 1, '{}', 'h', 'img', 'ns', 'tpl') RETURNING id"
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO sessionq.sessions (creator, request_kind, request_id, request_fingerprint, agent_namespace,"
            " agent_name, revision_id, state, operation, actor_atespace, actor_name, actor_template, labels)"
            " SELECT 'alice', 'create', 'r' || g, 'f', 'kagent', 'a1', %s, 'READY', 'NONE', 'ns', 'session-' || g,"
            " 'ns/tpl', CASE WHEN g %% 1000 = 0 THEN '{\"team\": \"rare\"}'::jsonb"
            " ELSE jsonb_build_object('team', 'common', 'n', (g %% 50)::text) END"
            " FROM generate_series(1, 20000) g", (rev,))
        # as autovacuum leaves it: the GIN pending list merged into the index (20,000 labelled
        # inserts fill it: a small table's seq scan beats reading it), the statistics fresh
        conn.execute("VACUUM ANALYZE sessionq.sessions")
        for all_creators in (True, False):
            for selector in ("team=rare", "team in (rare,gone)"):
                sql = conn.execute("SELECT sessionq.session_filter_sql('alice', NULL, %s, %s)",
                                   (all_creators, Jsonb({"selector": [r.to_json() for r in parse_selector(selector)]}))
                                   ).fetchone()[0]
                for query in (f"SELECT t.id FROM sessionq.sessions t WHERE {sql} ORDER BY t.id LIMIT 51",
                              f"SELECT count(*) FROM sessionq.sessions t WHERE {sql}"):
                    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (VERBOSE) " + query).fetchall())
                    assert "sessions_label_terms_idx" in plan, plan
                    assert "t.labels" not in plan, plan

        def found(selector: str) -> list[uuid.UUID]:
            f = Jsonb({"selector": [r.to_json() for r in parse_selector(selector)]})
            ids = conn.execute("SELECT sessionq.search_session_ids('alice', NULL, false, %s, NULL, 50000)", (f,)).fetchone()[0]
            assert conn.execute("SELECT sessionq.count_sessions('alice', NULL, false, %s)", (f,)).fetchone()[0] == len(ids)
            return ids

        one = conn.execute("SELECT id FROM sessionq.sessions WHERE request_id = 'r1'").fetchone()[0]
        assert one not in found("team=rare") and one in found("team=common")

        def relabel(set_: dict[str, str], remove: list[str], replace: bool) -> None:
            conn.execute("SELECT sessionq.set_session_labels(%s, 'alice', NULL, %s, %s, %s)",
                         (one, Jsonb(set_), remove, replace))

        relabel({"team": "rare"}, [], False)
        assert one in found("team=rare") and one in found("n=1") and one not in found("team=common")
        relabel({"tier": "gold"}, [], True)
        assert one in found("tier in (gold,silver)") and one not in found("team in (rare,common)")
        assert one not in found("n=1") and one in found("team notin (rare)")
        # a key is a term of its own: existence matches the key, never a value of that name
        assert one in found("tier") and one not in found("team") and one not in found("gold")
        # nor a pair's term, even asked for directly in SQL with a key no label can have
        pair_as_key = Jsonb({"selector": [{"key": '{"tier": "gold"}', "op": "exists"}]})
        assert conn.execute("SELECT sessionq.count_sessions('alice', NULL, false, %s)", (pair_as_key,)).fetchone() == (0,)
        relabel({}, ["tier"], False)
        assert conn.execute("SELECT labels, label_terms FROM sessionq.sessions WHERE id = %s", (one,)).fetchone() \
            == ({}, None)
        assert one not in found("tier=gold") and one in found("tier notin (gold)") and one in found("!tier")
        assert one not in found("tier")
