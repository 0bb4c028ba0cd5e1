"""The console's pages and actions (a Starlette app rendering Jinja2 templates).

Authentication: the same bearer tokens as the API (auth.tokens). The login form checks a token and
keeps it in an HttpOnly, SameSite=Strict cookie; every request maps it to its user again, so a
token removed from the configuration logs its user out. `sessionq up` passes its local user, who
needs no login. Admins (auth.admins, and up's local user) see everything and may act.

Everyone else sees what the API shows them and nothing more: their own Sessions (sessionq.console_sees:
never another user's, nor a tombstone), with their operations, claims, turns, checkpoints, forks
and the jobs that work on them. The operator pages (jobs, one job's errors and traceback, queues,
workers, recorded actions) are the machinery every user's work shares and carry other users'
Session ids, arguments and errors; the API shows a user none of it, so they are refused (403).

Actions are forms (POST, with a per-user CSRF token) that call the operator procedures the CLI
calls (sessionq.db.operator_store: requeue_job, cancel_job, request_drain, pause_queue,
resume_queue, requeue_jobs), so each is recorded in job_actions with the operator's name. A form
carries the state the page showed (the job's status, the worker's id): a job or worker that changed
meanwhile is refused by the procedure and nothing changes. After an action the browser is sent back
to the page with a one-line result.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from importlib import resources
from typing import Any
from urllib.parse import urlencode
from uuid import UUID, uuid4

import jinja2
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from sessionq import errors
from sessionq.config import Settings
from sessionq.db.operator_store import JOB_STATUSES, SESSION_STATES, OperatorStore
from sessionq.domain.labels import key_valid, parse_assignments, parse_selector
from sessionq.models import BulkActionKind

COOKIE = "sessionq_console"
MAX_FIELD = 200  # characters of any form field or search term accepted
EVENTS_LIVE_EVERY = 5  # seconds between the reads of a live Events page
DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
MAX_IDLE_TTL = 100 * 365 * 86400  # seconds: sessionq's own bound of an idle TTL (as the API's)


class Refused(Exception):
    """A request the console refuses with a short message (bad input, not allowed)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


# -- presentation helpers ---------------------------------------------------------------------------

