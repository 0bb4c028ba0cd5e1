"""`sessionq workers|jobs|requeue|status`: both output formats, requeue of failed and stalled jobs
(a queueing-lock collision included), and bad arguments (one clear line, non-zero exit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ophelpers import (  # noqa: F401 (fixtures)
    cli_fixture,
    db_fixture,
    dead_worker,
    defer,
    job,
    live_worker,
    make_doing,
    make_failed,
    ok,
    one_line_error,
    ops_fixture,
    q,
)


async def test_workers_list(cli, db):
    empty = ok(await cli("workers", "list"))
    assert empty.stdout == "" and "No workers are running." in empty.stderr
    live = await live_worker(db, name="host-a-1")
    await dead_worker(db, 300, name="host-b-2")
    running = await defer(db, "optest_sleep", {"key": "x", "seconds": 1})
    await make_doing(db, running, live)

    table = ok(await cli("workers", "list")).stdout.splitlines()
    assert table[0].split() == ["NAME", "ID", "HOST", "PID", "QUEUES", "CONCURRENCY", "RUNNING", "HEARTBEAT",
                                "STATE", "AGE"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["host-a-1"][2:7] == ["livehost", "42", "optest", "3", "1"] and rows["host-a-1"][9] == "running"
    assert rows["host-b-2"][9] == "stalled" and rows["host-b-2"][7] == "5m"

    data = json.loads(ok(await cli("workers", "list", "-o", "json")).stdout)
    by_name = {w["name"]: w for w in data["workers"]}
    assert by_name["host-a-1"]["worker_id"] == live and by_name["host-a-1"]["running_jobs"] == 1
    assert by_name["host-b-2"]["state"] == "stalled" and by_name["host-b-2"]["heartbeat_age"] >= 300
    assert isinstance(by_name["host-a-1"]["last_heartbeat"], str) and by_name["host-a-1"]["last_heartbeat"].endswith("Z")


async def test_drain_all_with_no_workers_is_recorded(cli, db):
    out = ok(await cli("workers", "drain", "--all")).stdout
    assert "requested for 0 worker(s): no worker is running now" in out
    data = json.loads(ok(await cli("workers", "drain", "--all", "--timeout", "0s", "-o", "json")).stdout)
    assert data["worker"] == "*" and data["timeout"] == 0 and data["workers"] == []
    rows = await q(db, "SELECT worker, timeout, requested_by FROM sessionq.worker_drains ORDER BY id")
    assert [(r["worker"], r["timeout"]) for r in rows] == [("*", None), ("*", 0.0)] and rows[0]["requested_by"]


async def test_jobs_list_pages_newest_first_and_filters(cli, db):
    ids = [await defer(db, "optest_sleep", {"key": f"k{i}", "seconds": 1}) for i in range(5)]
    await make_failed(db, ids[1])
    first = ok(await cli("jobs", "list", "--limit", "2"))
    lines = first.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "QUEUE", "TASK", "STATUS"]
    assert [int(line.split()[0]) for line in lines[1:]] == [ids[4], ids[3]]
    assert f"--page-token {ids[3]}" in first.stderr
    second = json.loads(ok(await cli("jobs", "list", "--limit", "2", "--page-token", str(ids[3]), "-o", "json")).stdout)
    assert [j["job_id"] for j in second["jobs"]] == [ids[2], ids[1]] and second["next_page_token"] == str(ids[1])
    last = json.loads(ok(await cli("jobs", "list", "--limit", "2", "--page-token", str(ids[1]), "-o", "json")).stdout)
    assert [j["job_id"] for j in last["jobs"]] == [ids[0]] and last["next_page_token"] == ""
    failed = json.loads(ok(await cli("jobs", "list", "--status", "failed", "-o", "json")).stdout)["jobs"]
    assert [j["job_id"] for j in failed] == [ids[1]] and failed[0]["args"] == {"key": "k1", "seconds": 1}
    assert json.loads(ok(await cli("jobs", "list", "--queue", "operations", "-o", "json")).stdout)["jobs"] == []
    assert len(json.loads(ok(await cli("jobs", "list", "--task", "optest_sleep", "-o", "json")).stdout)["jobs"]) == 5
    none = ok(await cli("jobs", "list", "--task", "nothing"))
    assert none.stdout == "" and "No jobs found." in none.stderr


async def test_jobs_show_retry_and_cancel(cli, db):
    failed = await defer(db, "optest_sleep", {"key": "f", "seconds": 1})
    await make_failed(db, failed)
    shown = ok(await cli("jobs", "show", str(failed))).stdout
    assert "Task:" in shown and "optest_sleep" in shown and "EVENTS" in shown
    assert [line.split()[1] for line in shown.split("EVENTS")[1].splitlines()[2:]] == ["deferred", "started", "failed"]

    retried = ok(await cli("jobs", "retry", str(failed)))
    assert f"job {failed} (optest_sleep, was failed) is waiting to run again" in retried.stdout
    data = json.loads(ok(await cli("jobs", "show", str(failed), "-o", "json")).stdout)
    assert data["job"]["status"] == "todo" and data["events"][-1]["type"] == "retried"
    assert [(a["action"], a["detail"]) for a in data["actions"]] == [("requeued", "failed -> todo")]
    assert data["actions"][0]["actor"]

    line = one_line_error(await cli("jobs", "retry", str(failed)))
    assert "FAILED_PRECONDITION" in line and "already due" in line

    cancelled = json.loads(ok(await cli("jobs", "cancel", str(failed), "-o", "json")).stdout)
    assert cancelled == {"job_id": failed, "previous_status": "todo", "status": "cancelled", "action": "cancelled"}
    again = json.loads(ok(await cli("jobs", "retry", str(failed), "-o", "json")).stdout)  # cancelled -> todo
    assert again["action"] == "requeued" and again["previous_status"] == "cancelled"

    live = await live_worker(db)
    await make_doing(db, failed, live)
    line = one_line_error(await cli("jobs", "cancel", str(failed)))
    assert "use --abort" in line
    line = one_line_error(await cli("jobs", "retry", str(failed)))
    assert "is running on worker live-1" in line
    assert "abort requested" in ok(await cli("jobs", "cancel", str(failed), "--abort")).stdout
    assert (await job(db, failed))["abort_requested"] is True
    assert "NOT_FOUND: job 999999 not found" in one_line_error(await cli("jobs", "show", "999999"))
    assert "NOT_FOUND" in one_line_error(await cli("jobs", "retry", "999999"))


async def test_requeue_failed_with_a_queueing_lock_collision(cli, db):
    plain = await defer(db, "optest_sleep", {"key": "p", "seconds": 1})
    locked = await defer(db, "optest_sleep", {"key": "l", "seconds": 1}, queueing_lock="operation:l")
    old = await defer(db, "optest_sleep", {"key": "o", "seconds": 1})
    other = await defer(db, "optest_once", {"key": "t"})
    for jid in (plain, locked, old, other):
        await make_failed(db, jid)
    waiting = await defer(db, "optest_sleep", {"key": "l", "seconds": 1}, queueing_lock="operation:l")
    await q(db, "UPDATE procrastinate_events SET at = at - interval '2 hours' WHERE job_id = %s", old)

    dry = ok(await cli("requeue", "--failed", "--task", "optest_sleep", "--since", "1h", "--dry-run"))
    assert dry.stdout.splitlines()[0] == "2 failed job(s) matched (dry run: nothing changed):"
    assert "would cancel (covered)" in dry.stdout and "would requeue" in dry.stdout
    assert [(await job(db, j))["status"] for j in (plain, locked, old)] == ["failed"] * 3

    data = json.loads(ok(await cli("requeue", "--failed", "--queue", "optest", "--task", "optest_sleep",
                                   "--since", "1h", "-o", "json")).stdout)
    assert data["matched"] == 2 and data["counts"] == {"covered": 1, "requeued": 1} and not data["dry_run"]
    by_id = {r["job_id"]: r for r in data["jobs"]}
    assert by_id[plain]["action"] == "requeued"
    assert by_id[locked]["action"] == "covered" and by_id[locked]["covered_by"] == waiting
    assert [(await job(db, j))["status"] for j in (plain, locked, old, other)] == ["todo", "cancelled", "failed",
                                                                                     "failed"]
    table = ok(await cli("requeue", "--failed"))  # the rest: the old one and the other task's
    assert table.stdout.splitlines()[0] == "2 failed job(s) matched:" and "2 requeued" in table.stdout
    assert "0 failed jobs matched; nothing to requeue." in ok(await cli("requeue", "--failed")).stdout


async def test_requeue_stalled(cli, db):
    dead = await dead_worker(db, 120, name="gone-1")
    live = await live_worker(db)
    stalled = await defer(db, "optest_sleep", {"key": "s", "seconds": 1})
    busy = await defer(db, "optest_sleep", {"key": "b", "seconds": 1})
    await make_doing(db, stalled, dead)
    await make_doing(db, busy, live)
    assert "0 stalled jobs matched" in ok(await cli("requeue", "--stalled", "--stall-timeout", "10m")).stdout
    out = ok(await cli("requeue", "--stalled")).stdout
    assert out.splitlines()[0] == "1 stalled job(s) matched:" and "1 requeued" in out
    assert [(await job(db, j))["status"] for j in (stalled, busy)] == ["todo", "doing"]


async def test_status_screen(cli, db, store, sim):
    from lifecycle import ready_session

    empty = ok(await cli("status")).stdout
    assert "EXPIRY LEADER       -" in empty and "PENDING OPERATIONS  none" in empty
    await ready_session(store, sim, "req-s")
    await store.admit_create("alice", "req-p", "kagent", "my-first-agent", "")
    await live_worker(db, name="st-worker")
    await q(db, "INSERT INTO sessionq.leaders (role, holder, since, last_run)"
                " VALUES ('expiry', 'host-9-123', now() - interval '5 minutes', now() - interval '20 seconds')")
    text = ok(await cli("status")).stdout
    assert "READY 1" in text and "CREATING 1" in text
    assert "CREATE" in text.split("PENDING OPERATIONS")[1].splitlines()[2]
    assert "EXPIRY LEADER       host-9-123 (leader for 5m, last run 20s ago)" in text
    assert "st-worker" in text.split("WORKERS (1)")[1]
    queues = text.split("QUEUES")[1].split("WORKERS")[0]
    assert "operations" in queues and "dispatch" in queues  # known queues show even when empty
    data = json.loads(ok(await cli("status", "-o", "json")).stdout)
    assert data["sessions"] == {"READY": 1, "CREATING": 1}
    assert data["pending_operations"][0]["kind"] == "CREATE" and data["stalled_jobs"] == 0
    assert data["expiry_leader"]["holder"] == "host-9-123" and data["workers"][0]["name"] == "st-worker"
    assert {(q_["queue_name"], q_["status"]) for q_ in data["queues"]} >= {("operations", "todo")}


@pytest.mark.parametrize("args,code,fragment", [
    (["workers", "drain"], 2, "missing worker NAME"),
    (["workers", "drain", "a", "--all"], 2, "not both"),
    (["workers", "drain", "--all", "--timeout", "soon"], 2, "not a duration"),
    (["workers", "bogus"], 2, "No such command"),
    (["jobs", "list", "--status", "bogus"], 2, "'--status'"),
    (["jobs", "list", "--limit", "0"], 2, "'--limit'"),
    (["jobs", "list", "--page-token", "abc"], 2, "invalid --page-token"),
    (["jobs", "show", "abc"], 2, "'ID'"),
    (["jobs", "show"], 2, "Missing argument"),
    (["jobs", "cancel", "-5"], 2, "No such option"),
    (["requeue"], 2, "--failed or --stalled"),
    (["requeue", "--failed", "--stalled"], 2, "choose one"),
    (["requeue", "--failed", "--since", "0s"], 2, "longer than zero"),
    (["status", "--bogus"], 2, "No such option"),
])
async def test_bad_arguments_give_one_clear_line(cli, args, code, fragment):
    result = await cli(*args)
    line = one_line_error(result, code)
    assert fragment in line and "--help" in line


async def test_the_database_url_comes_from_option_env_or_client_config(cli, database_url, tmp_path: Path):
    no_url = {"SESSIONQ_DATABASE_URL": None}
    line = one_line_error(await cli("status", env=no_url))
    assert "no database URL" in line
    config = tmp_path / "client.yaml"
    config.write_text(f"server: 127.0.0.1:1\nuser: opal\ndatabaseUrl: {database_url}\n")
    ok(await cli("workers", "drain", "--all", env={**no_url, "SESSIONQ_CLIENT_CONFIG": str(config)}))
    ok(await cli("status", "--database-url", database_url, env=no_url))
    unreachable = "postgresql://nobody:secret@127.0.0.1:1/nowhere"
    line = one_line_error(await cli("workers", "list", "--database-url", unreachable))
    assert "cannot reach PostgreSQL at 127.0.0.1:1/nowhere" in line and "secret" not in line
    assert (await cli("workers", "list", env=no_url)).exit_code == 1
    import psycopg

    with psycopg.connect(database_url) as conn:
        (by,) = conn.execute("SELECT requested_by FROM sessionq.worker_drains").fetchone()
    assert by == "opal"  # the client config's user


async def test_tables_and_details_neutralise_control_sequences(cli, db):
    """Worker names and job arguments reach the operator's terminal as visible escapes, never as
    OSC/CSI sequences, BEL or CR (issue 15, item 4)."""
    import re

    control = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # a newline ends a line; anything else is an escape
    nasty = "w\x1b]0;pwned\x07\x1b[2J\rx\x9b1m"
    await live_worker(db, name=nasty)
    job_id = await defer(db, "optest_sleep", {"key": nasty, "seconds": 1})
    await make_failed(db, job_id)
    for args in (["workers", "list"], ["jobs", "list"], ["jobs", "show", str(job_id)], ["status"]):
        out = ok(await cli(*args)).stdout
        assert not control.search(out), (args, out)
        assert "pwned" in out, (args, out)  # shown, escaped (\x1b as text, or \u001b inside JSON arguments)
