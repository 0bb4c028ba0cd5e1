"""Runtime revision garbage collection and its metrics (GC-*), and a metrics scrape."""

import asyncio
import logging
import socket
import urllib.request

import pytest
from conftest import apply_agent
from lifecycle import ready_session
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from sessionq import metrics
from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
from sessionq.domain.gc import collect_revisions
from sessionq.domain.operations import OperationExecutor
from sessionq.metrics import RevisionGcMetrics


async def new_revision(store, sim, template):
    spec = parse_spec({"name": "my-first-agent", "template": template})
    await store.apply_agent("kagent", spec.name, spec.to_json(), spec.spec_hash(), spec.image, compile_egress(spec), "alice")
    agent = await store.get_agent("kagent", spec.name)
    await prepare_revision(store, sim, agent.desired_revision_id)
    return agent.desired_revision_id


def scrape(collector) -> dict:
    registry = CollectorRegistry()
    registry.register(collector)
    from prometheus_client import generate_latest

    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


async def templates(sim):
    async with sim._pool.connection() as conn:  # the simulator's own view of the runtime
        cur = await conn.execute("SELECT name FROM substrate_sim.templates ORDER BY name")
        return [r[0] for r in await cur.fetchall()]


@pytest.mark.clause("GC-1")
async def test_only_unreferenced_revisions_are_collected(store, sim, database_url):
    a1 = await apply_agent(store, sim)
    r1 = a1.latest_successful_revision_id
    pinned = await ready_session(store, sim, "pins-r1")  # a live Session pins r1
    r2 = await new_revision(store, sim, "image:2")
    r3 = await new_revision(store, sim, "image:3")  # the Agent now references r3 only
    m = RevisionGcMetrics()
    result = await collect_revisions(store, sim, database_url, "w", metrics=m)
    assert result.leader and result.pending == 1 and result.collected == 1  # r2: nothing references it
    revs = {r.id: r for r in await store.agent_revisions("kagent", "my-first-agent")}
    names = await templates(sim)
    assert revs[r1].template_name in names and revs[r3].template_name in names and revs[r2].template_name not in names
    # once the Session is deleted, r1 becomes collectable; markers are never cleared
    await store.admit_operation(pinned.id, "alice", None, "DELETE")
    await OperationExecutor(store, sim, 30).run(pinned.id)
    result = await collect_revisions(store, sim, database_url, "w", metrics=m)
    assert result.collected == 1 and revs[r1].template_name not in await templates(sim)
    async with store.pool.connection() as conn:
        marks = await (await conn.execute(
            "SELECT count(*) AS n FROM sessionq.revisions WHERE gc_marked_at IS NOT NULL AND gc_collected_at IS NOT NULL")).fetchone()
    assert marks["n"] == 2


@pytest.mark.clause("GC-1")
@pytest.mark.clause("GC-4")
async def test_uid_protection_and_failure_logs(store, sim, database_url, caplog):
    await apply_agent(store, sim)
    old = await new_revision(store, sim, "image:old")
    await new_revision(store, sim, "image:new")
    rev = await store.get_revision(old)
    # the runtime's template of that name was replaced: another UID is never deleted
    await sim.delete_actor_template(rev.template_atespace, rev.template_name, rev.template_uid)
    replacement = await sim.create_actor_template(rev.template_atespace, rev.template_name, "other")
    m = RevisionGcMetrics()
    with caplog.at_level(logging.ERROR, logger="sessionq.gc"):
        result = await collect_revisions(store, sim, database_url, "w", metrics=m)
    assert result.failed >= 1
    assert (await sim.get_actor_template(rev.template_atespace, rev.template_name)).uid == replacement.uid
    record = next(r for r in caplog.records if r.getMessage() == "revision GC collection failed" and r.revision == str(old))
    assert record.actor_template_atespace == "kagent" and record.actor_template_name == rev.template_name
    assert "uid" in record.error.lower()
    async with store.pool.connection() as conn:  # still marked, never collected, never unmarked
        row = await (await conn.execute("SELECT gc_marked_at, gc_collected_at FROM sessionq.revisions WHERE id = %s",
                                        (old,))).fetchone()
    assert row["gc_marked_at"] is not None and row["gc_collected_at"] is None


