"""Operator commands: `workers`, `jobs`, `requeue` and `status`.

They talk to PostgreSQL directly (the job queue and the lifecycle tables), not to the API. The
database URL comes from --database-url, $SESSIONQ_DATABASE_URL, $SESSIONQ_DATABASE__URL (the
server's setting) or the client config's `databaseUrl` (written by `sessionq up`). Every query is
in sessionq.db.operator_store and the views and procedures of schema/80_operator_views.sql.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click
import psycopg
from click.exceptions import NoArgsIsHelpError
from sessionq.cli.client import (
    CliError,
    find_client_config,
    load_client_config,
    output_option,
    parse_duration,
    plain_table,
    printable,
)

from sessionq import config, errors
from sessionq.db.operator_store import JOB_STATUSES, SESSION_STATES, OperatorStore, Row, age, jsonable

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_STALL_TIMEOUT = "30s"
WAIT_GRACE = 60.0  # `workers drain --wait --timeout D` gives up D + this many seconds after the request
WAIT_POLL = 0.25


# -- one-line usage errors ----------------------------------------------------------------------

class OneLineUsageError(click.UsageError):
    """A bad argument: one line on stderr, `error: ...`, exit status 2."""

    def show(self, file: Any = None) -> None:
        hint = f" (see `{self.ctx.command_path} --help`)" if self.ctx is not None else ""
        click.echo(f"error: {printable(' '.join(self.format_message().split()))}{hint}", err=True, file=file)


class OperatorCommand(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except (OneLineUsageError, NoArgsIsHelpError):
            raise
        except click.UsageError as e:
            raise OneLineUsageError(e.format_message(), e.ctx or ctx) from None


class OperatorGroup(click.Group):
    command_class = OperatorCommand

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except (OneLineUsageError, NoArgsIsHelpError):
            raise
        except click.UsageError as e:
            raise OneLineUsageError(e.format_message(), e.ctx or ctx) from None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except (OneLineUsageError, NoArgsIsHelpError):
            raise
        except click.UsageError as e:
            raise OneLineUsageError(e.format_message(), e.ctx or ctx) from None


def usage(message: str) -> OneLineUsageError:
    return OneLineUsageError(message, click.get_current_context(silent=True))


class NonNegativeDuration(click.ParamType):
    """`30s`, `2m`, `1h30m`; 0s allowed (a drain with 0s aborts running jobs at once)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value).strip())
        except ValueError as e:
            self.fail(str(e), param, ctx)


class PositiveDuration(NonNegativeDuration):
    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        seconds = super().convert(value, param, ctx)
        if seconds <= 0:
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        return seconds


DURATION0 = NonNegativeDuration()
DURATION = PositiveDuration()


# -- the database ---------------------------------------------------------------------------------

def database_option(f: F) -> F:
    return click.option(
        "--database-url", "database_url", envvar="SESSIONQ_DATABASE_URL", metavar="URL",
        help="PostgreSQL URL (or $SESSIONQ_DATABASE_URL; else $SESSIONQ_DATABASE__DIRECT_URL or "
             "$SESSIONQ_DATABASE__URL, else the client config's databaseUrl, which `sessionq up` writes).",
    )(f)


def _client_config(ctx: click.Context) -> dict[str, Any]:
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    return load_client_config(find_client_config(obj.get("client_config")))


def resolve_database_url(ctx: click.Context, explicit: str | None) -> str:
    if explicit:
        return explicit
    # in a pod both may be set: database.directUrl reaches the server itself, database.url may be a pooler
    for name in ("SESSIONQ_DATABASE__DIRECT_URL", "SESSIONQ_DATABASE__URL"):
        if os.environ.get(name):
            return os.environ[name]
    url = _client_config(ctx).get("databaseUrl")
    if url:
        return str(url)
    raise CliError("no database URL: pass --database-url, set SESSIONQ_DATABASE_URL, "
                   "or start `sessionq up` (it writes databaseUrl to the client config)")


def operator_name(ctx: click.Context) -> str:
    """Who is acting, recorded with drains and job actions: the client config's user, else the OS user."""
    try:
        user = _client_config(ctx).get("user")
    except CliError:
        user = None
    return str(user) if user else getpass.getuser()


def where(url: str) -> str:
    """host:port/database of a URL, without credentials (for error lines)."""
    try:
        parts = urlsplit(url)
        if parts.scheme.startswith("postgres"):
            host = parts.hostname or "localhost"
            port = f":{parts.port}" if parts.port else ""
            return f"{host}{port}{parts.path or ''}"
    except ValueError:
        pass
    return "the configured database"


