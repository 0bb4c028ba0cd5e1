"""What the SQL bridge (schema/05_procrastinate.sql) assumes of procrastinate's schema, checked
against the live catalog of the test database (built by the migrations from the installed
procrastinate): the tables and columns it reads and writes, the job statuses and event types, the
versioned functions it wraps (with their signatures), the queueing-lock index its defer relies on,
and the NOTIFY channels and payload that wake workers.

An upgrade of procrastinate that changes any of these fails here, naming what changed; see
docs/operating.md, "Upgrading procrastinate". Every `procrastinate_...` name the SQL bridge uses
must be pinned below (test_every_name_the_sql_bridge_uses_is_pinned)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
SQL_BRIDGE = ROOT / "schema" / "05_procrastinate.sql"

# table -> column -> type (format_type without modifiers), for the columns the bridge uses
COLUMNS: dict[str, dict[str, str]] = {
    "procrastinate_jobs": {
        "id": "bigint",
        "queue_name": "character varying",
        "task_name": "character varying",
        "priority": "integer",
        "lock": "text",
        "queueing_lock": "text",
        "args": "jsonb",
        "status": "procrastinate_job_status",
        "scheduled_at": "timestamp with time zone",
        "attempts": "integer",
        "abort_requested": "boolean",
        "worker_id": "bigint",
    },
    "procrastinate_events": {
        "id": "bigint",
        "job_id": "bigint",
        "type": "procrastinate_job_event_type",
        "at": "timestamp with time zone",
    },
    "procrastinate_workers": {"id": "bigint", "last_heartbeat": "timestamp with time zone"},
}

# enum -> its values, in order (a new status or event type needs a decision in the bridge)
ENUMS: dict[str, list[str]] = {
    "procrastinate_job_status": ["todo", "doing", "succeeded", "failed", "cancelled", "aborting", "aborted"],
    "procrastinate_job_event_type": [
        "deferred", "started", "deferred_for_retry", "failed", "succeeded", "cancelled", "abort_requested",
        "aborted", "scheduled", "retried",
    ],
}

# function -> (identity arguments, result): the versioned functions the bridge wraps
FUNCTIONS: dict[str, tuple[str, str]] = {
    "procrastinate_finish_job_v1": ("job_id bigint, end_status procrastinate_job_status, delete_job boolean", "void"),
    "procrastinate_retry_job_v2": (
        "job_id bigint, retry_at timestamp with time zone, new_priority integer, new_queue_name character varying,"
        " new_lock character varying",
        "void",
    ),
    "procrastinate_cancel_job_v1": ("job_id bigint, abort boolean, delete_job boolean", "bigint"),
    "procrastinate_prune_stalled_workers_v1": ("seconds_since_heartbeat double precision", "TABLE(worker_id bigint)"),
    "procrastinate_fetch_job_v2": ("target_queue_names character varying[], p_worker_id bigint", "procrastinate_jobs"),
}

# NOTIFY channels procrastinate's workers LISTEN on (a queue's, every queue's) and the payload type
QUEUE_CHANNEL_PREFIX = "procrastinate_queue_v1#"
ANY_QUEUE_CHANNEL = "procrastinate_any_queue_v1"
WAKE_PAYLOAD_TYPE = "job_inserted"

PINNED = {*COLUMNS, *ENUMS, *FUNCTIONS, QUEUE_CHANNEL_PREFIX.rstrip("#"), ANY_QUEUE_CHANNEL}


def query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def test_every_name_the_sql_bridge_uses_is_pinned() -> None:
    used = set(re.findall(r"procrastinate_\w+", SQL_BRIDGE.read_text()))
    assert used, "the SQL bridge names none of procrastinate's objects: has it moved?"
    assert used <= PINNED, f"pin these in tests/bridge/test_bridge_sql.py: {sorted(used - PINNED)}"


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_the_columns_the_bridge_uses_exist_with_their_types(schema_url: str, table: str) -> None:
    rows = query(
        schema_url,
        "SELECT a.attname, format_type(a.atttypid, NULL), a.attnotnull, a.atthasdef OR a.attidentity <> ''"
        " FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
        table,
    )
    assert rows, f"procrastinate's table {table} is gone"
    actual = {name: kind for name, kind, _, _ in rows}
    expected = COLUMNS[table]
    changed = {c: (t, actual.get(c)) for c, t in expected.items() if actual.get(c) != t}
    assert not changed, f"{table}: columns changed (expected, found): {changed}"
    if table == "procrastinate_jobs":
        # sessionq.defer_job inserts rows naming only the pinned columns: any other must be optional
        required = [name for name, _, not_null, has_default in rows
                    if name not in expected and not_null and not has_default]
        assert not required, f"procrastinate_jobs has new required columns defer_job does not set: {required}"


@pytest.mark.parametrize("enum", sorted(ENUMS))
def test_the_statuses_and_event_types_are_pinned(schema_url: str, enum: str) -> None:
    rows = query(schema_url, "SELECT e.enumlabel FROM pg_enum e WHERE e.enumtypid = to_regtype(%s)"
                 " ORDER BY e.enumsortorder", enum)
    assert [r[0] for r in rows] == ENUMS[enum]


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_the_wrapped_functions_keep_their_signatures(schema_url: str, function: str) -> None:
    rows = query(schema_url, "SELECT pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid)"
                 " FROM pg_proc p WHERE p.proname = %s", function)
    assert rows == [FUNCTIONS[function]], f"{function}: found {rows}"


def test_the_queueing_lock_index_serves_defer_jobs_on_conflict(schema_url: str) -> None:
    """sessionq.defer_job inserts with ON CONFLICT (queueing_lock) WHERE status = 'todo': that needs
    exactly this unique partial index."""
    rows = query(
        schema_url,
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i"
        " WHERE i.indrelid = 'procrastinate_jobs'::regclass AND i.indisunique"
        "   AND pg_get_expr(i.indpred, i.indrelid) = '(status = ''todo''::procrastinate_job_status)'"
        "   AND i.indnatts = 1 AND i.indkey[0] = (SELECT attnum FROM pg_attribute"
        "        WHERE attrelid = 'procrastinate_jobs'::regclass AND attname = 'queueing_lock')",
    )
    assert len(rows) == 1, "the unique index on procrastinate_jobs (queueing_lock) WHERE status = 'todo' changed"


def test_the_foreign_keys_the_bridge_relies_on(schema_url: str) -> None:
    """Deleting a job row deletes its events (finish_operation_job deletes rows as procrastinate
    does); pruning a worker leaves its jobs with no worker (find_stalled_jobs sees them)."""
    rows = query(
        schema_url,
        "SELECT c.conrelid::regclass::text, a.attname, c.confrelid::regclass::text, c.confdeltype"
        " FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]"
        " WHERE c.contype = 'f' AND c.conrelid IN ('procrastinate_jobs'::regclass, 'procrastinate_events'::regclass)",
    )
    assert ("procrastinate_events", "job_id", "procrastinate_jobs", "c") in rows  # ON DELETE CASCADE
    assert ("procrastinate_jobs", "worker_id", "procrastinate_workers", "n") in rows  # ON DELETE SET NULL


async def notifications(url: str, channels: list[str], action: str, *params: Any) -> list[tuple[str, dict[str, Any]]]:
    """Run `action` in its own transaction and return what `channels` received at its commit."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as listener:
        for channel in channels:
            await listener.execute(f'LISTEN "{channel}"')
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(action, params)
        got: list[tuple[str, dict[str, Any]]] = []
        gen = listener.notifies(timeout=1.0, stop_after=2 * len(channels))
        async for n in gen:
            got.append((n.channel, json.loads(n.payload)))
        return sorted(got, key=lambda c: c[0])