def age(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        value = datetime.now(UTC) - value
    if isinstance(value, timedelta):
        seconds = max(0, int(value.total_seconds()))
    elif isinstance(value, int | float | Decimal):
        seconds = max(0, int(value))
    else:
        return str(value)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "-" if value is None else str(value)


def seconds(value: Any) -> str:
    if isinstance(value, timedelta):
        return f"{value.total_seconds():.3f}s"
    return "-"


def parse_duration(text: str, what: str) -> float | None:
    """`30s`, `2m`, `500ms`, `1h`, `0`: seconds; empty: None."""
    text = text.strip().lower()
    if not text:
        return None
    m = DURATION.match(text)
    if not m or not math.isfinite(float(m.group(1))):
        raise Refused(f"{what}: {text[:20]!r} is not a duration like 30s, 2m or 0s")
    value = float(m.group(1)) * UNITS[m.group(2)]
    if value > 86400:
        raise Refused(f"{what}: at most a day")
    return value


def parse_idle_ttl(text: str, max_ttl: float, allow_never: bool) -> float | None:
    """A Session's own idle TTL from the form: `3d`, `12h`, `90m`, `0s` (never); empty: None (back
    to sessions.idleTtl). Within the operator's bounds, as the API checks them."""
    text = text.strip().lower()
    if not text:
        return None
    m = DURATION.match(text)
    if not m or not math.isfinite(float(m.group(1))):
        raise Refused(f"idle TTL: {text[:20]!r} is not a duration like 3d, 12h or 90m (0s: never)")
    ttl = float(m.group(1)) * UNITS[m.group(2)]
    if ttl == 0 and not allow_never:
        raise Refused("idle TTL: 0s (never expire) is not allowed here (sessions.allowNoIdleTtl)")
    if max_ttl and ttl > max_ttl:
        raise Refused(f"idle TTL: at most {max_ttl:g}s (sessions.maxIdleTtl)")
    if ttl > MAX_IDLE_TTL:
        raise Refused(f"idle TTL: at most {MAX_IDLE_TTL // 86400} days")
    return ttl


def field(form: Any, name: str, *, required: bool = False) -> str:
    value = form.get(name, "")
    if not isinstance(value, str):
        raise Refused(f"{name}: expected text")
    if len(value) > MAX_FIELD:
        raise Refused(f"{name}: too long (at most {MAX_FIELD} characters)")
    if required and not value.strip():
        raise Refused(f"{name}: required")
    return value.strip()


# -- the app ----------------------------------------------------------------------------------------

class Console:
    def __init__(self, settings: Settings, pool: AsyncConnectionPool, local_user: str | None) -> None:
        self.tokens = dict(settings.auth.tokens)
        self.admins = set(settings.auth.admins)
        self.max_idle_ttl = settings.sessions.max_idle_ttl
        self.allow_no_idle_ttl = settings.sessions.allow_no_idle_ttl
        self.local_user = local_user
        self.ops = OperatorStore.from_pool(pool)
        self._key = secrets.token_bytes(32)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(resources.files("sessionq.console") / "templates")),
            autoescape=True, undefined=jinja2.StrictUndefined,
        )
        self.env.filters.update(age=age, when=when, seconds=seconds)
        self.env.globals.update(JOB_STATUSES=JOB_STATUSES, SESSION_STATES=SESSION_STATES)

    # -- who is asking --------------------------------------------------------------------------------

    def user(self, request: Request) -> tuple[str, bool] | None:
        """(user, admin) of the request, or None when it must log in."""
        token = request.cookies.get(COOKIE)
        if token:
            for known, user in self.tokens.items():
                if hmac.compare_digest(known.encode(), token.encode()):
                    return user, user in self.admins
            return None
        if self.local_user:
            return self.local_user, True
        return None

    def viewer(self, request: Request) -> str | None:
        """Whose rows the request may see: None for an admin (every row), else its user."""
        who = self.user(request)
        if who is None:
            raise Refused("log in first", 401)
        user, admin = who
        return None if admin else user

    def csrf(self, request: Request, user: str) -> str:
        basis = (request.cookies.get(COOKIE) or f"local:{user}").encode()
        return hmac.new(self._key, basis, hashlib.sha256).hexdigest()

    # -- rendering ------------------------------------------------------------------------------------

    def page(self, request: Request, template: str, http_status: int = 200, **values: Any) -> HTMLResponse:
        who = self.user(request)
        user, admin = who if who else ("", False)
        html = self.env.get_template(template).render(
            user=user, admin=admin, csrf=self.csrf(request, user) if user else "",
            msg=request.query_params.get("msg", "")[:500], err=request.query_params.get("err", "")[:500],
            path=request.url.path, local=bool(self.local_user) and not request.cookies.get(COOKIE), **values)
        return HTMLResponse(html, status_code=http_status, headers={
            "Cache-Control": "no-store", "X-Frame-Options": "DENY", "Content-Security-Policy":
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"})

    def back(self, to: str, *, msg: str = "", err: str = "") -> RedirectResponse:
        query = urlencode({k: v for k, v in (("msg", msg), ("err", err)) if v})
        return RedirectResponse(f"{to}?{query}" if query else to, status_code=303)

    # -- routing helpers ------------------------------------------------------------------------------

    def view(self, handler: Callable[[Request], Awaitable[Response]], *,
             admins_only: bool = False) -> Callable[[Request], Awaitable[Response]]:
        """A page; with `admins_only`, an operator page that anyone but an admin is refused."""
        async def guarded(request: Request) -> Response:
            who = self.user(request)
            if who is None:
                return RedirectResponse(f"/login?{urlencode({'next': request.url.path})}", status_code=303)
            if admins_only and not who[1]:
                return self.page(request, "error.html", http_status=403,
                                 message=f"{who[0]} sees their own Sessions only: the operator pages (jobs, queues, "
                                         "workers, actions) need an admin (auth.admins)")
            try:
                return await handler(request)
            except Refused as e:
                return self.page(request, "error.html", http_status=e.status, message=e.message)
            except errors.SessionqError as e:
                return self.page(request, "error.html", http_status=400, message=f"{e.code.name}: {e.message}")
        return guarded

    def action(self, handler: Callable[[Request, Any, str], Awaitable[tuple[str, str]]],
               back: Callable[[Request], str]) -> Callable[[Request], Awaitable[Response]]:
        """A POST that changes something: admins only, with the CSRF token; the handler returns
        (where to go back, what was done); a procedure's refusal is shown there, unchanged."""
        async def guarded(request: Request) -> Response:
            who = self.user(request)
            if who is None:
                return RedirectResponse("/login", status_code=303)
            user, admin = who
            form = await request.form()
            to = back(request)
            if not admin:
                return self.page(request, "error.html", http_status=403,
                                 message=f"{user} may only read: actions need an admin (auth.admins)")
            token = form.get("csrf", "")
            if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.csrf(request, user).encode()):
                return self.page(request, "error.html", http_status=403,
                                 message="the form is stale or not from this console: reload the page and try again")
            try:
                to, done = await handler(request, form, user)
            except Refused as e:
                return self.back(to, err=e.message)
            except errors.SessionqError as e:
                return self.back(to, err=f"{e.code.name}: {e.message}")
            return self.back(to, msg=done)
        return guarded

    # -- login ----------------------------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        return self.page(request, "login.html", next=safe_next(request.query_params.get("next", "/")))

    async def login(self, request: Request) -> Response:
        form = await request.form()
        token = form.get("token", "")
        target = safe_next(str(form.get("next", "/")))
        if not isinstance(token, str) or not token.strip() or len(token) > 1000:
            return self.page(request, "login.html", http_status=400, next=target, error="enter a token")
        user = next((u for t, u in self.tokens.items() if hmac.compare_digest(t.encode(), token.strip().encode())),
                    None)
        if user is None:
            return self.page(request, "login.html", http_status=401, next=target,
                             error="that token is not known (auth.tokens)")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, token.strip(), httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", max_age=12 * 3600)
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    # -- pages ----------------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        viewer = self.viewer(request)
        if viewer is not None:
            return self.page(request, "overview.html", o=await self.ops.user_overview(viewer), actions=[])
        return self.page(request, "overview.html", o=await self.ops.overview(),
                         actions=await self.ops.recent_actions(10))

    async def sessions(self, request: Request) -> Response:
        text = request.query_params.get("q", "")
        state = request.query_params.get("state") or None
        selector = request.query_params.get("selector", "")
        if len(text) > MAX_FIELD or len(selector) > MAX_FIELD:
            raise Refused(f"the search is too long (at most {MAX_FIELD} characters)")
        if state is not None and state not in SESSION_STATES:
            raise Refused(f"state: one of {', '.join(SESSION_STATES)}")
        viewer = self.viewer(request)
        if selector.strip():  # the fleet's search (22_fleet.sql): labels, with the count of all matches
            flt = fleet_filter(selector, state)
            rows = await self.ops.fleet_sessions(flt, viewer)
            matched = await self.ops.fleet_count(flt, viewer)
            return self.page(request, "sessions.html", rows=rows, q=text, state=state or "", selector=selector,
                             matched=matched, request_id=str(uuid4()),
                             kinds=[k.value for k in BulkActionKind if k != BulkActionKind.SET_IDLE_TTL])
        rows = await self.ops.find_sessions(text, state, viewer=viewer)
        return self.page(request, "sessions.html", rows=rows, q=text, state=state or "", selector="", matched=None,
                         request_id="", kinds=[])

    async def session(self, request: Request) -> Response:
        try:
            sid = UUID(request.path_params["session_id"])
        except ValueError:
            raise Refused("not a session ID (a UUID)", 404) from None
        detail = await self.ops.session_detail(sid, viewer=self.viewer(request))
        if detail is None:
            raise Refused(f"session {sid} not found", 404)
        return self.page(request, "session.html", d=detail, fleet=await self.ops.session_fleet(sid),
                         fork_request=str(uuid4()))

    async def bulk_actions(self, request: Request) -> Response:
        return self.page(request, "bulk.html", rows=await self.ops.bulk_actions(self.viewer(request)))

    async def bulk_action(self, request: Request) -> Response:
        try:
            bulk_id = UUID(request.path_params["bulk_id"])
        except ValueError:
            raise Refused("not a bulk action ID (a UUID)", 404) from None
        found = await self.ops.bulk_action(bulk_id, self.viewer(request))
        if found is None:
            raise Refused(f"bulk action {bulk_id} not found", 404)
        return self.page(request, "bulk_action.html", a=found[0], items=found[1])

    async def events(self, request: Request) -> Response:
        raw = request.query_params.get("session", "").strip()
        try:
            sid = UUID(raw) if raw else None
        except ValueError:
            raise Refused("session: a session ID (a UUID)") from None
        rows = await self.ops.recent_events(sid, viewer=self.viewer(request))
        # live: the page reads itself again every few seconds (a refresh: the console runs no script)
        return self.page(request, "events.html", rows=rows, session=raw,
                         live=request.query_params.get("live") == "1", live_every=EVENTS_LIVE_EVERY)

    async def jobs(self, request: Request) -> Response:
        params = request.query_params
        queue = params.get("queue") or None
        status = params.get("status") or None
        task = params.get("task") or None
        before = params.get("before") or None
        if status is not None and status not in JOB_STATUSES:
            raise Refused(f"status: one of {', '.join(JOB_STATUSES)}")
        for name, value in (("queue", queue), ("task", task)):
            if value is not None and not re.fullmatch(r"[A-Za-z0-9_.:-]{1,100}", value):
                raise Refused(f"{name}: letters, digits, _ . : - only")
        if before is not None and (not before.isdigit() or len(before) > 18):
            raise Refused("before: a job id")
        rows = await self.ops.list_jobs(queue=queue, status=status, task=task,
                                        before=int(before) if before else None, limit=51)
        more = rows[50]["job_id"] if len(rows) > 50 else None
        stalled = {r["job_id"] for r in await self.ops.stalled_jobs()}
        return self.page(request, "jobs.html", rows=rows[:50], more=more, queue=queue or "", status=status or "",
                         task=task or "", stalled=stalled)

    async def job(self, request: Request) -> Response:
        job_id = int(request.path_params["job_id"])
        job = await self.ops.job(job_id)
        if job is None:
            raise Refused(f"job {job_id} not found (succeeded jobs are kept for jobs.retention)", 404)
        stalled = any(r["job_id"] == job_id for r in await self.ops.stalled_jobs())
        return self.page(request, "job.html", job=job, attempts=await self.ops.job_attempts(job_id),
                         events=await self.ops.job_events(job_id), actions=await self.ops.job_actions(job_id),
                         stalled=stalled)

    async def workers(self, request: Request) -> Response:
        return self.page(request, "workers.html", rows=await self.ops.workers())

    async def queues(self, request: Request) -> Response:
        return self.page(request, "queues.html", rows=await self.ops.queues())

    async def between_turns(self, request: Request) -> Response:
        b = await self.ops.between_turns()
        return self.page(request, "between_turns.html", queued=b["queued"], idle=b["idle"], stalled=b["stalled"])

    async def actions(self, request: Request) -> Response:
        return self.page(request, "actions.html", rows=await self.ops.recent_actions(200))

    # -- actions --------------------------------------------------------------------------------------

    async def retry(self, request: Request, form: Any, user: str) -> tuple[str, str]:
        job_id = int(request.path_params["job_id"])
        expect = field(form, "expect", required=True)
        if expect not in JOB_STATUSES:
            raise Refused("expect: a job status")
        row = await self.ops.retry_job(job_id, user, expect=expect)
        done = {"run_now": "is due now", "requeued": "is waiting to run again",
                "covered": "was cancelled: a waiting job with the same queueing lock does its work",
                "aborted": "was marked aborted (its abort had been requested)"}.get(row["action"], row["action"])
        return f"/jobs/{job_id}", f"job {job_id} {done}"

    async def cancel(self, request: Request, form: Any, user: str) -> tuple[str, str]:
        job_id = int(request.path_params["job_id"])
        expect = field(form, "expect", required=True)
        if expect not in JOB_STATUSES:
            raise Refused("expect: a job status")
        row = await self.ops.cancel_job(job_id, abort=expect == "doing", by=user, expect=expect)
        done = "abort requested: its worker cancels it within seconds" if row["action"] == "abort_requested" \
            else "cancelled"
        return f"/jobs/{job_id}", f"job {job_id} {done}"

    async def requeue_stalled(self, request: Request, form: Any, user: str) -> tuple[str, str]:
        rows = await self.ops.requeue("stalled", queue=None, task=None, since=None, by=user, dry_run=False)
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["action"]] = counts.get(r["action"], 0) + 1
        return "/jobs", (f"{len(rows)} stalled job(s): " + ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
                         if rows else "no stalled job")

    async def drain(self, request: Request, form: Any, user: str) -> tuple[str, str]:
        timeout = parse_duration(field(form, "timeout"), "timeout")
        if form.get("all") == "1":
            row = await self.ops.request_drain("*", timeout, user)
            return "/workers", f"drain {row['drain_id']} requested for every worker ({len(row['workers'])} running)"
        name = field(form, "name", required=True)
        worker_id = field(form, "worker_id", required=True)
        if not worker_id.isdigit() or len(worker_id) > 18:
            raise Refused("worker_id: a worker id")
        row = await self.ops.request_drain(name, timeout, user, worker_id=int(worker_id))
        return "/workers", f"drain {row['drain_id']} requested for {name}: it finishes its running jobs and exits"

    async def fork_at_turn(self, request: Request, form: Any, user: str) -> tuple[str, str]:
        """Fork from here: a fork of the Session at one of its retained turns, the creator's."""
        try:
            sid = UUID(request.path_params["session_id"])
        except ValueError:
            raise Refused("not a session ID (a UUID)", 404) from None
        task_id = field(form, "task_id", required=True)
        request_id = field(form, "request_id", required=True)
        row = await self.ops.fork_at_turn(sid, task_id, request_id)
        if row is None:
            raise Refused(f"session {sid} not found", 404)
        return f"/sessions/{row['session_id']}", f"fork {row['session_id']} of turn {task_id} admitted by {user}"

    async def edit_labels(self, request: Request, form: Any, user: str) -> tuple[str, str]:
        """Change a Session's labels on behalf of its creator: kubectl's arguments, `KEY=VALUE` sets
        and `KEY-` removes, separated by spaces (the owner's rules: sessionq.check_labels)."""
        sid = session_id_of(request)
        try:
            sets, removes = parse_assignments(field(form, "labels", required=True).split())
        except errors.SessionqError as e:
            raise Refused(e.message) from None
        if bad := next((k for k in removes if not key_valid(k)), None):
            raise Refused(f"label key {bad[:80]!r} is not valid")
        row = await self.ops.set_session_labels(sid, sets, removes)
        if row is None:
            raise Refused(f"session {sid} not found", 404)
        shown = ", ".join(f"{k}={v}" for k, v in sorted(row["labels"].items())) or "none"
        return f"/sessions/{sid}", f"labels of session {sid} set by {user}: {shown}"

    async def edit_idle_ttl(self, request: Request, form: Any, user: str) -> tuple[str, str]:
        """Set a Session's own idle TTL on behalf of its creator, within the operator's bounds (empty:
        back to sessions.idleTtl)."""
        sid = session_id_of(request)
        ttl = parse_idle_ttl(field(form, "idle_ttl"), self.max_idle_ttl, self.allow_no_idle_ttl)
        if await self.ops.set_session_idle_ttl(sid, ttl) is None:
            raise Refused(f"session {sid} not found", 404)
        shown = "the default (sessions.idleTtl)" if ttl is None else "never" if ttl == 0 else f"{ttl:g}s"
        return f"/sessions/{sid}", f"idle TTL of session {sid} set by {user}: {shown}"

    async def pause(self, request: Request, form: Any, user: str) -> tuple[str, str]:
        name = request.path_params["queue"]
        row = await self.ops.pause_queue(name, user, field(form, "reason"))
        return "/queues", f"queue {name} " + ("paused: no worker fetches from it" if row["changed"]
                                              else "was already paused")

    async def start_bulk(self, request: Request, form: Any, user: str) -> tuple[str, str]:
        """A bulk action over every creator's Sessions the selector matches (an admin's)."""
        kind = field(form, "kind", required=True)
        if kind not in {k.value for k in BulkActionKind} - {BulkActionKind.SET_IDLE_TTL}:
            raise Refused("kind: SUSPEND, RESUME or DELETE")
        selector = field(form, "selector", required=True)
        state = field(form, "state") or None
        if state is not None and state not in SESSION_STATES:
            raise Refused(f"state: one of {', '.join(SESSION_STATES)}")
        action = await self.ops.start_bulk_action(user, field(form, "request_id", required=True), kind,
                                                  fleet_filter(selector, state))
        return f"/bulk/{action['id']}", f"bulk {kind.lower()} started over {action['matched']} session(s)"

    async def resume(self, request: Request, form: Any, user: str) -> tuple[str, str]:
        name = request.path_params["queue"]
        row = await self.ops.resume_queue(name, user)
        return "/queues", f"queue {name} " + ("resumed" if row["changed"] else "was not paused")