def run(ctx: click.Context, explicit_url: str | None, action: Callable[[OperatorStore], Awaitable[T]]) -> T:
    """Connect, run `action`, and turn every failure into one clear error line."""
    url = resolve_database_url(ctx, explicit_url)

    async def go() -> T:
        async with OperatorStore.connect(url) as ops:
            return await action(ops)

    try:
        return asyncio.run(go())
    except errors.SessionqError as e:
        raise CliError(f"{e.code.name}: {e.message}") from None
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName):
        raise CliError(f"the database at {where(url)} has no sessionq schema (or an old one); "
                       "run `sessionq migrate --database-url ...`") from None
    except psycopg.OperationalError as e:
        reason = " ".join(str(e).strip().splitlines()[-1:]) or "connection failed"
        raise CliError(f"cannot reach PostgreSQL at {where(url)}: {reason}") from None
    except psycopg.Error as e:
        raise CliError(f"database error: {' '.join(str(e).split())}") from None


# -- output helpers -----------------------------------------------------------------------------------

def echo_json(data: Any) -> None:
    click.echo(json.dumps(jsonable(data), indent=2, default=str))


def dash(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def compact(value: Any, width: int = 60) -> str:
    text = json.dumps(value, separators=(",", ":"), default=str) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 1] + "…"


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "the worker's shutdown timeout"
    return f"{seconds:g}s"


def workers_table(rows: Sequence[Row]) -> str:
    return plain_table(
        ["NAME", "ID", "HOST", "PID", "QUEUES", "CONCURRENCY", "RUNNING", "HEARTBEAT", "STATE", "AGE"],
        [[r["name"] or "<unknown>", r["worker_id"], dash(r["host"]), dash(r["pid"]),
          dash(r["queues"]) if r["name"] else "-", dash(r["concurrency"]), r["running_jobs"],
          age(r["heartbeat_age"]) + " ago", r["state"] + (" (drain requested)" if r["state"] == "running"
                                                          and r["drain_requested_at"] else ""),
          age(r["started_at"])] for r in rows],
    )


def last_error(r: Row) -> str:
    if not r.get("last_error_type"):
        return "-"
    return compact(f"{r['last_error_type'].rpartition('.')[2]}: {r.get('last_error_message') or ''}", 60)


def jobs_table(rows: Sequence[Row]) -> str:
    return plain_table(
        ["ID", "QUEUE", "TASK", "STATUS", "ATTEMPTS", "WORKER", "AGE", "QUEUEING-LOCK", "ARGS", "LAST-ERROR"],
        [[r["job_id"], r["queue_name"], r["task_name"], r["status"] + (" (abort requested)" if r["abort_requested"]
                                                                        and r["status"] == "doing" else ""),
          r["attempts"], dash(r["worker_name"] or r["worker_id"]), age(r["status_age"]), dash(r["queueing_lock"]),
          compact(r["args"]), last_error(r)] for r in rows],
    )


def actions_table(rows: Sequence[Row]) -> str:
    return plain_table(
        ["ID", "QUEUE", "TASK", "WAS", "ACTION", "DETAIL"],
        [[r["job_id"], dash(r["queue_name"]), dash(r["task_name"]), dash(r["previous_status"]), r["action"],
          dash(r["detail"])] for r in rows],
    )


# -- webhook deliveries (an operator command of `sessionq webhooks`) -----------------------------------

WEBHOOK_DELIVERY_STATES = ("pending", "delivered", "failed")


@click.command("deliveries", cls=OperatorCommand)
@click.option("--subscription", type=click.UUID, metavar="ID", help="Only this subscription's deliveries.")
@click.option("--state", type=click.Choice(WEBHOOK_DELIVERY_STATES), help="Only deliveries in this state.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Page size.")
@click.option("--page-token", default="", help="Continue from a previous page.")
@database_option
@output_option
@click.pass_context
def webhook_deliveries(ctx: click.Context, subscription: uuid.UUID | None, state: str | None, limit: int,
                       page_token: str, database_url: str | None, output: str) -> None:
    """Webhook deliveries, newest first (operators; read from the database): the subscription, the
    event, the state, the attempts and the last status or error. Never the URL or the secret."""
    before = None
    if page_token:  # <event>.<subscription>: the last row of the previous page
        seq, _, sub = page_token.partition(".")
        try:
            before = (int(seq), uuid.UUID(sub)) if seq.isdigit() and len(page_token) <= 60 else None
        except ValueError:
            before = None
        if before is not None and before[0] >= 2**63:  # an event's seq is a bigint
            before = None
        if before is None:
            raise usage(f"invalid --page-token {compact(page_token, 40)!r}: use the token a previous page printed")
    rows = run(ctx, database_url, lambda ops: ops.webhook_deliveries(subscription=subscription, state=state,
                                                                     before=before, limit=limit + 1))
    next_token = f"{rows[limit - 1]['id']}.{rows[limit - 1]['subscription_id']}" if len(rows) > limit else ""
    rows = rows[:limit]
    if output == "json":
        echo_json({"deliveries": rows, "next_page_token": next_token})
        return
    if rows:
        click.echo(plain_table(
            ["ID", "SUBSCRIPTION", "SESSION", "EVENT", "STATE", "ATTEMPTS", "LAST", "AGE"],
            [[r["id"], r["subscription_id"], r["session_id"], f"{dash(r['event_type'])} {r['event_id']}", r["state"],
              r["attempts"], dash(r["last_status"] or compact(r["last_error"] or "", 50)),
              age(r["created_at"])] for r in rows]))
    else:
        click.echo("No webhook deliveries.", err=True)
    if next_token:
        click.echo(f"(more deliveries: --page-token {next_token})", err=True)


