"""docs/metrics.md lists every metric family sessionq registers (with its labels) and every alert it
names exists in deploy/prometheus/alerts.yaml; the exposition has no `_created` series; the overview
gauges follow the database."""

from __future__ import annotations

import re
from pathlib import Path

import sessionq.jobs.bridge  # noqa: F401 - registers nothing new, but imports what the workers import
from prometheus_client import REGISTRY, generate_latest

from sessionq import metrics
from sessionq.db.store import Store

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "metrics.md").read_text()
ALERTS = (ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text()


def families() -> dict[str, set[str]]:
    """name as exposed (counters with _total) -> label names, for sessionq's and kagent's families."""
    out: dict[str, set[str]] = {}
    for family in REGISTRY.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        if not name.startswith(("sessionq_", "kagent_")):
            continue
        labels = {k for s in family.samples for k in s.labels if k not in ("le", "quantile")}
        out[name] = labels
    return out


def documented() -> dict[str, str]:
    """name -> its table row in docs/metrics.md."""
    return {m.group(1): line for line in DOC.splitlines() if (m := re.match(r"\| `([a-z_]+)` \|", line))}


def test_every_metric_is_documented_with_its_labels() -> None:
    metrics.JOBS.labels(queue="q", status="todo").set(0)  # label children make the labels visible
    metrics.JOB_ATTEMPTS.labels(task="t", outcome="succeeded").inc(0)
    rows = documented()
    registered = families()
    assert registered, "no sessionq metric is registered"
    missing = sorted(set(registered) - set(rows))
    assert not missing, f"document in docs/metrics.md: {missing}"
    for name, labels in registered.items():
        for label in labels:
            assert f"`{label}`" in rows[name], f"{name}: label {label} is not documented"
    stale = sorted(set(rows) - set(registered) - {"kagent_runtime_revision_gc_pending"})  # absent until a discovery
    assert not stale, f"documented but not registered: {stale}"


def test_every_alert_the_doc_names_exists() -> None:
    named = {a.strip() for group in re.findall(r"\(((?:Sessionq|Kagent)[A-Za-z, ]*)\)", DOC) for a in group.split(",")}
    assert named
    defined = set(re.findall(r"- alert: (\w+)", ALERTS))
    assert named <= defined, sorted(named - defined)


def test_no_created_series() -> None:
    metrics.OPERATIONS.labels(kind="CREATE", outcome="admitted").inc(0)
    text = generate_latest(REGISTRY).decode()
    assert "sessionq_operations_total" in text
    assert "_created" not in text


async def test_the_overview_gauges_follow_the_database(store: Store, database_url: str) -> None:
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT sessionq.defer_job('gauges', 't', '{}'::jsonb, NULL)")
        conn.execute("SELECT sessionq.pause_queue('gauges', 'tester')")
    seen = metrics.set_overview(await store.gauge_stats(), set())
    assert "gauges" in seen
    assert metrics.JOBS.labels(queue="gauges", status="todo")._value.get() == 1
    assert metrics.QUEUE_PAUSED.labels(queue="gauges")._value.get() == 1
    assert metrics.SESSIONS.labels(state="READY")._value.get() == 0
    assert metrics.WORKERS.labels(state="running")._value.get() == 0
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT sessionq.resume_queue('gauges', 'tester')")
        conn.execute("DELETE FROM procrastinate_jobs WHERE queue_name = 'gauges'")
    metrics.set_overview(await store.gauge_stats(), seen)
    assert metrics.JOBS.labels(queue="gauges", status="todo")._value.get() == 0  # gone reads 0
    assert metrics.QUEUE_PAUSED.labels(queue="gauges")._value.get() == 0
