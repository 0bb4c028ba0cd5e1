"""Sessions in bulk, with SQL, for the burst and expiry scenarios.

One real READY Session is created through the executor (admission, claim, Actor and egress
policy in the simulator, completion); it is the template. `clone_sessions` then copies its row
N times with INSERT ... SELECT FROM generate_series: fresh uuid_v7 ids, unique request ids
(`<prefix>-<i>`), deterministic Actor names `session-<id>` and new Actor UIDs - everything else
(revision, template, fingerprint, state READY, operation NONE) as the template has it, so every
CHECK constraint holds. `clone_actors` gives each clone its Actor in the simulator's tables (a
copy of the template's Actor and egress policy), so runtime calls on them are real ones.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg

from tests.bench.common import AGENT, NAMESPACE, USER

SESSION_COLUMNS = (
    "id", "creator", "request_kind", "request_id", "request_fingerprint", "agent_namespace", "agent_name",
    "revision_id", "name", "state", "operation", "operation_id", "actor_atespace", "actor_name", "actor_template",
    "actor_uid", "created_at", "updated_at",
)


async def template_session(url: str, request_id: str = "bulk-template", *, sim_workers: int = 256) -> UUID:
    """One READY Session made the normal way (the clones' template)."""
    from sessionq.db.store import Store
    from sessionq.domain.operations import OperationExecutor
    from sessionq.runtime.simulator import SimulatedSubstrate

    store = await Store.open(url, pool_size=2, listen=False, name="bench-bulk")
    sim = SimulatedSubstrate(url, worker_pool_size=sim_workers)
    await sim.open()
    try:
        adm = await store.admit_create(USER, request_id, NAMESPACE, AGENT, "")
        out = await OperationExecutor(store, sim, 120).run(adm.session.id)
        assert out.status == "completed" and out.session is not None, out
        return out.session.id
    finally:
        await sim.close()
        await store.close()


def clone_sessions(conn: psycopg.Connection[Any], template: UUID, n: int, prefix: str, *,
                   age_seconds: float = 0.0, quiet: bool = True, creator: str | None = None) -> int:
    """Insert n copies of the template Session (READY, idle clock `age_seconds` in the past),
    of the template's creator or of `creator`.

    quiet: insert with session_replication_role = replica (no per-row NOTIFY trigger; needs a
    superuser) when allowed; foreign keys are not checked then, and they hold by construction."""
    cols = ", ".join(SESSION_COLUMNS)
    sql = f"""
        INSERT INTO sessionq.sessions ({cols})
        SELECT g.id, coalesce(%(creator)s, t.creator), 'create', %(prefix)s || '-' || g.i, t.request_fingerprint, t.agent_namespace,
               t.agent_name, t.revision_id, '', 'READY', 'NONE', t.operation_id, t.actor_atespace,
               'session-' || g.id, t.actor_template, gen_random_uuid()::text,
               clock_timestamp() - make_interval(secs => %(age)s), clock_timestamp() - make_interval(secs => %(age)s)
          FROM (SELECT i, sessionq.uuid_v7() AS id FROM generate_series(1, %(n)s) AS i) AS g
         CROSS JOIN sessionq.sessions AS t
         WHERE t.id = %(tpl)s
    """
    with conn.transaction():
        if quiet:
            _try_replica(conn)
        cur = conn.execute(sql, {"prefix": prefix, "n": n, "tpl": template, "age": age_seconds, "creator": creator})  # type: ignore[arg-type]
        count = cur.rowcount
        if quiet:
            conn.execute("SET LOCAL session_replication_role = origin")
    return count


def clone_actors(conn: psycopg.Connection[Any], template: UUID, prefix: str) -> int:
    """The simulator's Actors (SUSPENDED) and egress policies of the clones named `<prefix>-*`,
    copied from the template Session's Actor."""
    with conn.transaction():
        cur = conn.execute(
            """
            INSERT INTO substrate_sim.actors (atespace, name, uid, template, state, worker, version, env, durable)
            SELECT a.atespace, s.actor_name, s.actor_uid, a.template, 'ACTOR_STATE_SUSPENDED', NULL, 1, a.env, a.durable
              FROM sessionq.sessions s
              JOIN sessionq.sessions t ON t.id = %(tpl)s
              JOIN substrate_sim.actors a ON a.atespace = t.actor_atespace AND a.name = t.actor_name
             WHERE s.request_id LIKE %(like)s AND s.creator = t.creator AND s.request_kind = 'create'
            """, {"tpl": template, "like": prefix + "-%"})
        count = cur.rowcount
        conn.execute(
            """
            INSERT INTO substrate_sim.egress_policies (actor_uid, atespace, actor_name, rules)
            SELECT s.actor_uid, s.actor_atespace, s.actor_name, p.rules
              FROM sessionq.sessions s
              JOIN sessionq.sessions t ON t.id = %(tpl)s
              JOIN substrate_sim.egress_policies p ON p.actor_uid = t.actor_uid
             WHERE s.request_id LIKE %(like)s AND s.creator = t.creator AND s.request_kind = 'create'
            """, {"tpl": template, "like": prefix + "-%"})
    return count


def _try_replica(conn: psycopg.Connection[Any]) -> None:
    try:
        with conn.transaction():  # a savepoint: a refusal must not abort the outer transaction
            conn.execute("SET LOCAL session_replication_role = replica")
    except psycopg.errors.InsufficientPrivilege:
        pass