# -- workers ------------------------------------------------------------------------------------------

@click.group(cls=OperatorGroup)
def workers() -> None:
    """Worker processes: list them, drain them."""


@workers.command("list")
@database_option
@output_option
@click.pass_context
def workers_list(ctx: click.Context, database_url: str | None, output: str) -> None:
    """Every worker process: queues, concurrency, running jobs, heartbeat age, state (running, draining, stalled)."""
    rows = run(ctx, database_url, lambda ops: ops.workers())
    if output == "json":
        echo_json({"workers": rows})
        return
    if not rows:
        click.echo("No workers are running.", err=True)
        return
    click.echo(workers_table(rows))


@workers.command("drain")
@click.argument("name", required=False)
@click.option("--all", "all_workers", is_flag=True, help="Drain every worker running now.")
@click.option("--wait", is_flag=True, help="Wait until the drained workers have exited.")
@click.option("--timeout", type=DURATION0, default=None, metavar="DURATION",
              help="How long running jobs may take before they are aborted (default: each worker's "
                   "workers.shutdownTimeout); 0s aborts them at once.")
@database_option
@output_option
@click.pass_context
def workers_drain(ctx: click.Context, name: str | None, all_workers: bool, wait: bool, timeout: float | None,
                  database_url: str | None, output: str) -> None:
    """Drain worker NAME (or --all): it fetches no new job, lets running jobs finish (up to --timeout,
    then aborts them cooperatively; they are retried elsewhere) and exits. Durable: a worker that
    misses the notification sees the request within seconds."""
    if name and all_workers:
        raise usage("give a worker NAME or --all, not both")
    if not name and not all_workers:
        raise usage("missing worker NAME (or --all to drain every worker)")
    target = "*" if all_workers else str(name)
    by = operator_name(ctx)

    async def drain(ops: OperatorStore) -> dict[str, Any]:
        requested = await ops.request_drain(target, timeout, by)
        ids = list(requested["worker_ids"])
        names = dict(zip(ids, requested["workers"], strict=True))
        result: dict[str, Any] = {"drain_id": requested["drain_id"], "worker": target, "timeout": timeout,
                                  "requested_by": by, "workers": [{"worker_id": i, "name": names[i]} for i in ids]}
        if output != "json":
            who = ", ".join(requested["workers"]) if ids else "no worker is running now"
            click.echo(printable(f"drain {requested['drain_id']} requested for {len(ids)} worker(s): {who} "
                                 f"(running jobs get {fmt_seconds(timeout)})"))
        if not wait:
            return result
        started = time.monotonic()
        deadline = started + timeout + WAIT_GRACE if timeout is not None else None
        remaining = set(ids)
        outcome: dict[int, str] = {}
        while remaining:
            rows = {r["worker_id"]: r for r in await ops.workers(sorted(remaining))}
            for wid in sorted(remaining):
                row = rows.get(wid)
                if row is None or row["state"] == "stalled":
                    outcome[wid] = "exited" if row is None else "stalled"
                    remaining.discard(wid)
                    if output != "json":
                        how = "exited" if row is None else "stopped heartbeating (stalled) before it exited"
                        click.echo(printable(f"{names[wid]} {how} ({time.monotonic() - started:.1f}s)"))
            if not remaining:
                break
            if deadline is not None and time.monotonic() > deadline:
                late = ", ".join(names[w] for w in sorted(remaining))
                raise CliError(f"still running {time.monotonic() - started:.0f}s after the drain request: {late}")
            await asyncio.sleep(WAIT_POLL)
        for w in result["workers"]:
            w["outcome"] = outcome.get(w["worker_id"])
        result["waited_seconds"] = round(time.monotonic() - started, 3)
        return result

    result = run(ctx, database_url, drain)
    if output == "json":
        echo_json(result)
    elif wait and result["workers"]:
        click.echo(f"all {len(result['workers'])} drained worker(s) are gone")