async def test_wake_workers_sends_what_procrastinates_insert_trigger_sends(database_url: str) -> None:
    """The payload wake_workers forges for a job made due by an UPDATE is the one procrastinate's
    insert trigger sends (on the channels its workers listen on): a worker cannot tell them apart."""
    channels = [QUEUE_CHANNEL_PREFIX + "bridge", ANY_QUEUE_CHANNEL]
    inserted = await notifications(database_url, channels, "SELECT sessionq.defer_job('bridge', 'noop', '{}', NULL)")
    assert [c for c, _ in inserted] == sorted(channels), inserted
    job_id = inserted[0][1]["job_id"]
    assert all(payload == {"type": WAKE_PAYLOAD_TYPE, "job_id": job_id} for _, payload in inserted), inserted
    woken = await notifications(database_url, channels, "SELECT sessionq.wake_workers('bridge', %s)", job_id)
    assert woken == inserted


async def test_the_events_the_bridge_reads_are_written(database_url: str) -> None:
    """sessionq.job_event_times reads procrastinate's events: a deferred job has deferred_at, a
    fetched one started_at, and status_since follows the latest status change."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        job_id = conn.execute("SELECT sessionq.defer_job('bridge', 'noop', '{}', NULL)").fetchone()[0]
        deferred_at, since, started_at = conn.execute(
            "SELECT * FROM sessionq.job_event_times(%s)", (job_id,)).fetchone()
        assert deferred_at is not None and since == deferred_at and started_at is None
        worker = conn.execute("INSERT INTO procrastinate_workers DEFAULT VALUES RETURNING id").fetchone()[0]
        fetched = conn.execute("SELECT id FROM procrastinate_fetch_job_v2(ARRAY['bridge'], %s)", (worker,)).fetchone()
        assert fetched == (job_id,)
        _, since, started_at = conn.execute(
            "SELECT * FROM sessionq.job_event_times(%s)", (job_id,)).fetchone()
        assert started_at is not None and since == started_at > deferred_at
        assert conn.execute("SELECT status::text, worker_id FROM sessionq.job_rows WHERE id = %s",
                            (job_id,)).fetchone() == ("doing", worker)
        assert conn.execute("SELECT count(*) FROM sessionq.worker_heartbeats WHERE worker_id = %s",
                            (worker,)).fetchone() == (1,)


async def test_the_bridge_wrappers_run_procrastinates_functions(database_url: str) -> None:
    """Each wrapper of a versioned function does what the operator procedures rely on."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        def status(job: int) -> tuple[str, int]:
            return conn.execute("SELECT status::text, attempts FROM sessionq.job_rows WHERE id = %s",
                                (job,)).fetchone()

        def defer(lock: str | None = None) -> int:
            return conn.execute("SELECT sessionq.defer_job('bridge', 'noop', '{}', %s)", (lock,)).fetchone()[0]

        worker = conn.execute("INSERT INTO procrastinate_workers DEFAULT VALUES RETURNING id").fetchone()[0]
        job = defer()
        conn.execute("SELECT procrastinate_fetch_job_v2(ARRAY['bridge'], %s)", (worker,))
        conn.execute("SELECT sessionq.finish_job(%s, 'failed')", (job,))
        assert status(job) == ("failed", 1)
        conn.execute("SELECT sessionq.retry_job_now(%s)", (job,))
        assert status(job) == ("todo", 2)
        assert conn.execute("SELECT sessionq.cancel_or_abort_job(%s, false)", (job,)).fetchone() == (job,)
        assert status(job) == ("cancelled", 2)
        conn.execute("SELECT sessionq.retry_job_now(%s)", (job,))  # procrastinate refuses; the bridge does it
        assert status(job) == ("todo", 3)
        with pytest.raises(psycopg.errors.RaiseException):
            conn.execute("SELECT sessionq.retry_job_now(%s)", (job,))  # already waiting
        conn.execute("UPDATE procrastinate_workers SET last_heartbeat = now() - interval '1 hour' WHERE id = %s",
                     (worker,))
        assert conn.execute("SELECT sessionq.prune_dead_workers(60)").fetchone() == (1,)


