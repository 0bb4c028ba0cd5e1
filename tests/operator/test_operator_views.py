"""Every operator view queried against a database with something in it, and the COMMENT ON of
every object of schema/80_operator_views.sql."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from importlib import resources
from typing import Any

from lifecycle import ready_session, turn_by_store
from ophelpers import cli_fixture, db_fixture, dead_worker, defer, live_worker, make_doing, make_failed, ops_fixture, q  # noqa: F401 (fixtures)

from sessionq.db.operator_store import VIEWS


async def test_every_view_shows_the_state_of_the_system(db, ops, store, sim):
    from sessionq.domain.quiescence import QuiescencePool, claim_and_quiesce

    ready = await ready_session(store, sim, "req-ready")
    turn = await turn_by_store(store, sim, ready)
    await claim_and_quiesce(QuiescencePool(store, sim, "", listen=False))  # its snapshot, for the checkpoint
    idle = await ready_session(store, sim, "req-idle")
    await turn_by_store(store, sim, idle)  # settled: an idle boundary waits for quiescence
    pending = (await store.admit_create("alice", "req-pending", "kagent", "my-first-agent", "")).session
    claimed = await ready_session(store, sim, "req-claimed")
    suspend = await store.admit_operation(claimed.id, "alice", None, "SUSPEND")
    executor = uuid.uuid4()
    await store.claim_operation(claimed.id, suspend.generation, executor, 60)
    checkpoint = await store.admit_checkpoint(ready.id, "alice", "cp-1", turn)

    dead = await dead_worker(db, 300, name="dead-w")
    await live_worker(db, name="live-w")
    stalled = await defer(db, "optest_sleep", {"key": "s", "seconds": 1})
    await make_doing(db, stalled, dead)
    failed = await defer(db, "optest_sleep", {"key": "f", "seconds": 1})
    await make_failed(db, failed)

    views: dict[str, list[dict[str, Any]]] = {name: await ops.view(name) for name in VIEWS}

    overview = {r["session_id"]: r for r in views["session_overview"]}
    assert overview[idle.id]["state"] == "READY" and overview[idle.id]["idle_boundary_id"] is not None
    assert overview[pending.id]["operation"] == "CREATE" and overview[pending.id]["claim_state"] is None
    c = overview[claimed.id]
    assert (c["operation"], c["generation"], c["claim_holder"], c["claim_state"]) == (
        "SUSPEND", suspend.generation, executor, "live")
    assert c["delete_blockers"] and "suspend operation is pending" in c["delete_blockers"][0]
    assert overview[pending.id]["delete_blockers"] == []  # never claimed: a delete supersedes it
    assert any("checkpoint is being created" in b for b in overview[ready.id]["delete_blockers"])

    ops_ = {r["session_id"]: r for r in views["pending_operations"]}
    assert set(ops_) == {pending.id, claimed.id}
    assert ops_[pending.id]["kind"] == "CREATE" and ops_[pending.id]["job_status"] == "todo"
    assert dt.timedelta(0) <= ops_[pending.id]["age"] < dt.timedelta(minutes=1)
    assert ops_[claimed.id]["claim_holder"] == executor and ops_[claimed.id]["job_id"] is not None

    claims = {(r["kind"], r["session_id"]): r for r in views["claims"]}
    assert claims[("operation", claimed.id)]["holder"] == executor
    assert claims[("operation", claimed.id)]["state"] == "live"

    backlog = {r["session_id"]: r for r in views["quiescence_backlog"]}
    assert backlog[idle.id]["status"] == "waiting" and backlog[idle.id]["waiting"] >= dt.timedelta(0)
    assert ready.id not in backlog

    (cp,) = views["checkpoints_overview"]
    assert cp["id"] == checkpoint.id and cp["state"] == "CREATING" and cp["live_forks"] == 0

    depth = {(r["queue_name"], r["status"]): r for r in views["queue_depth"]}
    assert depth[("operations", "todo")]["jobs"] >= 1 and depth[("operations", "todo")]["due"] >= 1
    assert depth[("operations", "todo")]["oldest_due_age"] is not None
    assert depth[("optest", "doing")]["jobs"] == 1 and depth[("optest", "failed")]["jobs"] == 1

    (s,) = views["stalled_jobs"]
    assert (s["job_id"], s["worker_name"], s["task_name"]) == (stalled, "dead-w", "optest_sleep")

    workers = {r["name"]: r for r in views["workers"]}
    assert workers["live-w"]["state"] == "running" and workers["live-w"]["queues"] == ["optest"]
    assert workers["dead-w"]["state"] == "stalled" and workers["dead-w"]["running_jobs"] == 1

    jobs = {r["job_id"]: r for r in views["job_overview"]}
    assert jobs[failed]["status"] == "failed" and jobs[failed]["status_since"] is not None
    assert jobs[stalled]["worker_name"] == "dead-w"

    (agent,) = views["agent_overview"]
    assert agent["name"] == "my-first-agent" and agent["desired_revision"] == 1 and agent["serving_revision"] == 1
    assert agent["desired_state"] == "READY" and agent["ready"] == "True" and agent["live_sessions"] == 4
    assert agent["spec"]["name"] == "my-first-agent"


async def test_the_stall_timeout_of_the_views_is_a_session_setting(db):
    dead = await dead_worker(db, 45)
    jid = await defer(db, "optest_sleep", {"key": "s", "seconds": 1})
    await make_doing(db, jid, dead)
    assert len(await q(db, "SELECT * FROM sessionq.stalled_jobs")) == 1  # default 30 s
    await q(db, "SET sessionq.stall_timeout = '60s'")
    assert await q(db, "SELECT * FROM sessionq.stalled_jobs") == []
    assert (await q(db, "SELECT state FROM sessionq.workers"))[0]["state"] == "running"
    await q(db, "RESET sessionq.stall_timeout")


def _objects_of_operator_schema() -> dict[str, set[str]]:
    text = resources.files("sessionq.schema").joinpath("80_operator_views.sql").read_text()
    found: dict[str, set[str]] = {"table": set(), "view": set(), "function": set()}
    for kind, name in re.findall(r"CREATE (?:OR REPLACE )?(TABLE|VIEW|FUNCTION)(?: IF NOT EXISTS)? sessionq\.(\w+)",
                                 text):
        found[kind.lower()].add(name)
    return found


async def test_every_table_view_and_function_is_commented(db):
    objects = _objects_of_operator_schema()
    assert {"worker_info", "worker_drains", "job_actions"} <= objects["table"]
    assert set(VIEWS) <= objects["view"] | {"checkpoints_overview"}
    missing = []
    for kind in ("table", "view"):
        for name in objects[kind]:
            (row,) = await q(db, "SELECT obj_description(to_regclass(%s), 'pg_class') AS c", f"sessionq.{name}")
            if not row["c"]:
                missing.append(f"{kind} {name}")
    for name in objects["function"]:
        rows = await q(db, "SELECT p.oid, obj_description(p.oid, 'pg_proc') AS c FROM pg_proc p"
                           " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'sessionq'"
                           " AND p.proname = %s", name)
        assert rows, name
        missing += [f"function {name}" for r in rows if not r["c"]]
    (trigger,) = await q(db, "SELECT obj_description(t.oid, 'pg_trigger') AS c FROM pg_trigger t"
                             " WHERE t.tgname = 'sessionq_cover_requeued_job'")
    assert trigger["c"]
    # the key columns of the views are explained too
    commented = await q(db, "SELECT c.relname, count(*) AS n FROM pg_description d JOIN pg_class c ON c.oid = d.objoid"
                            " JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = 'sessionq'"
                            " AND d.objsubid > 0 GROUP BY c.relname")
    per_view = {r["relname"]: r["n"] for r in commented}
    missing += [f"columns of {v}" for v in VIEWS if per_view.get(v, 0) < 2]
    assert not missing, missing