# -- jobs -------------------------------------------------------------------------------------------------

@click.group(cls=OperatorGroup)
def jobs() -> None:
    """procrastinate jobs: list, show, retry, cancel."""


@jobs.command("list")
@click.option("--queue", metavar="QUEUE", help="Only this queue (operations, dispatch, agents, periodic).")
@click.option("--status", type=click.Choice(JOB_STATUSES), help="Only jobs in this status.")
@click.option("--task", metavar="TASK", help="Only this task (e.g. execute_operation).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Page size.")
@click.option("--page-token", default="", help="Continue from a previous page.")
@database_option
@output_option
@click.pass_context
def jobs_list(ctx: click.Context, queue: str | None, status: str | None, task: str | None, limit: int,
              page_token: str, database_url: str | None, output: str) -> None:
    """Jobs, newest first, one page at a time."""
    before = None
    if page_token:
        if not page_token.isdigit() or int(page_token) <= 0:
            raise usage(f"invalid --page-token {page_token!r}: use the token a previous page printed")
        before = int(page_token)
    rows = run(ctx, database_url,
               lambda ops: ops.list_jobs(queue=queue, status=status, task=task, before=before, limit=limit + 1))
    next_token = str(rows[limit - 1]["job_id"]) if len(rows) > limit else ""
    rows = rows[:limit]
    if output == "json":
        echo_json({"jobs": rows, "next_page_token": next_token})
        return
    if rows:
        click.echo(jobs_table(rows))
    else:
        click.echo("No jobs found.", err=True)
    if next_token:
        click.echo(f"(more jobs: --page-token {next_token})", err=True)


@jobs.command("show")
@click.argument("job_id", type=click.IntRange(min=1), metavar="ID")
@database_option
@output_option
@click.pass_context
def jobs_show(ctx: click.Context, job_id: int, database_url: str | None, output: str) -> None:
    """One job with its events (sessionq.job_events) and what operators and the reaper did to it."""

    async def show(ops: OperatorStore) -> tuple[Row | None, list[Row], list[Row], list[Row]]:
        return (await ops.job(job_id), await ops.job_events(job_id), await ops.job_actions(job_id),
                await ops.job_attempts(job_id))

    job, events, actions, attempts = run(ctx, database_url, show)
    if job is None:
        raise CliError(f"NOT_FOUND: job {job_id} not found (succeeded jobs are kept for jobs.retention)")
    if output == "json":
        echo_json({"job": job, "attempts": attempts, "events": events, "actions": actions})
        return
    j = jsonable(job)
    fields = [
        ("Job", j["job_id"]), ("Task", j["task_name"]), ("Queue", j["queue_name"]),
        ("Status", f"{j['status']} for {age(job['status_age'])}"
                   + (" (abort requested)" if j["abort_requested"] else "")),
        ("Attempts", j["attempts"]), ("Priority", j["priority"]),
        ("Worker", f"{j['worker_name'] or '-'} (procrastinate worker {j['worker_id']})" if j["worker_id"] else "-"),
        ("Queueing lock", dash(j["queueing_lock"])), ("Lock", dash(j["lock"])),
        ("Scheduled at", dash(j["scheduled_at"])), ("Deferred at", dash(j["deferred_at"])),
        ("Args", json.dumps(j["args"], sort_keys=True)),
    ]
    width = max(len(k) for k, _ in fields) + 2
    for k, v in fields:
        click.echo(f"{k + ':':<{width}}{printable(v)}")
    click.echo("")
    click.echo("ATTEMPTS")
    if attempts:
        click.echo(plain_table(
            ["#", "OUTCOME", "WORKER", "STARTED", "DURATION", "ERROR"],
            [[a["attempt"], a["outcome"], dash(a["worker_name"] or a["worker_id"]), dash(jsonable(a["started_at"])),
              f"{a['duration'].total_seconds():.3f}s" if a["duration"] is not None else "-",
              compact(f"{a['error_type']}: {a['error_message']}", 100) if a["error_type"] else "-"]
             for a in attempts]))
        failed = [a for a in attempts if a["traceback"]]
        if failed:
            last = failed[-1]
            click.echo("")
            click.echo(f"TRACEBACK (attempt {last['attempt']}, its last lines)")
            click.echo(printable("\n".join(last["traceback"].rstrip().splitlines()[-25:]), multiline=True))
    else:
        click.echo("(none recorded)")
    click.echo("")
    click.echo("EVENTS")
    click.echo(plain_table(["AT", "TYPE"], [[jsonable(e["at"]), e["type"]] for e in events]) if events else "(none)")
    if actions:
        click.echo("")
        click.echo("ACTIONS")
        click.echo(plain_table(["AT", "ACTION", "BY", "DETAIL"],
                               [[jsonable(a["at"]), a["action"], a["actor"], a["detail"]] for a in actions]))