@pytest.mark.clause("GC-2")
async def test_pending_gauge_semantics(store, sim, database_url):
    await apply_agent(store, sim)
    m = RevisionGcMetrics()
    assert "kagent_runtime_revision_gc_pending" not in scrape(m)  # absent before the first discovery
    await collect_revisions(store, sim, database_url, "w", metrics=m)
    gauge = scrape(m)["kagent_runtime_revision_gc_pending"]
    assert gauge.samples[0].value == 0  # a successful empty discovery
    await new_revision(store, sim, "image:2")
    await sim.inject("delete_actor_template", "fail_before", times=None)
    await collect_revisions(store, sim, database_url, "w", metrics=m)
    assert scrape(m)["kagent_runtime_revision_gc_pending"].samples[0].value == 1
    # a discovery error keeps the last count
    async with store.pool.connection() as conn:
        await conn.execute("ALTER FUNCTION sessionq.gc_discover() RENAME TO gc_discover_away")
    try:
        await collect_revisions(store, sim, database_url, "w", metrics=m)
    finally:
        async with store.pool.connection() as conn:
            await conn.execute("ALTER FUNCTION sessionq.gc_discover_away() RENAME TO gc_discover")
    assert scrape(m)["kagent_runtime_revision_gc_pending"].samples[0].value == 1
    # a standby replica (another holds the leadership) exports no gauge
    from sessionq.db.leader import leadership

    standby = RevisionGcMetrics()
    standby.pending, standby.active = 5, True
    async with leadership(database_url, "revision_gc", "other") as held:
        assert held
        assert not (await collect_revisions(store, sim, database_url, "w", metrics=standby)).leader
    assert "kagent_runtime_revision_gc_pending" not in scrape(standby)
    # a restart rebuilds it from PostgreSQL; GC stopping removes it
    restarted = RevisionGcMetrics()
    await collect_revisions(store, sim, database_url, "w", metrics=restarted)
    assert scrape(restarted)["kagent_runtime_revision_gc_pending"].samples[0].value == 1
    restarted.stop()
    assert "kagent_runtime_revision_gc_pending" not in scrape(restarted)


@pytest.mark.clause("GC-3")
async def test_duration_histogram_labels(store, sim, database_url):
    await apply_agent(store, sim)
    await new_revision(store, sim, "image:2")
    await new_revision(store, sim, "image:3")
    m = RevisionGcMetrics()
    await sim.inject("delete_actor_template", "fail_before", code=__import__("sessionq.runtime.base", fromlist=["Code"]).Code.UNAVAILABLE)
    await collect_revisions(store, sim, database_url, "w", metrics=m)  # discovery ok, collection fails
    await sim.inject("delete_actor_template", "delay", delay=5.0)
    await collect_revisions(store, sim, database_url, "w", metrics=m, deadline=0.3)  # a deadline is a failure
    hist = scrape(m)["kagent_runtime_revision_gc_duration_seconds"]
    counts = {tuple(sorted((k, v) for k, v in s.labels.items())): s.value for s in hist.samples if s.name.endswith("_count")}
    assert counts[(("kagent_gc_stage", "discovery"),)] == 2  # no error_type on success
    assert counts[(("error_type", "UNAVAILABLE"), ("kagent_gc_stage", "collection"))] == 1
    assert counts[(("error_type", "DEADLINE_EXCEEDED"), ("kagent_gc_stage", "collection"))] == 1
    # a cancelled attempt (the parent stops) is not recorded
    before = sum(counts.values())
    block = await sim.inject("delete_actor_template", "block")
    task = asyncio.create_task(collect_revisions(store, sim, database_url, "w", metrics=m))
    await sim.wait_blocked(block)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await sim.release(block)
    hist = scrape(m)["kagent_runtime_revision_gc_duration_seconds"]
    after = sum(s.value for s in hist.samples if s.name.endswith("_count"))
    assert after == before + 1  # only that run's discovery


async def test_metrics_endpoint_scrape_parses():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics.serve(f"127.0.0.1:{port}")
    metrics.SESSION_EXPIRED.inc(0)
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
    names = {f.name for f in text_string_to_metric_families(body)}
    assert {"kagent_session_expired", "sessionq_grpc_requests", "sessionq_operations",
            "sessionq_quiescence_latency_seconds", "sessionq_queue_depth"} <= names