async def test_the_guard_trigger_covers_a_retry_that_collides(database_url: str) -> None:
    """The guard trigger on procrastinate_jobs: procrastinate's own retry of a job whose queueing
    lock a waiting job holds cancels it instead of violating the unique index."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        worker = conn.execute("INSERT INTO procrastinate_workers DEFAULT VALUES RETURNING id").fetchone()[0]
        running = conn.execute("SELECT sessionq.defer_job('bridge', 'noop', '{}', 'bridge:1')").fetchone()[0]
        conn.execute("SELECT procrastinate_fetch_job_v2(ARRAY['bridge'], %s)", (worker,))
        waiting = conn.execute("SELECT sessionq.defer_job('bridge', 'noop', '{}', 'bridge:1')").fetchone()[0]
        conn.execute("SELECT procrastinate_retry_job_v2(%s, now(), NULL, NULL, NULL)", (running,))
        assert conn.execute("SELECT status::text FROM sessionq.job_rows WHERE id = %s", (running,)).fetchone() == ("cancelled",)
        assert conn.execute("SELECT action, covered_by FROM sessionq.job_actions WHERE job_id = %s",
                            (running,)).fetchall() == [("covered", waiting)]


async def test_notifications_arrive_only_at_commit(database_url: str) -> None:
    """Deferring inside a lifecycle procedure relies on procrastinate's insert trigger notifying at
    commit: a rolled back defer wakes nobody."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listener:
        await listener.execute(f"LISTEN {ANY_QUEUE_CHANNEL}")
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await conn.execute("SELECT sessionq.defer_job('bridge', 'noop', '{}', NULL)")
            await conn.rollback()
        got = [n async for n in listener.notifies(timeout=0.5)]
        assert got == []