@jobs.command("retry")
@click.argument("job_id", type=click.IntRange(min=1), metavar="ID")
@click.option("--stall-timeout", type=DURATION, default=DEFAULT_STALL_TIMEOUT, show_default=True,
              help="A running job counts as stalled when its worker's heartbeat is older than this.")
@database_option
@output_option
@click.pass_context
def jobs_retry(ctx: click.Context, job_id: int, stall_timeout: float, database_url: str | None, output: str) -> None:
    """Run a job now: one waiting out its retry backoff, or a failed, aborted, cancelled or stalled one."""
    by = operator_name(ctx)
    row = run(ctx, database_url, lambda ops: ops.retry_job(job_id, by, stall_timeout))
    if output == "json":
        echo_json(row)
    elif row["action"] == "run_now":
        click.echo(printable(f"job {job_id} ({row['task_name']}) {row['detail']}; it is due now"))
    elif row["action"] == "requeued":
        click.echo(printable(f"job {job_id} ({row['task_name']}, was {row['previous_status']}) "
                             "is waiting to run again"))
    else:
        click.echo(printable(f"job {job_id} ({row['task_name']}, was {row['previous_status']}): {row['action']}: "
                             f"{row['detail']}"))


@jobs.command("cancel")
@click.argument("job_id", type=click.IntRange(min=1), metavar="ID")
@click.option("--abort", is_flag=True, help="Also ask the worker running it to abort it (cooperatively).")
@database_option
@output_option
@click.pass_context
def jobs_cancel(ctx: click.Context, job_id: int, abort: bool, database_url: str | None, output: str) -> None:
    """Cancel a waiting job; with --abort, also a running one."""
    by = operator_name(ctx)
    row = run(ctx, database_url, lambda ops: ops.cancel_job(job_id, abort, by))
    if output == "json":
        echo_json(row)
    elif row["action"] == "abort_requested":
        click.echo(f"job {job_id}: abort requested; its worker cancels it within seconds")
    else:
        click.echo(f"job {job_id} cancelled (was {row['previous_status']})")


# -- requeue ------------------------------------------------------------------------------------------------

@click.command(cls=OperatorCommand)
@click.option("--failed", is_flag=True, help="Requeue failed jobs.")
@click.option("--stalled", is_flag=True, help="Requeue stalled jobs (running on a worker without a recent heartbeat).")
@click.option("--queue", metavar="QUEUE", help="Only this queue.")
@click.option("--task", metavar="TASK", help="Only this task.")
@click.option("--since", type=DURATION, default=None, metavar="DURATION",
              help="Only jobs that failed (or started, for --stalled) within this long, e.g. 1h.")
@click.option("--stall-timeout", type=DURATION, default=DEFAULT_STALL_TIMEOUT, show_default=True,
              help="A worker without a heartbeat for this long is dead.")
@click.option("--dry-run", is_flag=True, help="Tell what would be requeued; change nothing.")
@database_option
@output_option
@click.pass_context
def requeue(ctx: click.Context, failed: bool, stalled: bool, queue: str | None, task: str | None, since: float | None,
            stall_timeout: float, dry_run: bool, database_url: str | None, output: str) -> None:
    """Put failed or stalled jobs back to run, telling how many and which. A job whose queueing lock
    is held by a waiting job is cancelled instead (the waiting job does the same work)."""
    if failed == stalled:
        raise usage("choose what to requeue: --failed or --stalled" if not failed else
                    "--failed and --stalled are separate runs; choose one")
    which = "failed" if failed else "stalled"
    by = operator_name(ctx)
    rows = run(ctx, database_url, lambda ops: ops.requeue(which, queue=queue, task=task, since=since, by=by,
                                                          dry_run=dry_run, stall_timeout=stall_timeout))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["action"]] = counts.get(r["action"], 0) + 1
    if output == "json":
        echo_json({"which": which, "dry_run": dry_run, "matched": len(rows), "counts": counts, "jobs": rows})
        return
    if not rows:
        click.echo(f"0 {which} jobs matched; nothing to requeue.")
        return
    click.echo(f"{len(rows)} {which} job(s) matched" + (" (dry run: nothing changed)" if dry_run else "") + ":")
    click.echo(actions_table(rows))
    click.echo(", ".join(f"{n} {a}" for a, n in sorted(counts.items())))