def session_id_of(request: Request) -> UUID:
    try:
        return UUID(request.path_params["session_id"])
    except ValueError:
        raise Refused("not a session ID (a UUID)", 404) from None


def fleet_filter(selector: str, state: str | None) -> dict[str, Any]:
    """A fleet filter (sessionq.session_filter_sql) from the console's selector and state."""
    try:
        requirements = parse_selector(selector)
    except errors.SessionqError as e:
        raise Refused(e.message) from None
    flt: dict[str, Any] = {"selector": [r.to_json() for r in requirements]}
    if state:
        flt["states"] = [state]
    return flt


def safe_next(target: str) -> str:
    """Only a path of this console (never another site) after the login."""
    return target if re.fullmatch(r"/[A-Za-z0-9/_\-.]*", target or "") and not target.startswith("//") else "/"


def build_app(settings: Settings, pool: AsyncConnectionPool, *, local_user: str | None = None) -> Starlette:
    c = Console(settings, pool, local_user)
    routes = [
        Route("/login", c.login_form, methods=["GET"]),
        Route("/login", c.login, methods=["POST"]),
        Route("/logout", c.logout, methods=["POST"]),
        Route("/", c.view(c.overview)),
        Route("/sessions", c.view(c.sessions)),
        Route("/sessions/bulk", c.action(c.start_bulk, lambda r: "/bulk"), methods=["POST"]),
        Route("/sessions/{session_id}", c.view(c.session)),
        Route("/events", c.view(c.events)),
        Route("/bulk", c.view(c.bulk_actions)),
        Route("/bulk/{bulk_id}", c.view(c.bulk_action)),
        Route("/jobs", c.view(c.jobs, admins_only=True)),
        Route("/jobs/{job_id:int}", c.view(c.job, admins_only=True)),
        Route("/workers", c.view(c.workers, admins_only=True)),
        Route("/queues", c.view(c.queues, admins_only=True)),
        Route("/between-turns", c.view(c.between_turns, admins_only=True)),
        Route("/actions", c.view(c.actions, admins_only=True)),
        Route("/jobs/{job_id:int}/retry", c.action(c.retry, lambda r: f"/jobs/{r.path_params['job_id']}"),
              methods=["POST"]),
        Route("/jobs/{job_id:int}/cancel", c.action(c.cancel, lambda r: f"/jobs/{r.path_params['job_id']}"),
              methods=["POST"]),
        Route("/jobs/requeue-stalled", c.action(c.requeue_stalled, lambda r: "/jobs"), methods=["POST"]),
        Route("/workers/drain", c.action(c.drain, lambda r: "/workers"), methods=["POST"]),
        Route("/sessions/{session_id}/fork",
              c.action(c.fork_at_turn, lambda r: f"/sessions/{r.path_params['session_id']}"), methods=["POST"]),
        Route("/sessions/{session_id}/labels",
              c.action(c.edit_labels, lambda r: f"/sessions/{r.path_params['session_id']}"), methods=["POST"]),
        Route("/sessions/{session_id}/ttl",
              c.action(c.edit_idle_ttl, lambda r: f"/sessions/{r.path_params['session_id']}"), methods=["POST"]),
        Route("/queues/{queue}/pause", c.action(c.pause, lambda r: "/queues"), methods=["POST"]),
        Route("/queues/{queue}/resume", c.action(c.resume, lambda r: "/queues"), methods=["POST"]),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return HTMLResponse("<!doctype html><title>not found</title><p>Not found. <a href='/'>Overview</a>",
                            status_code=404)

    return Starlette(routes=routes, exception_handlers={404: not_found})
