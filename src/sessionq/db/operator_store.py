"""The operator's queries: the only place the `workers`, `jobs`, `requeue` and `status` commands, the
reaper and the drain watcher read or change the database.

Most of the logic lives in schema/80_operator_views.sql (views and procedures documented with
COMMENT ON); this module selects from them. Rows come back as plain dicts with the views' column
names; `jsonable` turns them into JSON-friendly values (timestamps as ISO 8601, intervals as seconds).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from sessionq import errors
from sessionq.db.connection import conninfo
from sessionq.models import JobStatus

# how the process runtime's server names its connection (sessionq.runtime.process.sandbox.APPLICATION_NAME,
# which db may not import; tests/sandboxes checks both agree), followed by its isolation level
PROCESS_RUNTIME_APPLICATION = "sessionq process runtime, isolation"

Row = dict[str, Any]
JOB_STATUSES = tuple(s.value for s in JobStatus)
SESSION_STATES = ("CREATING", "READY", "SUSPENDED", "FAILED", "DELETING", "DELETED")


class OperatorStore:
    """Operator queries over one connection source: a pool (workers, reaper) or a single
    connection opened by `OperatorStore.connect` (the CLI)."""

    def __init__(self, connection: Callable[[], contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]]):
        self._connection = connection

    @classmethod
    def from_pool(cls, pool: AsyncConnectionPool) -> OperatorStore:
        return cls(pool.connection)

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(cls, url: str, *, application_name: str = "sessionq-operator") -> AsyncIterator[OperatorStore]:
        """One autocommit connection for the lifetime of the block. It never prepares a statement, so
        that it also works through a transaction pooler (a polling command runs one query many times)."""
        conn = await psycopg.AsyncConnection.connect(
            conninfo(url), autocommit=True, row_factory=dict_row, application_name=application_name, connect_timeout=10,
            prepare_threshold=None,
        )

        @contextlib.asynccontextmanager
        async def borrow() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
            yield conn

        try:
            yield cls(borrow)
        finally:
            await conn.close()

    # -- plumbing ---------------------------------------------------------------------------------

    async def _rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Row]:
        with errors.database_errors():
            async with self._connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(sql, params)
                return list(await cur.fetchall()) if cur.description else []

    async def _one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Row | None:
        rows = await self._rows(sql, params)
        return rows[0] if rows else None

    # -- workers and drains ----------------------------------------------------------------------

    async def workers(self, worker_ids: Sequence[int] | None = None) -> list[Row]:
        return await self._rows(
            "SELECT * FROM sessionq.workers WHERE %(ids)s::bigint[] IS NULL OR worker_id = ANY(%(ids)s::bigint[])"
            " ORDER BY name NULLS LAST, worker_id",
            {"ids": list(worker_ids) if worker_ids is not None else None},
        )

    async def request_drain(self, worker: str, timeout: float | None, by: str, worker_id: int | None = None) -> Row:
        """Drain `worker` (a name or *); with `worker_id`, only if that worker still runs under that
        name and is not draining (ABORTED otherwise: it changed meanwhile)."""
        row = await self._one("SELECT * FROM sessionq.request_drain(%s, %s, %s, %s)", (worker, timeout, by, worker_id))
        assert row is not None
        return row

    async def register_worker(self, worker_id: int, name: str, host: str, pid: int, queues: Sequence[str] | None,
                              concurrency: int, keep_warm: float | None = None) -> None:
        await self._rows("SELECT sessionq.register_worker(%s, %s, %s, %s, %s, %s, %s)",
                         (worker_id, name, host, pid, list(queues) if queues is not None else None, concurrency,
                          keep_warm))

    async def unregister_worker(self, worker_id: int) -> None:
        await self._rows("SELECT sessionq.unregister_worker(%s)", (worker_id,))

    async def take_drain(self, worker_id: int) -> Row | None:
        return await self._one("SELECT * FROM sessionq.take_drain(%s)", (worker_id,))

    async def mark_draining(self, worker_id: int, timeout: float | None) -> None:
        await self._rows("SELECT sessionq.mark_worker_draining(%s, %s)", (worker_id, timeout))

    # -- jobs -------------------------------------------------------------------------------------

    async def list_jobs(self, *, queue: str | None = None, status: str | None = None, task: str | None = None,
                        before: int | None = None, limit: int = 50) -> list[Row]:
        """Jobs newest first (by id), those with an id below `before` (the page token), each with
        the error of its last failed attempt (last_error_type, last_error_message; NULL if none)."""
        return await self._rows(
            "SELECT j.*, f.error_type AS last_error_type, f.error_message AS last_error_message"
            " FROM sessionq.job_overview j"
            " LEFT JOIN LATERAL (SELECT a.error_type, a.error_message FROM sessionq.job_attempts a"
            "   WHERE a.job_id = j.job_id AND a.outcome <> 'succeeded' ORDER BY a.attempt DESC, a.id DESC LIMIT 1) f"
            "   ON true"
            " WHERE (%(queue)s::text IS NULL OR j.queue_name = %(queue)s)"
            "   AND (%(status)s::text IS NULL OR j.status = %(status)s)"
            "   AND (%(task)s::text IS NULL OR j.task_name = %(task)s)"
            "   AND (%(before)s::bigint IS NULL OR j.job_id < %(before)s)"
            " ORDER BY j.job_id DESC LIMIT %(limit)s",
            {"queue": queue, "status": status, "task": task, "before": before, "limit": limit},
        )

    async def webhook_deliveries(self, *, subscription: UUID | None = None, state: str | None = None,
                                 before: tuple[int, UUID] | None = None, limit: int = 50) -> list[Row]:
        """Webhook deliveries newest first (sessionq.webhook_delivery_log: no URL, no secret), those
        before `before` (the page token: the last row's event and subscription)."""
        return await self._rows(
            "SELECT * FROM sessionq.webhook_delivery_log"
            " WHERE (%(sub)s::uuid IS NULL OR subscription_id = %(sub)s)"
            "   AND (%(state)s::text IS NULL OR state = %(state)s)"
            "   AND (%(seq)s::bigint IS NULL OR (id, subscription_id) < (%(seq)s, %(before_sub)s::uuid))"
            " ORDER BY id DESC, subscription_id DESC LIMIT %(limit)s",
            {"sub": subscription, "state": state, "seq": before[0] if before else None,
             "before_sub": before[1] if before else None, "limit": limit},
        )

    async def job(self, job_id: int) -> Row | None:
        return await self._one("SELECT * FROM sessionq.job_overview WHERE job_id = %s", (job_id,))

    async def job_events(self, job_id: int) -> list[Row]:
        return await self._rows(
            "SELECT e.id AS event_id, e.type, e.at FROM sessionq.job_events e"
            " WHERE e.job_id = %s ORDER BY e.at, e.id", (job_id,),
        )

    async def job_attempts(self, job_id: int) -> list[Row]:
        """Every recorded attempt of a job, first to last (sessionq.job_attempts)."""
        return await self._rows(
            "SELECT attempt, outcome, worker_name, worker_id, started_at, ended_at, ended_at - started_at AS duration,"
            " error_type, error_message, traceback FROM sessionq.job_attempts WHERE job_id = %s ORDER BY attempt, id",
            (job_id,),
        )

    async def recent_failures(self, limit: int = 20) -> list[Row]:
        return await self._rows("SELECT * FROM sessionq.recent_failures LIMIT %s", (limit,))

    async def purge_job_history(self, retention: float, limit: int) -> int:
        row = await self._one("SELECT sessionq.purge_job_history(%s, %s) AS deleted", (retention, limit))
        return int(row["deleted"]) if row else 0

    # -- between turns ------------------------------------------------------------------------------

    async def between_turns(self, limit: int = 200) -> dict[str, list[Row]]:
        """What waits between turns (the console's page): queued turns in order, warm and paused
        Actors (their idle boundaries, 80_operator_views.sql's quiescence_backlog) and Sessions whose
        last turn was failed as stalled (sessions.stalledTurnTimeout), each newest or longest first."""
        queued = await self._rows(
            "SELECT * FROM sessionq.turn_queue ORDER BY session_id, place LIMIT %s", (limit,))
        idle = await self._rows(
            "SELECT b.session_id, b.status, b.idle_boundary_at, b.waiting, s.actor_paused_at,"
            " sessionq.keep_warm_of(s.revision_id, sessionq.server_keep_warm()) AS keep_warm"
            " FROM sessionq.quiescence_backlog b JOIN sessionq.sessions s ON s.id = b.session_id"
            " WHERE b.status IN ('warm', 'paused') ORDER BY b.idle_boundary_at LIMIT %s", (limit,))
        stalled = await self._rows(
            "SELECT id AS session_id, dispatch_failure ->> 'task_id' AS task_id,"
            " dispatch_failure ->> 'message' AS message, updated_at FROM sessionq.sessions"
            " WHERE dispatch_failure ->> 'message' LIKE 'the turn stalled%%' ORDER BY updated_at DESC LIMIT %s",
            (limit,))
        return {"queued": queued, "idle": idle, "stalled": stalled}

    # -- queues -------------------------------------------------------------------------------------

    async def queues(self) -> list[Row]:
        return await self._rows("SELECT * FROM sessionq.queues ORDER BY queue_name")

    async def pause_queue(self, queue: str, by: str, reason: str = "") -> Row:
        row = await self._one("SELECT * FROM sessionq.pause_queue(%s, %s, %s)", (queue, by, reason))
        assert row is not None
        return row

    async def resume_queue(self, queue: str, by: str) -> Row:
        row = await self._one("SELECT * FROM sessionq.resume_queue(%s, %s)", (queue, by))
        assert row is not None
        return row

    async def recent_actions(self, limit: int = 50) -> list[Row]:
        return await self._rows(
            "SELECT at, job_id, target, action, actor, detail FROM sessionq.job_actions ORDER BY at DESC, id DESC"
            " LIMIT %s", (limit,),
        )

    async def job_actions(self, job_id: int) -> list[Row]:
        return await self._rows(
            "SELECT at, action, actor, covered_by, detail FROM sessionq.job_actions WHERE job_id = %s ORDER BY id",
            (job_id,),
        )

    async def retry_job(self, job_id: int, by: str, stall_timeout: float | None = None,
                        expect: str | None = None) -> Row:
        """Run a job waiting out its backoff now, or put a failed, aborted, cancelled or stalled
        one back; with `expect`, only if it is still in that status (ABORTED otherwise)."""
        row = await self._one("SELECT * FROM sessionq.requeue_job(%s, %s, %s, %s)",
                              (job_id, by, stall_timeout, expect))
        assert row is not None
        return row

    async def cancel_job(self, job_id: int, abort: bool, by: str, expect: str | None = None) -> Row:
        row = await self._one("SELECT * FROM sessionq.cancel_job(%s, %s, %s, %s)", (job_id, abort, by, expect))
        assert row is not None
        return row

    async def requeue(self, which: str, *, queue: str | None, task: str | None, since: float | None, by: str,
                      dry_run: bool, stall_timeout: float | None = None) -> list[Row]:
        return await self._rows(
            "SELECT * FROM sessionq.requeue_jobs(%s, %s, %s, %s, %s, %s, %s)",
            (which, queue, task, since, by, stall_timeout, dry_run),
        )

    async def stalled_jobs(self, stall_timeout: float | None = None) -> list[Row]:
        return await self._rows("SELECT * FROM sessionq.find_stalled_jobs(%s)", (stall_timeout,))

    # -- the reaper -------------------------------------------------------------------------------

    async def reap_stalled_jobs(self, stall_timeout: float, max_attempts: dict[str, int | None]) -> list[Row]:
        return await self._rows("SELECT * FROM sessionq.reap_stalled_jobs(%s, %s)",
                                (stall_timeout, Jsonb(max_attempts)))

    async def end_dead_dispatches(self, limit: int = 100, orphan_grace: float = 10.0) -> list[Row]:
        return await self._rows("SELECT * FROM sessionq.end_dead_dispatches(%s, %s)", (limit, orphan_grace))

    async def prune(self, stalled_worker_age: float | None) -> Row:
        row = await self._one("SELECT * FROM sessionq.prune_operator_rows(%s)", (stalled_worker_age,))
        assert row is not None
        return row

    # -- Sessions (the web console) -----------------------------------------------------------------

    async def find_sessions(self, text: str = "", state: str | None = None, limit: int = 50, *,
                            viewer: str | None = None) -> list[Row]:
        """Sessions newest first: by id (a whole UUID), else whose name, agent or creator contains
        `text` (case-insensitive; empty: any), optionally in one state. With `viewer` (a user who
        is not an admin) only the rows the API shows them (sessionq.console_sees)."""
        sid: UUID | None = None
        try:
            sid = UUID(text.strip()) if text.strip() else None
        except ValueError:
            sid = None
        pattern = "%" + text.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        return await self._rows(
            "SELECT session_id, name, creator, agent_namespace, agent_name, state, operation, claim_state,"
            " failure_reason, created_at, updated_at FROM sessionq.session_overview"
            " WHERE (%(id)s::uuid IS NULL OR session_id = %(id)s)"
            "   AND (%(id)s::uuid IS NOT NULL OR %(text)s = '' OR name ILIKE %(pattern)s"
            "        OR agent_name ILIKE %(pattern)s OR creator ILIKE %(pattern)s OR agent_namespace ILIKE %(pattern)s)"
            "   AND (%(state)s::text IS NULL OR state = %(state)s)"
            "   AND (%(viewer)s::text IS NULL"
            "        OR creator = %(viewer)s AND sessionq.console_sees(session_id, %(viewer)s))"
            " ORDER BY session_id DESC LIMIT %(limit)s",
            {"id": sid, "text": text.strip(), "pattern": pattern, "state": state, "limit": limit, "viewer": viewer},
        )

    async def recent_events(self, session_id: UUID | None = None, limit: int = 100, *,
                            viewer: str | None = None) -> list[Row]:
        """The newest lifecycle events (docs/events.md), of one Session or of all; with `viewer` (a
        user who is not an admin) only those of the Sessions they own."""
        return await self._rows(
            "SELECT (xid::text || '-' || seq) AS id, session_id, kind, owner, agent_namespace, agent_name,"
            " operation_id, task_id, payload, created_at FROM sessionq.lifecycle_events"
            " WHERE (%(session)s::uuid IS NULL OR session_id = %(session)s)"
            "   AND (%(viewer)s::text IS NULL OR owner = %(viewer)s)"
            " ORDER BY xid DESC, seq DESC LIMIT %(limit)s",
            {"session": session_id, "viewer": viewer, "limit": limit},
        )

    async def session_detail(self, session_id: UUID, *, viewer: str | None = None) -> dict[str, Any] | None:
        """One Session as an operator sees it: its overview row (state, operation, claims, delete
        blockers...), its pending operation, claims, latest turns, checkpoints, forks and jobs.
        With `viewer` (not an admin): None unless the API shows them the Session, and only the
        forks it shows them."""
        session = await self._one(
            "SELECT o.*, s.source_checkpoint_id, s.request_kind, s.deletion_reason, s.dispatch_failure"
            " FROM sessionq.session_overview o JOIN sessionq.sessions s ON s.id = o.session_id"
            " WHERE o.session_id = %s AND sessionq.console_sees(o.session_id, %s)", (session_id, viewer))
        if session is None:
            return None
        sid = (session_id,)
        turns: list[Row] = []
        if session["state"] not in ("DELETED", "DELETING"):
            # the Session's turns as its owner sees them through TurnService (sessionq.list_turns)
            turns = await self._rows(
                "SELECT t ->> 'task_id' AS task_id, (t ->> 'seq')::int AS seq, t ->> 'state' AS state,"
                " (t ->> 'updated_at')::timestamptz AS updated_at, t ->> 'status' AS status,"
                " t ->> 'message' AS message, t ->> 'checkpoint_id' AS checkpoint_id"
                " FROM sessionq.sessions s, sessionq.list_turns(s.id, s.creator, (SELECT greatest(max(k.seq) - 20, 0)"
                " FROM sessionq.tasks k WHERE k.session_id = s.id), 20) t WHERE s.id = %s ORDER BY seq DESC", sid)
        return {
            "session": session,
            "turns": turns,
            "snapshots": await self._one("SELECT * FROM sessionq.session_snapshots WHERE session_id = %s", sid),
            "pending": await self._one("SELECT * FROM sessionq.pending_operations WHERE session_id = %s", sid),
            "claims": await self._rows("SELECT * FROM sessionq.claims WHERE session_id = %s ORDER BY kind", sid),
            "tasks": await self._rows(
                "SELECT id, seq, state, phase, version, dispatch_id, created_at, updated_at FROM sessionq.tasks"
                " WHERE session_id = %s ORDER BY seq DESC LIMIT 20", sid),
            "checkpoints": await self._rows(
                "SELECT id, name, state, live_forks, failure_message, created_at FROM sessionq.checkpoints_overview"
                " WHERE session_id = %s ORDER BY created_at DESC", sid),
            "forks": await self._rows(
                "SELECT f.id AS session_id, f.name, f.state, f.source_checkpoint_id FROM sessionq.sessions f"
                " JOIN sessionq.checkpoints c ON c.id = f.source_checkpoint_id"
                " WHERE c.session_id = %s AND sessionq.console_sees(f.id, %s) ORDER BY f.id DESC LIMIT 50",
                (session_id, viewer)),
            "jobs": await self._rows(
                "SELECT job_id, queue_name, task_name, status, attempts, worker_name, status_age FROM"
                " sessionq.job_overview WHERE args ->> 'session_id' = %s ORDER BY job_id DESC LIMIT 20",
                (str(session_id),)),
        }

    async def fork_at_turn(self, session_id: UUID, task_id: str, request_id: str) -> Row | None:
        """Fork a Session at a retained turn on behalf of its creator (the fork is theirs, as if they
        had called ForkAtTurn; idempotent by request id): the admitted fork's row."""
        return await self._one(
            "SELECT (f.session ->> 'id')::uuid AS session_id, f.outcome FROM sessionq.sessions s,"
            " sessionq.admit_fork_at_turn(s.id, s.creator, %s, %s) f WHERE s.id = %s",
            (request_id, task_id, session_id))

    async def overview(self) -> Row:
        """What the console's overview shows: `status()` plus operations stuck for five minutes."""
        out = await self.status()
        stuck = await self._rows(
            "SELECT session_id, kind, age, claim_state, job_id, job_status, failure_reason, failure_message"
            " FROM sessionq.pending_operations WHERE age > interval '5 minutes' ORDER BY age DESC LIMIT 20")
        out["stuck_operations"] = stuck
        out["queue_list"] = await self.queues()
        out["recent_failures"] = await self.recent_failures(10)
        return out

    async def user_overview(self, viewer: str) -> Row:
        """The console's overview for a user who is not an admin: only their own Sessions (what
        the API shows them) by state, their operations in flight and those stuck for five minutes."""
        sessions = await self._rows(
            "SELECT state, count(*) AS sessions FROM sessionq.sessions s"
            " WHERE s.creator = %(viewer)s AND sessionq.console_sees(s.id, %(viewer)s) GROUP BY state",
            {"viewer": viewer})
        pending = await self._rows(
            "SELECT kind, count(*) AS operations, max(age) AS oldest_age,"
            " count(*) FILTER (WHERE job_status IS NULL) AS without_job"
            " FROM sessionq.pending_operations WHERE sessionq.console_sees(session_id, %s) GROUP BY kind ORDER BY kind",
            (viewer,))
        stuck = await self._rows(
            "SELECT session_id, kind, age, claim_state, job_id, job_status, failure_reason, failure_message"
            " FROM sessionq.pending_operations"
            " WHERE age > interval '5 minutes' AND sessionq.console_sees(session_id, %s) ORDER BY age DESC LIMIT 20",
            (viewer,))
        return {"sessions": {r["state"]: r["sessions"] for r in sessions}, "pending_operations": pending,
                "stuck_operations": stuck}

    # -- views and the status screen ---------------------------------------------------------------

    async def retry_quiescence(self, session_id: str) -> int | None:
        row = await self._one("SELECT sessionq.retry_quiescence(%s) AS job_id", (session_id,))
        return row["job_id"] if row else None

    async def view(self, name: str, limit: int = 1000) -> list[Row]:
        """All rows of one of the operator views (tests, ad-hoc tooling)."""
        if name not in VIEWS:
            raise errors.invalid(f"unknown view {errors.clip(name)}; one of {', '.join(VIEWS)}")
        return await self._rows(f"SELECT * FROM sessionq.{name} LIMIT %s", (limit,))  # name checked above

    async def status(self) -> Row:
        """Everything `sessionq status` shows, in one dict."""
        sessions = await self._rows("SELECT state, count(*) AS sessions FROM sessionq.sessions GROUP BY state")
        pending = await self._rows(
            "SELECT kind, count(*) AS operations, max(age) AS oldest_age,"
            " count(*) FILTER (WHERE job_status IS NULL) AS without_job"
            " FROM sessionq.pending_operations GROUP BY kind ORDER BY kind"
        )
        claims = await self._rows(
            "SELECT kind, state, count(*) AS claims FROM sessionq.claims GROUP BY kind, state ORDER BY kind, state"
        )
        backlog = await self._rows(
            "SELECT status, count(*) AS sessions, max(waiting) AS oldest_waiting"
            " FROM sessionq.quiescence_backlog GROUP BY status ORDER BY status"
        )
        queues = await self._rows("SELECT * FROM sessionq.queue_depth ORDER BY queue_name, status")
        stalled = await self._rows("SELECT count(*) AS jobs FROM sessionq.stalled_jobs")
        # between turns (30_tasks.sql): queued turns, paused and warm Actors, turns failed as stalled
        between = await self._rows(
            "SELECT (SELECT count(*) FROM sessionq.turn_queue) AS queued_turns,"
            " (SELECT count(DISTINCT session_id) FROM sessionq.turn_queue) AS queued_sessions,"
            " (SELECT max(waiting) FROM sessionq.turn_queue) AS oldest_queued,"
            " (SELECT count(*) FROM sessionq.sessions WHERE actor_paused_at IS NOT NULL) AS paused_actors,"
            " (SELECT count(*) FROM sessionq.quiescence_backlog WHERE status = 'warm') AS warm_actors,"
            " (SELECT count(*) FROM sessionq.sessions"
            "   WHERE dispatch_failure ->> 'message' LIKE 'the turn stalled%%') AS stalled_turns"
        )
        paused = await self._rows("SELECT queue_name, paused_by, paused_at FROM sessionq.paused_queues ORDER BY 1")
        # the process runtime (sessionq.runtime.process) keeps its own schema: shown when it is in use
        process = await self._rows(
            "SELECT to_regclass('sessionq_process.actors') IS NOT NULL AS present"
        )
        process_runtime = None
        if process and process[0]["present"]:
            counts = await self._rows(
                "SELECT count(*) AS actors, count(*) FILTER (WHERE worker IS NOT NULL) AS with_process"
                " FROM sessionq_process.actors"
            )
            process_runtime = counts[0] if counts else None
            # the running runtime server's isolation level (runtime/process/sandbox.py names its
            # connection), on this database: another sessionq on the same server is not this one's
            level = await self._rows(
                "SELECT substr(application_name, length(%s) + 2) AS isolation FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name LIKE %s || ' %%' LIMIT 1",
                (PROCESS_RUNTIME_APPLICATION, PROCESS_RUNTIME_APPLICATION),
            )
            if process_runtime is not None:
                process_runtime = {**process_runtime, "isolation": level[0]["isolation"] if level else None}
        return {
            "process_runtime": process_runtime,
            "paused_queues": paused,
            "recent_failures": await self.recent_failures(5),
            "sessions": {r["state"]: r["sessions"] for r in sessions},
            "pending_operations": pending,
            "claims": claims,
            "quiescence_backlog": backlog,
            "queues": queues,
            "workers": await self.workers(),
            "stalled_jobs": stalled[0]["jobs"] if stalled else 0,
            "between_turns": between[0] if between else {},
            "leaders": (leaders := await self.leaders()),
            "expiry_leader": next((r for r in leaders if r["role"] == "expiry"), None),
        }

    async def leaders(self) -> list[Row]:
        """Leaders of the leader-only periodic jobs (sessionq.leaders: expiry, revision_gc), if recorded."""
        exists = await self._one("SELECT to_regclass('sessionq.leaders') IS NOT NULL AS present")
        if not exists or not exists["present"]:
            return []
        return await self._rows(
            "SELECT role, holder, since, last_run, now() - since AS held_for, now() - last_run AS last_run_age"
            " FROM sessionq.leaders ORDER BY role"
        )

    # -- the fleet (schema/22_fleet.sql, 45_usage.sql): what the console shows and starts ------------

    async def fleet_sessions(self, filter_: dict[str, Any], viewer: str | None, limit: int = 50) -> list[Row]:
        """The Sessions a fleet filter matches, in id order (sessionq.search_sessions): everyone's for
        an admin (`viewer` None), else the viewer's own, each with its labels and Actor state."""
        return await self._rows(
            "SELECT (p ->> 'id')::uuid AS session_id, p ->> 'name' AS name, p ->> 'creator' AS creator,"
            " p ->> 'agent_namespace' AS agent_namespace, p ->> 'agent_name' AS agent_name, p ->> 'state' AS state,"
            " p -> 'labels' AS labels,"
            " sessionq.actor_state(jsonb_populate_record(NULL::sessionq.sessions, p)) AS actor_state,"
            " (p ->> 'created_at')::timestamptz AS created_at"
            " FROM sessionq.search_sessions(%s, NULL, %s, %s, NULL, %s) p",
            (viewer or "", viewer is None, Jsonb(filter_), limit))

    async def fleet_count(self, filter_: dict[str, Any], viewer: str | None) -> int:
        row = await self._one("SELECT sessionq.count_sessions(%s, NULL, %s, %s) AS n",
                              (viewer or "", viewer is None, Jsonb(filter_)))
        return int(row["n"]) if row else 0

    async def session_fleet(self, session_id: UUID) -> Row | None:
        """A Session's labels, own idle TTL, Actor state and usage (the caller checked it may see it)."""
        return await self._one(
            "SELECT s.labels, s.idle_ttl, sessionq.actor_state(s) AS actor_state, u.turns, u.running_seconds,"
            " u.running_since, u.snapshots, u.snapshot_bytes, u.snapshots_sized, u.checkpoints_held, u.resumes,"
            " u.resume_seconds, u.resume_seconds_max"
            " FROM sessionq.sessions s LEFT JOIN sessionq.session_usage u ON u.session_id = s.id WHERE s.id = %s",
            (session_id,))

    async def bulk_actions(self, viewer: str | None, limit: int = 50) -> list[Row]:
        """Recent bulk actions, newest first: every caller's for an admin (`viewer` None), else the viewer's."""
        return await self._rows(
            "SELECT * FROM sessionq.bulk_actions WHERE %(viewer)s::text IS NULL OR caller = %(viewer)s"
            " ORDER BY id DESC LIMIT %(limit)s", {"viewer": viewer, "limit": limit})

    async def bulk_action(self, bulk_id: UUID, viewer: str | None) -> tuple[Row, list[Row]] | None:
        """One bulk action and the Sessions it reported (first 500), if the viewer may see it."""
        action = await self._one(
            "SELECT * FROM sessionq.bulk_actions WHERE id = %s AND (%s::text IS NULL OR caller = %s)",
            (bulk_id, viewer, viewer))
        if action is None:
            return None
        items = await self._rows(
            "SELECT session_id, code, message FROM sessionq.bulk_action_items WHERE bulk_id = %s"
            " ORDER BY session_id LIMIT 500", (bulk_id,))
        return action, items

    async def set_session_labels(self, session_id: UUID, set_labels: dict[str, str], remove: list[str]) -> Row | None:
        """Change a Session's labels on behalf of its creator (sessionq.set_session_labels, as the
        owner calls it: the same rules, checked by check_labels): the Session's new labels, or None
        when there is no such Session."""
        return await self._one(
            "SELECT sessionq.set_session_labels(s.id, s.creator, NULL, %s, %s) -> 'labels' AS labels"
            " FROM sessionq.sessions s WHERE s.id = %s", (Jsonb(set_labels), remove, session_id))

    async def set_session_idle_ttl(self, session_id: UUID, idle_ttl: float | None) -> Row | None:
        """Set a Session's own idle TTL on behalf of its creator (sessionq.set_session_idle_ttl; None:
        back to sessions.idleTtl, 0: never; the caller checked the operator's bounds), or None when
        there is no such Session."""
        return await self._one(
            "SELECT sessionq.set_session_idle_ttl(s.id, s.creator, NULL, %s) ->> 'idle_ttl' AS idle_ttl"
            " FROM sessionq.sessions s WHERE s.id = %s", (idle_ttl, session_id))

    async def start_bulk_action(self, by: str, request_id: str, kind: str, filter_: dict[str, Any]) -> Row:
        """An admin's bulk action over every creator's matching Sessions (sessionq.start_bulk_action)."""
        row = await self._one("SELECT sessionq.start_bulk_action(%s, %s, true, %s, %s, NULL) AS a",
                              (by, request_id, kind, Jsonb(filter_)))
        assert row is not None
        return dict(row["a"])


VIEWS = ("session_overview", "claims", "pending_operations", "quiescence_backlog", "checkpoints_overview",
         "queue_depth", "stalled_jobs", "workers", "job_overview", "agent_overview", "recent_failures", "queues",
         "turn_queue")


# -- presentation helpers (shared by the CLI and tests) -------------------------------------------

def jsonable(value: Any) -> Any:
    """Rows -> JSON: timestamps as ISO 8601 UTC, intervals as seconds, UUIDs as strings."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.timedelta):
        return round(value.total_seconds(), 3)
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, UUID):
        return str(value)
    return value


def age(value: dt.timedelta | dt.datetime | None, now: dt.datetime | None = None) -> str:
    """kubectl-style age of an interval or since a timestamp: 45s, 11m, 2h, 3d ("-" when unknown)."""
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        value = (now or dt.datetime.now(dt.UTC)) - value
    seconds = max(0, int(value.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