# -- status -------------------------------------------------------------------------------------------------

def known_queues() -> list[str]:
    try:
        from sessionq.jobs.app import QUEUES
    except Exception:  # the CLI must work without the job modules importable
        return []
    return list(QUEUES)


def leader_text(leader: Row | None) -> str:
    if leader is None:
        return "-"
    ran = f", last run {age(leader['last_run_age'])} ago" if leader.get("last_run_age") is not None else ""
    return f"{leader['holder']} (leader for {age(leader['held_for'])}{ran})"


ISOLATION_TEXT = {
    "gvisor": "isolation gvisor: each Actor in its own gVisor sandbox, egress policies enforced",
    "namespaces": "isolation namespaces: each Actor in its own sandbox (bubblewrap), egress policies enforced",
    "none": "isolation none: local OS processes, NOT isolated: egress policies are stored, not enforced",
}


def isolation_text(level: str | None) -> str:
    """What the process runtime's isolation level means (None: no runtime server is running)."""
    if level is None:
        return "no runtime server running"
    return ISOLATION_TEXT.get(level, f"isolation {level}")


def status_text(s: Row) -> str:
    out: list[str] = []
    label = 20
    sessions = s["sessions"]
    out.append(f"{'SESSIONS':<{label}}" + "   ".join(f"{st} {sessions.get(st, 0)}" for st in SESSION_STATES))
    if s["pending_operations"]:
        out.append("PENDING OPERATIONS")
        out.append(_indent(plain_table(
            ["KIND", "COUNT", "OLDEST", "WITHOUT-JOB"],
            [[p["kind"], p["operations"], age(p["oldest_age"]), p["without_job"]] for p in s["pending_operations"]])))
    else:
        out.append(f"{'PENDING OPERATIONS':<{label}}none")
    claims: dict[str, list[str]] = {}
    for c in s["claims"]:
        claims.setdefault(c["kind"], []).append(f"{c['claims']} {c['state']}")
    out.append(f"{'CLAIMS':<{label}}" + ("   ".join(f"{k}: {', '.join(v)}" for k, v in sorted(claims.items()))
                                         or "none"))
    backlog = {b["status"]: b for b in s["quiescence_backlog"]}
    oldest = max((b["oldest_waiting"] for b in s["quiescence_backlog"] if b["oldest_waiting"] is not None),
                 default=None)
    out.append(f"{'QUIESCENCE BACKLOG':<{label}}"
               + "   ".join(f"{k} {backlog[k]['sessions'] if k in backlog else 0}"
                            for k in ("waiting", "blocked", "claimed", "ineligible", "warm", "paused"))
               + (f"   (oldest {age(oldest)})" if oldest is not None else ""))
    b = s.get("between_turns") or {}
    if b:
        out.append(f"{'BETWEEN TURNS':<{label}}queued {b['queued_turns']} on {b['queued_sessions']} sessions"
                   + (f" (oldest {age(b['oldest_queued'])})" if b["oldest_queued"] is not None else "")
                   + f"   paused {b['paused_actors']}   warm {b['warm_actors']}"
                   + f"   last turn stalled {b['stalled_turns']}")
    queues: dict[str, dict[str, Any]] = {q: {} for q in known_queues()}
    for q in s["queues"]:
        queues.setdefault(q["queue_name"], {})[q["status"]] = q
    rows = []
    for name, by_status in sorted(queues.items()):
        todo = by_status.get("todo", {})
        rows.append([name, todo.get("jobs", 0), todo.get("due", 0), by_status.get("doing", {}).get("jobs", 0),
                     by_status.get("failed", {}).get("jobs", 0),
                     by_status.get("cancelled", {}).get("jobs", 0) + by_status.get("aborted", {}).get("jobs", 0),
                     age(todo.get("oldest_due_age"))])
    out.append("QUEUES")
    out.append(_indent(plain_table(["QUEUE", "TODO", "DUE", "DOING", "FAILED", "CANCELLED", "OLDEST-DUE"], rows))
               if rows else "  (no jobs)")
    out.append(f"WORKERS ({len(s['workers'])})")
    out.append(_indent(workers_table(s["workers"])) if s["workers"] else "  (none running)")
    if s.get("paused_queues"):
        out.append(f"{'PAUSED QUEUES':<{label}}" + ", ".join(
            f"{p['queue_name']} (by {p['paused_by']}, {age(p['paused_at'])} ago)" for p in s["paused_queues"]))
    out.append(f"{'STALLED JOBS':<{label}}{s['stalled_jobs']}")
    if s.get("recent_failures"):
        out.append("RECENT FAILURES")
        out.append(_indent(plain_table(
            ["AT", "JOB", "TASK", "ATTEMPT", "OUTCOME", "ERROR"],
            [[age(f["failed_at"]) + " ago", f["job_id"], f["task_name"], f["attempt"], f["outcome"],
              compact(f"{f['error_type']}: {f['error_message']}", 80)] for f in s["recent_failures"]])))
    rt = s.get("runtime")
    if rt is not None:
        state = "in process" if rt["address"] is None else (
            "answers" if rt["answers"] else f"DOES NOT ANSWER ({rt['problem']})")
        where_ = f" at {rt['address']}" if rt["address"] else ""
        out.append(f"{'RUNTIME':<{label}}{rt['kind']}{where_}: {state}")
    if s.get("process_runtime") is not None:
        pr = s["process_runtime"]
        out.append(f"{'PROCESS RUNTIME':<{label}}{pr['actors']} actors, {pr['with_process']} with a process;"
                   f" {isolation_text(pr.get('isolation'))}")
    out.append(f"{'EXPIRY LEADER':<{label}}{leader_text(s['expiry_leader'])}")
    for leader in s["leaders"]:
        if leader["role"] != "expiry":
            out.append(f"{(leader['role'].upper().replace('_', ' ') + ' LEADER'):<{label}}{leader_text(leader)}")
    return "\n".join(out)


def runtime_status(ctx: click.Context) -> dict[str, Any]:
    """Whether the runtime answers (its gRPC health service): the Substrate of the configuration
    (SESSIONQ_RUNTIME__KIND=substrate and SESSIONQ_RUNTIME__SUBSTRATE__*), else the simulator
    the runtime `sessionq up` serves (the client config's runtimeAddress and runtimeKind: the process
    runtime or the simulator), else the in-process simulator."""
    from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions  # here: grpc loads on use

    try:
        settings = config.load(None)
    except config.ConfigError as e:
        return {"kind": "unknown", "address": None, "answers": False, "problem": str(e)}
    if settings.runtime.kind == "substrate":
        sub = settings.runtime.substrate
        options = SubstrateOptions(address=sub.address, tls=sub.tls.enabled, ca_file=sub.tls.ca_file,
                                   cert_file=sub.tls.cert_file, key_file=sub.tls.key_file,
                                   server_name=sub.tls.server_name, token_file=sub.token_file)
        kind = "substrate"
    else:
        try:
            client_config = _client_config(ctx)
        except CliError:
            client_config = {}
        address = client_config.get("runtimeAddress")
        if not address:
            return {"kind": "simulator", "address": None, "answers": True, "problem": None}
        served = str(client_config.get("runtimeKind") or "simulator")  # `up`: the process runtime or the simulator
        options, kind = SubstrateOptions(address=str(address)), f"{served} (served)"

    async def check() -> str | None:
        client = SubstrateClient(options)
        await client.open()
        try:
            return await client.check_health(timeout=3.0)
        finally:
            await client.close()

    try:
        options.validate()
        problem = asyncio.run(check())
    except (ValueError, OSError) as e:
        problem = str(e)
    return {"kind": kind, "address": options.address, "answers": problem is None, "problem": problem}


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


@click.command(cls=OperatorCommand)
@database_option
@output_option
@click.pass_context
def status(ctx: click.Context, database_url: str | None, output: str) -> None:
    """One screen: Sessions by state, pending operations, claims, quiescence backlog, queues, workers,
    stalled jobs and the expiry leader."""
    s = run(ctx, database_url, lambda ops: ops.status())
    s["runtime"] = runtime_status(ctx)
    if output == "json":
        echo_json(s)
        return
    click.echo(printable(status_text(s), multiline=True))


# -- queues ------------------------------------------------------------------------------------------------

QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,40}")


def check_queue_name(name: str) -> str:
    if not QUEUE_NAME.fullmatch(name):
        raise usage(f"{printable(name[:40])!r} is not a queue name (1-40 letters, digits, _ . : -)")
    return name


@click.group(cls=OperatorGroup)
def queues() -> None:
    """Job queues: list them, pause and resume fetching from one (durably, on every worker)."""


@queues.command("list")
@database_option
@output_option
@click.pass_context
def queues_list(ctx: click.Context, database_url: str | None, output: str) -> None:
    """Every queue: paused or not, waiting, due, running and failed jobs."""
    rows = run(ctx, database_url, lambda ops: ops.queues())
    if output == "json":
        echo_json({"queues": rows})
        return
    click.echo(plain_table(
        ["QUEUE", "STATE", "TODO", "DUE", "DOING", "FAILED", "OLDEST-DUE", "PAUSED-BY"],
        [[r["queue_name"], "paused" if r["paused"] else "active", r["todo"], r["due"], r["doing"], r["failed"],
          age(r["oldest_due_age"]), dash(r["paused_by"])] for r in rows]))


@queues.command("pause")
@click.argument("name")
@click.option("--reason", default="", help="Why (shown with the queue; at most 500 characters).")
@database_option
@output_option
@click.pass_context
def queues_pause(ctx: click.Context, name: str, reason: str, database_url: str | None, output: str) -> None:
    """Stop every worker fetching from queue NAME until `queues resume NAME`. Jobs still queue up;
    running jobs finish. Pausing `periodic` stops the reaper and the expiry sweep too."""
    check_queue_name(name)
    if len(reason) > 500:
        raise usage("--reason is too long (at most 500 characters)")
    by = operator_name(ctx)
    row = run(ctx, database_url, lambda ops: ops.pause_queue(name, by, reason))
    if output == "json":
        echo_json(row)
    else:
        click.echo(printable(f"queue {name} " + ("paused: no worker fetches from it" if row["changed"]
                                                  else "was already paused")))


@queues.command("resume")
@click.argument("name")
@database_option
@output_option
@click.pass_context
def queues_resume(ctx: click.Context, name: str, database_url: str | None, output: str) -> None:
    """Let the workers fetch from queue NAME again."""
    check_queue_name(name)
    by = operator_name(ctx)
    row = run(ctx, database_url, lambda ops: ops.resume_queue(name, by))
    if output == "json":
        echo_json(row)
    else:
        click.echo(printable(f"queue {name} " + ("resumed" if row["changed"] else "was not paused")))


@click.command("between-turns", cls=OperatorCommand)
@database_option
@output_option
@click.pass_context
def between_turns(ctx: click.Context, database_url: str | None, output: str) -> None:
    """What waits between turns: queued turns in the order they will run, warm and paused Actors
    (inside their keep-warm window, or waiting for an answer), and Sessions whose last turn was
    failed as stalled."""
    b = run(ctx, database_url, lambda ops: ops.between_turns())
    if output == "json":
        echo_json(b)
        return
    click.echo(f"QUEUED TURNS ({len(b['queued'])})")
    click.echo(plain_table(
        ["SESSION", "PLACE", "TASK", "POLICY", "SENT-BY", "WAITING", "BEHIND"],
        [[r["session_id"], r["place"], r["task_id"], r["policy"], r["enqueued_by"], age(r["waiting"]),
          dash(r["running_task_id"])] for r in b["queued"]]))
    click.echo(f"\nWARM AND PAUSED ACTORS ({len(b['idle'])})")
    click.echo(plain_table(
        ["SESSION", "STATE", "TURN-ENDED", "KEEP-WARM", "PAUSED-SINCE"],
        [[r["session_id"], r["status"], f"{age(r['waiting'])} ago", f"{r['keep_warm']:g}s",
          dash(r["actor_paused_at"])] for r in b["idle"]]))
    click.echo(f"\nTURNS FAILED AS STALLED ({len(b['stalled'])})")
    click.echo(plain_table(
        ["SESSION", "TASK", "WHEN", "REASON"],
        [[r["session_id"], dash(r["task_id"]), r["updated_at"], r["message"]] for r in b["stalled"]]))


COMMANDS: tuple[click.Command, ...] = (workers, jobs, requeue, status, queues, between_turns)


@click.group(cls=OperatorGroup)
def quiescence() -> None:
    """Automatic quiescence: claims of idle work whose attempt failed or whose worker died."""


@quiescence.command("retry")
@click.argument("session_id")
@database_option
@output_option
@click.pass_context
def quiescence_retry(ctx: click.Context, session_id: str, database_url: str | None, output: str) -> None:
    """Queue a new attempt at the claimed idle work of SESSION_ID now. A quiescence claim whose
    attempt failed or whose worker died is kept (the suspend may have been issued) and blocks the
    Session; the quiescence workers resolve it by themselves (after a backoff, or the claim's lease),
    and this does the same at once: it takes the claim over, reads the Actor back under its recorded
    UID, suspends it only if it is not suspended, and records the snapshot."""
    try:
        sid = str(uuid.UUID(session_id))
    except ValueError:
        raise usage(f"{session_id!r} is not a session ID (a UUID)") from None
    job = run(ctx, database_url, lambda ops: ops.retry_quiescence(sid))
    if output == "json":
        echo_json({"session_id": sid, "job_id": job})
    else:
        click.echo(f"queued job {job} to finish the claimed idle work of session {sid}")
