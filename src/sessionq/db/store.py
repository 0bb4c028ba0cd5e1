"""The store: the only place that talks to sessionq's tables. One method per procedure.

Every method is one short transaction (autocommit calls of a stored procedure); no method is
ever awaited while a runtime call is in flight, and no transaction spans a runtime call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar
from uuid import UUID

from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from sessionq import errors
from sessionq.db import notify
from sessionq.db.connection import DatabaseHealth, Listener, make_pool
from sessionq.db.kept_reads import KeptReads, PointRead
from sessionq.db.notify import Channel
from sessionq.db.raw import Columns, GetValue, RawStatement, record_reader, text_array, text_param
from sessionq.models import (
    Admission,
    AdmissionOutcome,
    Agent,
    ApplyMode,
    CancelAdmission,
    CancelOutcome,
    Checkpoint,
    CheckpointClaim,
    CheckpointClaimStatus,
    CheckpointState,
    Claim,
    ClaimStatus,
    DeletionReason,
    ExpiryOutcome,
    Observation,
    ObservationStatus,
    OperationKind,
    OperationStart,
    QuiescenceFailureReason,
    Revision,
    RowKind,
    Session,
    SessionView,
    Share,
    SharePermission,
    Task,
    TaskPhase,
    TurnFailure,
)

_SessionRead = tuple[UUID, str, str | None, str]  # session id, caller, share token hash, kind
_R = TypeVar("_R")


def _read_params(key: _SessionRead) -> list[bytes | None]:
    sid, caller, share, of = key
    return [str(sid).encode(), text_param(caller), text_param(share), of.encode()]


def _batch_params(keys: list[_SessionRead]) -> list[bytes | None]:
    """A batch of reads as four text arrays: element i of each is read i's."""
    ids, callers, shares, kinds = zip(*keys, strict=True)
    return [text_array([str(i) for i in ids]), text_array(list(callers)), text_array(list(shares)),
            text_array(list(kinds))]


def _whole_session(columns: Columns) -> Callable[[GetValue, int], Session]:
    """A row's `session` column (the whole row as jsonb) as its Session."""
    at = columns["session"]
    return lambda get, r: Session.from_json(json.loads(get(r, at)))  # type: ignore[arg-type]


_VIEW_RECORD = record_reader(SessionView)
_ARRAYS = "$1::uuid[], $2::text[], $3::text[], $4::text[]"
# The point reads of a Session (one coalescer, db/kept_reads.py): the whole row (get_session, or
# get_sessions for a batch: Store.get_session), and what GetSession shows of it (get_session_views:
# Store.get_session_view). Both filter each read by its own caller's access.
_WHOLE_READ = PointRead(
    RawStatement("sessionq_get_session",
                 "SELECT 1 AS ord, sessionq.get_session($1::uuid, $2::text, $3::text, $4::text) AS session"),
    RawStatement("sessionq_get_sessions", f"SELECT ord, session FROM sessionq.get_sessions({_ARRAYS})"),
    _read_params, _batch_params, _whole_session)
_VIEW_READ = PointRead(
    RawStatement("sessionq_get_session_view",
                 "SELECT * FROM sessionq.get_session_views(ARRAY[$1::uuid], ARRAY[$2::text], ARRAY[$3::text],"
                 " ARRAY[$4::text])"),
    RawStatement("sessionq_get_session_views", f"SELECT * FROM sessionq.get_session_views({_ARRAYS})"),
    _read_params, _batch_params, _VIEW_RECORD)

# ListSessions' page (sessionq.list_session_views: get_session_views' columns, the page's position first)
_LIST_VIEWS = RawStatement(
    "sessionq_list_session_views",
    "SELECT * FROM sessionq.list_session_views($1::text, $2::boolean, $3::text, $4::text, $5::uuid, $6::integer,"
    " $7::text)")


class Store:
    def __init__(
        self, pool: AsyncConnectionPool, listener: Listener | None = None, *, coalesce_reads: bool = True
    ) -> None:
        self.pool = pool
        self.listener = listener
        self.health: DatabaseHealth = getattr(pool, "health", None) or DatabaseHealth()
        # the point reads of Sessions, coalesced on a connection kept between statements
        self.reads: KeptReads | None = KeptReads(pool) if coalesce_reads else None

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        listen: bool = True,
        name: str = "sessionq",
        direct_url: str | None = None,
        coalesce_reads: bool = True,
    ) -> Store:
        """The pool, and with `listen` the LISTEN connection that wakes waiters; both report their
        connection attempts to one DatabaseHealth, so calls fail fast while the database is gone.
        The pool connects to `url` (which may be a pooler in transaction mode: every store method
        is one transaction), the LISTEN connection to `direct_url` (default: `url`)."""
        pool = make_pool(url, min_size=1, max_size=pool_size, name=name, direct_url=direct_url)
        await pool.open(wait=True, timeout=30)
        listener = None
        if listen:
            listener = Listener(
                direct_url or url,
                [Channel.SESSION, Channel.TASK, Channel.CHECKPOINT],
                # a notification reaches only the waiters of its Session (thousands of open A2A
                # streams must not each decode every task notification)
                keyed=(Channel.SESSION, Channel.TASK),
                health=pool.health,
            )
            await listener.start()
        return cls(pool, listener, coalesce_reads=coalesce_reads)

    async def close(self, timeout: float = 5.0) -> None:
        """Stop listening and close the pool, waiting up to `timeout` for its background tasks
        (0: do not wait, as a forced stop does)."""
        if self.listener:
            await self.listener.stop()
        if self.reads is not None:
            await self.reads.close()
        await self.pool.close(timeout=timeout)

    # -- plumbing ---------------------------------------------------------------------------

    # Every store method is one statement on a pooled autocommit connection: taken with getconn and
    # given back with putconn, without pool.connection()'s context (its commit of a transaction that
    # autocommit never leaves open, and two context managers per call: ~10 % of a GetSession's
    # Python time). putconn still rolls back and discards a connection left in a bad state.

    async def _fetch(self, sql: str, params: Sequence[Any] | dict[str, Any], row_factory: Any) -> list[Any]:
        with errors.database_errors():
            conn = await self.pool.getconn()
            try:
                cur = conn.cursor(row_factory=row_factory)
                await cur.execute(sql, params)
                return await cur.fetchall()
            finally:
                await self.pool.putconn(conn)

    async def _rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        return await self._fetch(sql, params, dict_row)

    async def _one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any]:
        rows = await self._rows(sql, params)
        assert len(rows) == 1, f"expected one row from {sql!r}"
        return rows[0]

    async def _value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = await self._fetch(sql, params, tuple_row)
        assert len(rows) == 1, f"expected one row from {sql!r}"
        return rows[0][0]

    # -- agents and revisions -----------------------------------------------------------------

    async def apply_agent(
        self,
        namespace: str,
        name: str,
        spec: dict[str, Any],
        spec_hash: str,
        image: str,
        egress: list[dict[str, Any]],
        caller: str,
        admin: bool = False,
        base_revision: UUID | None = None,
        mode: ApplyMode = ApplyMode.APPLY,
    ) -> bool:
        """Create or update an Agent; True when a new revision was made. base_revision: the desired
        revision whose credential values `spec` kept (SQ409 when it is no longer the desired one).
        mode: create refuses an existing Agent (SQ422), update a missing one (SQ404)."""
        row = await self._one(
            "SELECT revision_created FROM sessionq.apply_agent(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (namespace, name, Jsonb(spec), spec_hash, image, Jsonb(egress), caller, admin, base_revision, mode),
        )
        return bool(row["revision_created"])

    # readers see specs redacted (credential header values are write-only)
    _AGENT = "to_jsonb(a) || jsonb_build_object('spec', sessionq.redact_agent_spec(a.spec))"

    async def get_agent(self, namespace: str, name: str) -> Agent:
        """The Agent, its spec's credential header values redacted."""
        rows = await self._rows(
            f"SELECT {self._AGENT} AS a FROM sessionq.agents a WHERE namespace = %s AND name = %s", (namespace, name)
        )
        if not rows:
            raise errors.not_found(f"agent {errors.clip(namespace)}/{errors.clip(name)} not found")
        return Agent.from_json(rows[0]["a"])

    async def stored_agent_spec(self, namespace: str, name: str) -> tuple[UUID, dict[str, Any]] | None:
        """The desired revision and spec of an Agent with its credential values (None: no such
        Agent). Only applying a spec reads them: to keep the values given back as redacted."""
        rows = await self._rows(
            "SELECT desired_revision_id, spec FROM sessionq.agents WHERE namespace = %s AND name = %s",
            (namespace, name),
        )
        return (rows[0]["desired_revision_id"], rows[0]["spec"]) if rows else None

    async def list_agents(self, namespace: str | None, after: tuple[str, str] | None, limit: int) -> list[Agent]:
        """Agents in (namespace, name) order, their specs' credential header values redacted."""
        rows = await self._rows(
            f"SELECT {self._AGENT} AS a FROM sessionq.agents a"
            " WHERE (%(ns)s::text IS NULL OR namespace = %(ns)s)"
            "   AND (%(an)s::text IS NULL OR (namespace, name) > (%(an)s, %(nn)s))"
            " ORDER BY namespace, name LIMIT %(limit)s",
            {"ns": namespace, "an": after[0] if after else None, "nn": after[1] if after else None, "limit": limit},
        )
        return [Agent.from_json(r["a"]) for r in rows]

    async def delete_agent(self, namespace: str, name: str, caller: str, admin: bool = False) -> None:
        await self._rows("SELECT sessionq.delete_agent(%s, %s, %s, %s)", (namespace, name, caller, admin))

    async def agent_revisions(self, namespace: str, name: str) -> list[Revision]:
        rows = await self._rows(
            "SELECT to_jsonb(r) AS r FROM sessionq.revisions r WHERE agent_namespace = %s AND agent_name = %s"
            " ORDER BY number",
            (namespace, name),
        )
        return [Revision.from_json(r["r"]) for r in rows]

    async def get_revision(self, revision_id: UUID) -> Revision:
        rows = await self._rows("SELECT to_jsonb(r) AS r FROM sessionq.revisions r WHERE id = %s", (revision_id,))
        if not rows:
            raise errors.not_found(f"revision {revision_id} not found")
        return Revision.from_json(rows[0]["r"])

    async def finish_revision(self, revision_id: UUID, template_uid: str | None, failure: str | None) -> None:
        await self._rows("SELECT sessionq.finish_revision(%s, %s, %s)", (revision_id, template_uid, failure))

    # -- session lifecycle ----------------------------------------------------------------------

    async def _admit(self, sql: str, params: Sequence[Any]) -> Admission:
        """Run an admission procedure; the Admission carries the LISTEN epoch from before it was
        sent (see `wait_for_generation`)."""
        epoch = self._listen_epoch()
        row = await self._one(sql, params)
        return Admission(
            AdmissionOutcome(row["outcome"]), row["generation"], Session.from_json(row["session"]), epoch
        )

    def _listen_epoch(self) -> int | None:
        return self.listener.epoch if self.listener is not None and self.listener.connected else None

    async def admit_create(self, caller: str, request_id: str, namespace: str, agent: str, name: str) -> Admission:
        return await self._admit(
            "SELECT * FROM sessionq.admit_create(%s, %s, %s, %s, %s)", (caller, request_id, namespace, agent, name)
        )

    async def admit_sandbox(
        self, caller: str, request_id: str, namespace: str, template: str, name: str, ttl: float
    ) -> Admission:
        """CreateSandbox: a Sandbox (a row of kind sandbox) running Agent namespace/template's
        latest successful revision, expiring `ttl` seconds from now."""
        return await self._admit(
            "SELECT * FROM sessionq.admit_sandbox(%s, %s, %s, %s, %s, %s)",
            (caller, request_id, namespace, template, name, ttl),
        )

    async def admit_operation(
        self,
        session_id: UUID,
        caller: str,
        share_hash: str | None,
        kind: OperationKind,
        reason: DeletionReason = DeletionReason.USER_REQUESTED,
        of: RowKind = RowKind.SESSION,
    ) -> Admission:
        """Suspend, Resume or Delete a Session (`of` SANDBOX: a Sandbox)."""
        return await self._admit(
            "SELECT * FROM sessionq.admit_operation(%s, %s, %s, %s, %s, %s)",
            (session_id, caller, share_hash, kind, reason, of),
        )

    async def claim_operation(self, session_id: UUID, generation: UUID, executor: UUID, lifetime: float) -> Claim:
        row = await self._one(
            "SELECT * FROM sessionq.claim_operation(%s, %s, %s, %s)", (session_id, generation, executor, lifetime)
        )
        s = row["session"]
        return Claim(
            ClaimStatus(row["status"]), row["previous_executor"], row["expires_at"], Session.from_json(s) if s else None
        )

    async def record_actor(self, session_id: UUID, generation: UUID, executor: UUID, uid: str) -> None:
        await self._rows("SELECT sessionq.record_actor(%s, %s, %s, %s)", (session_id, generation, executor, uid))

    async def release_operation(
        self, session_id: UUID, generation: UUID, executor: UUID, reason: str | None = None, message: str | None = None
    ) -> None:
        """End a failed attempt without completing; `reason` and `message` say why (shown on the
        Session as its failure while the operation stays pending)."""
        await self._rows(
            "SELECT sessionq.release_operation(%s, %s, %s, %s, %s)", (session_id, generation, executor, reason, message)
        )

    async def complete_operation(
        self,
        session_id: UUID,
        generation: UUID,
        executor: UUID,
        result: dict[str, Any] | None = None,
        job_id: int | None = None,
        keep_job: bool = False,
    ) -> Session | None:
        """Complete the generation; `job_id`, the execute_operation job running it, ends in the
        same transaction (its worker must then skip procrastinate's own finish call): kept as
        succeeded with `keep_job` (jobs.retention above zero), else deleted."""
        value = await self._value(
            "SELECT sessionq.complete_operation(%s, %s, %s, %s, %s, %s)",
            (session_id, generation, executor, Jsonb(result or {}), job_id, keep_job),
        )
        return Session.from_json(value) if value else None

    async def queue_checkpoint(self, checkpoint_id: UUID, at: Any = None) -> None:
        await self._rows("SELECT sessionq.queue_checkpoint(%s, %s)", (checkpoint_id, at))

    async def queue_operation(self, session_id: UUID, at: Any = None) -> None:
        await self._rows("SELECT sessionq.queue_operation(%s, %s)", (session_id, at))

    async def fail_preparation(self, session_id: UUID, generation: UUID, reason: str, message: str) -> Session:
        value = await self._value(
            "SELECT sessionq.fail_preparation(%s, %s, %s, %s)", (session_id, generation, reason, message)
        )
        return Session.from_json(value)

    async def observe(self, session_id: UUID, generation: UUID) -> Observation:
        row = await self._one("SELECT * FROM sessionq.observe(%s, %s)", (session_id, generation))
        s = row["session"]
        return Observation(ObservationStatus(row["status"]), Session.from_json(s) if s else None)

    async def wait_for_generation(
        self, session_id: UUID, generation: UUID, timeout: float, *, admission: Admission | None = None
    ) -> Observation:
        """Wait until the generation is no longer pending, or until timeout; returns the last
        observation (status 'pending' on timeout).

        Woken by NOTIFY on the Session row, whose payload tells whether the generation is still
        pending, so the row is read only when it may have finished; a payload that reports this
        generation completed carries the row itself, which is then the answer and nothing is read.
        `admission` is the caller's own admission of the generation: when its Session shows the
        generation pending and the LISTEN connection has not been re-established since it was sent
        (so no notification since can have been missed), the first read is skipped too."""
        woke = asyncio.Event()
        key = str(session_id)
        generation_text = str(generation)
        completed: list[Session] = []

        def settled(payload: str | None) -> bool:
            """Whether the payload may end the wait; keeps the row when it reports this generation
            completed (notify.SessionChange)."""
            if payload is None:
                return True  # reconnected: notifications may have been missed
            change = notify.session_change(payload)
            if change.gone or change.generation != generation_text:
                return True  # another generation (or the row is gone): read to learn what happened
            if change.operation != OperationKind.NONE:
                return False  # our generation, still pending
            if change.row is not None:
                completed.append(Session.from_json(change.row))  # our generation's outcome
            return True

        def on_notify(payload: str | None) -> None:
            if settled(payload):
                woke.set()

        read = True
        unsubscribe = None
        if self.listener is not None:
            unsubscribe = self.listener.subscribe_key(Channel.SESSION, key, on_notify)
            last = self.listener.recent(Channel.SESSION, key)
            last_settled = last is not None and settled(last)
            if completed:
                read = False  # it completed before we subscribed, and the payload says how
            elif (
                admission is not None
                and admission.session.operation_id == generation
                and admission.session.operation != OperationKind.NONE
                and admission.listen_epoch is not None
                and admission.listen_epoch == self._listen_epoch()
            ):
                read = last_settled
        deadline = time.monotonic() + timeout
        try:
            while True:
                if completed:
                    return Observation(ObservationStatus.DONE, completed[-1])
                remaining = deadline - time.monotonic()
                if read or remaining <= 0:
                    woke.clear()
                    obs = await self.observe(session_id, generation)
                    if obs.status != ObservationStatus.PENDING or remaining <= 0:
                        return obs
                # without a listener (or if a notification is lost) poll now and then
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), timeout=min(remaining, 1.0 if self.listener else 0.05))
                read = True
        finally:
            if unsubscribe:
                unsubscribe()

    async def get_session(
        self, session_id: UUID, caller: str, share_hash: str | None = None, of: RowKind = RowKind.SESSION
    ) -> Session:
        """A Session (`of` SANDBOX: a Sandbox) the caller may see; NOT_FOUND otherwise. Concurrent
        reads are coalesced (db/kept_reads.py) unless the store was opened without coalesce_reads."""
        if self.reads is None:
            return Session.from_json(await self._value(
                "SELECT sessionq.get_session(%s, %s, %s, %s)", (session_id, caller, share_hash, of)))
        with errors.database_errors():
            session = await self.reads.get(_WHOLE_READ, (session_id, caller, share_hash, str(of)))
        if session is None:  # a batch answers no row where get_session raises SQ404
            raise errors.not_found(f"{of} {session_id} not found")
        return session

    async def get_session_view(
        self, session_id: UUID, caller: str, share_hash: str | None = None, of: RowKind = RowKind.SESSION
    ) -> SessionView:
        """What GetSession shows of a Session the caller may see (sessionq.get_session_views: the
        same rule as get_session); NOT_FOUND otherwise. Concurrent reads are coalesced as
        get_session's are, on the same connection."""
        key = (session_id, caller, share_hash, str(of))
        with errors.database_errors():
            if self.reads is not None:
                view = await self.reads.get(_VIEW_READ, key)
            else:
                views = await self._records(_VIEW_READ.single, _read_params(key), _VIEW_RECORD)
                view = views[0] if views else None
        if view is None:
            raise errors.not_found(f"{of} {session_id} not found")
        return view

    async def _records(
        self, statement: RawStatement, params: list[bytes | None],
        record: Callable[[Columns], Callable[[GetValue, int], _R]],
    ) -> list[_R]:
        """A RawStatement's rows as records on a pooled connection, its errors mapped as _fetch maps them."""
        with errors.database_errors():
            conn = await self.pool.getconn()
            try:
                return await statement.records(conn, params, record)
            finally:
                await self.pool.putconn(conn)

    async def session_by_id(self, session_id: UUID) -> Session | None:
        """Unfiltered read for executors and operators (never for client-facing calls)."""
        rows = await self._rows("SELECT to_jsonb(s) AS s FROM sessionq.sessions s WHERE id = %s", (session_id,))
        return Session.from_json(rows[0]["s"]) if rows else None

    async def begin_operation(self, session_id: UUID, executor: UUID, lifetime: float) -> OperationStart:
        """An executor's first step (never client-facing): the Session and its pinned revision,
        claimed at once when preparation has nothing to inspect (see sessionq.begin_operation)."""
        row = await self._one(
            "SELECT * FROM sessionq.begin_operation(%s, %s, %s)", (session_id, executor, lifetime)
        )
        s, r = row["session"], row["revision"]
        session = Session.from_json(s) if s is not None else None
        revision = Revision.from_json(r) if r is not None else None
        claim = None
        status = ClaimStatus(row["status"])
        if status not in (ClaimStatus.PREPARE, ClaimStatus.GONE):
            claim = Claim(status, row["previous_executor"], row["expires_at"], session)
        return OperationStart(session, revision, claim)

    async def list_sessions(
        self,
        caller: str,
        all_creators: bool,
        namespace: str | None,
        agent: str | None,
        after: UUID | None,
        limit: int,
        of: RowKind = RowKind.SESSION,
    ) -> list[Session]:
        rows = await self._rows(
            "SELECT s FROM sessionq.list_sessions(%s, %s, %s, %s, %s, %s, %s) s",
            (caller, all_creators, namespace, agent, after, limit, of),
        )
        return [Session.from_json(r["s"]) for r in rows]

    async def list_session_views(
        self,
        caller: str,
        all_creators: bool,
        namespace: str | None,
        agent: str | None,
        after: UUID | None,
        limit: int,
        of: RowKind = RowKind.SESSION,
    ) -> list[SessionView]:
        """list_sessions' page as what ListSessions shows of each row (sessionq.list_session_views:
        the same rows, no JSON), read through libpq directly as GetSession's reads are."""
        params = [text_param(caller), b"t" if all_creators else b"f", text_param(namespace), text_param(agent),
                  str(after).encode() if after is not None else None, str(limit).encode(), str(of).encode()]
        return await self._records(_LIST_VIEWS, params, _VIEW_RECORD)

    async def rename_session(self, session_id: UUID, caller: str, share_hash: str | None, name: str) -> Session:
        value = await self._value(
            "SELECT sessionq.rename_session(%s, %s, %s, %s)", (session_id, caller, share_hash, name)
        )
        return Session.from_json(value)

    async def visible_actors(
        self, caller: str, share_hash: str | None, actors: Sequence[tuple[str, str, str | None]]
    ) -> set[tuple[str, str]]:
        if not actors:
            return set()
        rows = await self._rows(
            "SELECT actor_atespace, actor_name FROM sessionq.visible_actors(%s, %s, %s, %s, %s)",
            (caller, share_hash, [a[0] for a in actors], [a[1] for a in actors], [a[2] for a in actors]),
        )
        return {(r["actor_atespace"], r["actor_name"]) for r in rows}

    # -- shares ---------------------------------------------------------------------------------

    async def create_share(
        self, session_id: UUID, caller: str, permission: SharePermission, ttl: float | None, token_hash: str
    ) -> Share:
        """ttl: seconds the share is valid (None: until revoked)."""
        value = await self._value(
            "SELECT sessionq.create_share(%s, %s, %s, %s, %s)", (session_id, caller, permission, ttl, token_hash)
        )
        return Share.from_json(value)

    async def list_shares(self, session_id: UUID, caller: str, after: UUID | None, limit: int) -> list[Share]:
        rows = await self._rows(
            "SELECT s FROM sessionq.list_shares(%s, %s, %s, %s) s", (session_id, caller, after, limit)
        )
        return [Share.from_json(r["s"]) for r in rows]

    async def revoke_share(self, share_id: UUID, caller: str) -> None:
        await self._rows("SELECT sessionq.revoke_share(%s, %s)", (share_id, caller))

    # -- turns and the task store -------------------------------------------------------------

    async def secret(self, name: str) -> str:
        return str(await self._value("SELECT value FROM sessionq.secrets WHERE name = %s", (name,)))

    async def admit_turn(
        self,
        session_id: UUID,
        caller: str,
        share_hash: str | None,
        message: dict[str, Any],
        task_id: str | None,
        ttl: float,
    ) -> Session:
        value = await self._value(
            "SELECT sessionq.admit_turn(%s, %s, %s, %s, %s, %s)",
            (session_id, caller, share_hash, Jsonb(message), task_id, ttl),
        )
        return Session.from_json(value)

    async def task_create(self, session_id: UUID, task_id: str, task: dict[str, Any], dispatch_id: UUID | None) -> int:
        return int(
            await self._value(
                "SELECT sessionq.task_create(%s, %s, %s, %s, %s)",
                (session_id, task_id, Jsonb(task), dispatch_id, payload_hash(task, None, dispatch_id)),
            )
        )

    async def task_update(
        self,
        session_id: UUID,
        task_id: str,
        task: dict[str, Any],
        expected_version: int,
        event: dict[str, Any] | None,
        dispatch_id: UUID | None,
    ) -> int:
        return int(
            await self._value(
                "SELECT sessionq.task_update(%s, %s, %s, %s, %s, %s, %s)",
                (
                    session_id,
                    task_id,
                    Jsonb(task),
                    expected_version,
                    Jsonb(event) if event is not None else None,
                    dispatch_id,
                    payload_hash(task, event, dispatch_id),
                ),
            )
        )

    async def task_settle(self, session_id: UUID, task_id: str, version: int) -> None:
        await self._rows("SELECT sessionq.task_settle(%s, %s, %s)", (session_id, task_id, version))

    async def fail_dispatch(self, session_id: UUID, dispatch_id: UUID, message: str, issued: bool) -> None:
        await self._rows("SELECT sessionq.fail_dispatch(%s, %s, %s, %s)", (session_id, dispatch_id, message, issued))

    async def record_turn_failure(self, session_id: UUID, dispatch_id: UUID, reason: TurnFailure, message: str) -> None:
        """Show on the Session why the dispatch's turn could not start (sessionq.record_turn_failure)."""
        await self._rows(
            "SELECT sessionq.record_turn_failure(%s, %s, %s, %s)", (session_id, dispatch_id, reason.value, message)
        )

    async def clear_turn_failure(self, session_id: UUID, reason: TurnFailure) -> None:
        """A resume succeeded: the Session no longer shows that failure (sessionq.clear_turn_failure)."""
        await self._rows("SELECT sessionq.clear_turn_failure(%s, %s)", (session_id, reason.value))

    async def get_task(self, task_id: str) -> Task | None:
        value = await self._value("SELECT sessionq.get_task(%s)", (task_id,))
        return Task.from_json(value) if value else None

    async def task_of_dispatch(self, session_id: UUID, dispatch_id: UUID) -> Task | None:
        rows = await self._rows(
            "SELECT to_jsonb(t) AS t FROM sessionq.tasks t WHERE session_id = %s AND dispatch_id = %s",
            (session_id, dispatch_id),
        )
        return Task.from_json(rows[0]["t"]) if rows else None

    async def list_tasks(self, session_id: UUID, state: str | None, after_seq: int | None, limit: int) -> list[Task]:
        rows = await self._rows(
            "SELECT to_jsonb(t) AS t FROM sessionq.tasks t WHERE session_id = %s"
            " AND (%s::text IS NULL OR state = %s) AND (%s::int IS NULL OR seq < %s)"
            " ORDER BY seq DESC LIMIT %s",
            (session_id, state, state, after_seq, after_seq, limit),
        )
        return [Task.from_json(r["t"]) for r in rows]

    async def count_tasks(self, session_id: UUID, state: str | None) -> int:
        return int(
            await self._value(
                "SELECT count(*) FROM sessionq.tasks WHERE session_id = %s AND (%s::text IS NULL OR state = %s)",
                (session_id, state, state),
            )
        )

    async def wait_for_turn(
        self, session_id: UUID, dispatch_id: UUID, timeout: float
    ) -> tuple[Literal["task", "failed", "pending"], Any]:
        """Wait until the turn of a dispatch ends: ("task", Task) once its task is published in a
        final or waiting state, ("failed", message) if the dispatch failed, ("pending", None) on
        timeout. Woken by NOTIFY sessionq_task."""
        woke = asyncio.Event()

        def on_notify(_payload: str | None) -> None:
            woke.set()

        unsubscribe = (
            self.listener.subscribe_key(Channel.TASK, str(session_id), on_notify) if self.listener else None
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                woke.clear()
                task = await self.task_of_dispatch(session_id, dispatch_id)
                if task is not None and task.phase in (TaskPhase.SETTLED, TaskPhase.ABANDONED):
                    return ("task", task)
                session = await self.session_by_id(session_id)
                if session is None:
                    return ("failed", "the session no longer exists")
                failure = session.dispatch_failure or {}
                if failure.get("dispatch_id") == str(dispatch_id):
                    return ("failed", failure.get("message"))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return ("pending", None)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), timeout=min(remaining, 1.0 if self.listener else 0.05))
        finally:
            if unsubscribe:
                unsubscribe()

    # -- A2A: visibility, streams, cancel, push notifications (schema/35_a2a.sql) ---------------

    async def a2a_task(
        self, task_id: str, caller: str, share_hash: str | None, tenant: tuple[str, str] | None, need: str = "read"
    ) -> Task:
        """The task (of Agent `tenant`, when given) if the caller may see it with `need` access;
        SQ404 TASK_NOT_FOUND otherwise."""
        value = await self._value(
            "SELECT to_jsonb(sessionq.a2a_task(%s, %s, %s, %s, %s, %s))",
            (task_id, caller, share_hash, need, tenant[0] if tenant else None, tenant[1] if tenant else None),
        )
        return Task.from_json(value)

    async def a2a_list_tasks(
        self,
        caller: str,
        share_hash: str | None,
        namespace: str,
        agent: str,
        context: UUID | None,
        state: str | None,
        updated_after: datetime | None,
        before: tuple[datetime, str] | None,
        limit: int,
    ) -> tuple[list[dict[str, Any]], list[tuple[datetime, str]], int]:
        """(tasks, their (created_at, id) keys, the total that match) of one Agent, newest first."""
        rows = await self._rows(
            "SELECT * FROM sessionq.a2a_list_tasks(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (caller, share_hash, namespace, agent, context, state, updated_after,
             before[0] if before else None, before[1] if before else None, limit),
        )
        total = int(rows[0]["total"]) if rows else 0
        if not rows and before is not None:  # past the last page: the total of all that match
            first = await self._rows(
                "SELECT total FROM sessionq.a2a_list_tasks(%s, %s, %s, %s, %s, %s, %s, NULL, NULL, 1)",
                (caller, share_hash, namespace, agent, context, state, updated_after),
            )
            total = int(first[0]["total"]) if first else 0
        return [r["task"] for r in rows], [(r["created_at"], r["id"]) for r in rows], total

    async def a2a_task_snapshot(self, task_id: str) -> dict[str, Any] | None:
        """{task, state, phase, session_id, last_seq}: the published task and where its stream continues."""
        rows = await self._rows("SELECT * FROM sessionq.a2a_task_snapshot(%s)", (task_id,))
        return rows[0] if rows else None

    async def a2a_task_events(self, session_id: UUID, task_id: str, after: int) -> list[dict[str, Any]]:
        return await self._rows("SELECT * FROM sessionq.a2a_task_events(%s, %s, %s)", (session_id, task_id, after))

    async def admit_cancel(self, task_id: str, caller: str, share_hash: str | None) -> CancelAdmission:
        """Record a cancel intent: PENDING (the cancel_task job ends the task and tells the Actor) or FINISHED."""
        value = await self._value("SELECT sessionq.admit_cancel(%s, %s, %s)", (task_id, caller, share_hash))
        return CancelAdmission(value["outcome"])

    async def cancel_target(self, task_id: str) -> dict[str, Any] | None:
        return await self._value("SELECT sessionq.cancel_target(%s)", (task_id,))

    async def cancel_told(self, task_id: str) -> None:
        await self._rows("SELECT sessionq.cancel_told(%s)", (task_id,))

    async def finish_cancel(self, task_id: str) -> CancelOutcome | None:
        value = await self._value("SELECT sessionq.finish_cancel(%s)", (task_id,))
        return CancelOutcome(value) if value is not None else None

    async def create_push_config(
        self,
        task_id: str,
        caller: str,
        share_hash: str | None,
        config_id: str,
        url: str,
        token: str | None,
        scheme: str | None,
        credentials: str | None,
    ) -> dict[str, Any]:
        return await self._value(
            "SELECT sessionq.create_push_config(%s, %s, %s, %s, %s, %s, %s, %s)",
            (task_id, caller, share_hash, config_id, url, token, scheme, credentials),
        )

    async def list_push_configs(
        self, task_id: str, caller: str, share_hash: str | None, config_id: str | None = None
    ) -> list[dict[str, Any]]:
        rows = await self._rows(
            "SELECT c FROM sessionq.list_push_configs(%s, %s, %s, %s) AS c", (task_id, caller, share_hash, config_id)
        )
        return [r["c"] for r in rows]

    async def delete_push_config(self, task_id: str, caller: str, share_hash: str | None, config_id: str) -> bool:
        return bool(
            await self._value(
                "SELECT sessionq.delete_push_config(%s, %s, %s, %s)", (task_id, caller, share_hash, config_id)
            )
        )

    async def claim_push_stream(self, task_id: str, executor: UUID, lease: float) -> bool:
        return bool(await self._value("SELECT sessionq.claim_push_stream(%s, %s, %s)", (task_id, executor, lease)))

    async def release_push_stream(self, task_id: str, executor: UUID) -> None:
        await self._rows("SELECT sessionq.release_push_stream(%s, %s)", (task_id, executor))

    async def next_push_delivery(self, task_id: str) -> dict[str, Any] | None:
        return await self._value("SELECT sessionq.next_push_delivery(%s)", (task_id,))

    async def record_push_attempt(
        self, delivery: int, delivered: bool, status: int | None, error: str | None, give_up: bool
    ) -> None:
        await self._rows(
            "SELECT sessionq.record_push_attempt(%s, %s, %s, %s, %s)", (delivery, delivered, status, error, give_up)
        )

    async def push_deliveries(self, task_id: str) -> list[dict[str, Any]]:
        """The deliveries of a task in order, for operators and tests."""
        return await self._rows(
            "SELECT id, config_id, event_seq, payload, state, attempts, last_status, last_error, created_at,"
            " finished_at"
            " FROM sessionq.push_deliveries WHERE task_id = %s ORDER BY event_seq, id",
            (task_id,),
        )

    # -- quiescence -----------------------------------------------------------------------------

    async def claim_idle(self, executor: UUID) -> Session | None:
        value = await self._value("SELECT sessionq.claim_idle(%s)", (executor,))
        return Session.from_json(value) if value else None

    async def idle_work_blocked(self) -> bool:
        return bool(await self._value("SELECT sessionq.idle_work_blocked()"))

    async def finish_idle(
        self, session_id: UUID, boundary: UUID, executor: UUID, snapshot: dict[str, Any] | None
    ) -> Session:
        value = await self._value(
            "SELECT sessionq.finish_idle(%s, %s, %s, %s)", (session_id, boundary, executor, Jsonb(snapshot or {}))
        )
        return Session.from_json(value)

    async def record_quiescence_failure(
        self, session_id: UUID, boundary: UUID, executor: UUID, reason: QuiescenceFailureReason, message: str
    ) -> Session:
        """The idle claim holder's suspend failed for good: record why (the claim stays)."""
        value = await self._value(
            "SELECT sessionq.record_quiescence_failure(%s, %s, %s, %s, %s)",
            (session_id, boundary, executor, reason, message),
        )
        return Session.from_json(value)

    async def idle_attempt_failed(
        self,
        session_id: UUID,
        boundary: UUID,
        executor: UUID,
        reason: QuiescenceFailureReason,
        message: str,
        *,
        not_sent: bool,
        retry_after: float,
    ) -> Session:
        """The idle claim holder's attempt ended without an outcome: record why and make the claim
        uncertain (it stays; a quiescence worker takes it over after `retry_after` seconds)."""
        value = await self._value(
            "SELECT sessionq.idle_attempt_failed(%s, %s, %s, %s, %s, %s, %s)",
            (session_id, boundary, executor, reason, message, not_sent, retry_after),
        )
        return Session.from_json(value)

    async def take_over_uncertain_idle(self, executor: UUID, lease: float) -> Session | None:
        value = await self._value("SELECT sessionq.take_over_uncertain_idle(%s, %s)", (executor, lease))
        return Session.from_json(value) if value else None

    async def mark_lapsed_idle_claims(self, lease: float) -> int:
        return int(await self._value("SELECT sessionq.mark_lapsed_idle_claims(%s)", (lease,)))

    async def idle_work_state(self) -> tuple[bool, float | None]:
        """(unclaimed idle work is blocked, seconds until an uncertain claim is due or None)."""
        value = await self._value("SELECT to_jsonb(w) FROM sessionq.idle_work_state() w")
        retry_in = value["retry_in"]
        return bool(value["blocked"]), None if retry_in is None else float(retry_in)

    async def take_over_idle_claim(self, session_id: UUID, executor: UUID, lease: float) -> Session | None:
        value = await self._value(
            "SELECT sessionq.take_over_idle_claim(%s, %s, %s)", (session_id, executor, lease)
        )
        return Session.from_json(value) if value else None

    async def record_snapshot_completed(self, session_id: UUID, generation: int, uri: str) -> bool:
        return bool(
            await self._value("SELECT sessionq.record_snapshot_completed(%s, %s, %s)", (session_id, generation, uri))
        )

    # -- checkpoints and forks --------------------------------------------------------------------

    async def admit_checkpoint(self, session_id: UUID, caller: str, request_id: str, expected_head: str) -> Checkpoint:
        value = await self._value(
            "SELECT sessionq.admit_checkpoint(%s, %s, %s, %s)", (session_id, caller, request_id, expected_head)
        )
        return Checkpoint.from_json(value)

    async def claim_checkpoint(self, checkpoint_id: UUID, executor: UUID, lifetime: float) -> CheckpointClaim:
        row = await self._one(
            "SELECT * FROM sessionq.claim_checkpoint(%s, %s, %s)", (checkpoint_id, executor, lifetime)
        )
        c = row["checkpoint"]
        return CheckpointClaim(
            CheckpointClaimStatus(row["status"]),
            row["previous_executor"],
            row["expires_at"],
            Checkpoint.from_json(c) if c else None,
        )

    async def release_checkpoint(self, checkpoint_id: UUID, executor: UUID) -> None:
        await self._rows("SELECT sessionq.release_checkpoint(%s, %s)", (checkpoint_id, executor))

    async def finish_checkpoint(
        self, checkpoint_id: UUID, executor: UUID, failure: str | None, tag_snapshot_uri: str | None = None
    ) -> Checkpoint | None:
        """tag_snapshot_uri: the URI of the tag's own snapshot copy (None: the recorded snapshot_uri)."""
        value = await self._value(
            "SELECT sessionq.finish_checkpoint(%s, %s, %s, %s)", (checkpoint_id, executor, failure, tag_snapshot_uri)
        )
        return Checkpoint.from_json(value) if value else None

    async def get_checkpoint(self, checkpoint_id: UUID, caller: str) -> Checkpoint:
        return Checkpoint.from_json(
            await self._value("SELECT sessionq.get_checkpoint(%s, %s)", (checkpoint_id, caller))
        )

    async def checkpoint_by_id(self, checkpoint_id: UUID) -> Checkpoint | None:
        rows = await self._rows("SELECT to_jsonb(c) AS c FROM sessionq.checkpoints c WHERE id = %s", (checkpoint_id,))
        return Checkpoint.from_json(rows[0]["c"]) if rows else None

    async def list_checkpoints(self, session_id: UUID, caller: str, after: UUID | None, limit: int) -> list[Checkpoint]:
        rows = await self._rows(
            "SELECT c FROM sessionq.list_checkpoints(%s, %s, %s, %s) c", (session_id, caller, after, limit)
        )
        return [Checkpoint.from_json(r["c"]) for r in rows]

    async def rename_checkpoint(self, checkpoint_id: UUID, caller: str, name: str) -> Checkpoint:
        return Checkpoint.from_json(
            await self._value("SELECT sessionq.rename_checkpoint(%s, %s, %s)", (checkpoint_id, caller, name))
        )

    async def admit_checkpoint_delete(self, checkpoint_id: UUID, caller: str) -> Checkpoint:
        return Checkpoint.from_json(
            await self._value("SELECT sessionq.admit_checkpoint_delete(%s, %s)", (checkpoint_id, caller))
        )

    async def admit_fork(self, checkpoint_id: UUID, caller: str, request_id: str) -> Admission:
        return await self._admit("SELECT * FROM sessionq.admit_fork(%s, %s, %s)", (checkpoint_id, caller, request_id))

    async def wait_for_checkpoint(
        self, checkpoint_id: UUID, states: set[CheckpointState], timeout: float
    ) -> Checkpoint | None:
        """Wait until the checkpoint is in one of `states` or gone (None); returns the last read
        (still in another state on timeout). Woken by NOTIFY sessionq_checkpoint."""
        woke = asyncio.Event()
        key = str(checkpoint_id)

        def on_notify(payload: str | None) -> None:
            if payload is None or notify.key_of(Channel.CHECKPOINT, payload) == key:
                woke.set()

        unsubscribe = self.listener.subscribe(Channel.CHECKPOINT, on_notify) if self.listener else None
        deadline = time.monotonic() + timeout
        try:
            while True:
                woke.clear()
                c = await self.checkpoint_by_id(checkpoint_id)
                remaining = deadline - time.monotonic()
                if c is None or c.state in states or remaining <= 0:
                    return c
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), timeout=min(remaining, 1.0 if self.listener else 0.05))
        finally:
            if unsubscribe:
                unsubscribe()

    # -- idle expiry and revision GC ---------------------------------------------------------------

    async def idle_candidates(self, ttl: float, after: tuple[Any, UUID] | None, limit: int) -> list[tuple[UUID, Any]]:
        rows = await self._rows(
            "SELECT id, idle_since FROM sessionq.idle_candidates(%s, %s, %s, %s)",
            (ttl, after[0] if after else None, after[1] if after else None, limit),
        )
        return [(r["id"], r["idle_since"]) for r in rows]

    async def sandbox_expiry_candidates(
        self, after: tuple[Any, UUID] | None, limit: int
    ) -> list[tuple[UUID, Any]]:
        """One page of expired Sandboxes (id, expires_at) in expiry order after `after`."""
        rows = await self._rows(
            "SELECT id, expires_at FROM sessionq.sandbox_expiry_candidates(%s, %s, %s)",
            (after[0] if after else None, after[1] if after else None, limit),
        )
        return [(r["id"], r["expires_at"]) for r in rows]

    async def idle_deletions_to_resume(
        self, after: UUID | None, limit: int, kinds: Sequence[RowKind] = (RowKind.SESSION, RowKind.SANDBOX)
    ) -> list[UUID]:
        rows = await self._rows(
            "SELECT s AS id FROM sessionq.idle_deletions_to_resume(%s, %s, %s) s", (after, limit, list(kinds))
        )
        return [r["id"] for r in rows]

    async def expire_session(self, session_id: UUID, ttl: float) -> Expiry:
        row = await self._one("SELECT * FROM sessionq.expire_session(%s, %s)", (session_id, ttl))
        return Expiry(ExpiryOutcome(row["outcome"]), row["generation"], row["idle_seconds"])

    async def gc_discover(self) -> int:
        return int(await self._value("SELECT sessionq.gc_discover()"))

    async def gc_candidates(self, limit: int) -> list[Revision]:
        rows = await self._rows("SELECT r FROM sessionq.gc_claim(%s) r", (limit,))
        return [Revision.from_json(r["r"]) for r in rows]

    async def gc_finish(self, revision_id: UUID) -> bool:
        return bool(await self._value("SELECT sessionq.gc_finish(%s)", (revision_id,)))

    async def gauge_stats(self) -> dict[str, Any]:
        """The counts behind the overview gauges (sessionq.metrics.set_overview): jobs per (queue,
        status) without the succeeded history, paused queues, stalled jobs, workers per state,
        Sessions per state."""
        jobs = await self._rows("SELECT queue_name, status, jobs FROM sessionq.queue_depth")
        paused = await self._rows("SELECT queue_name FROM sessionq.paused_queues")
        stalled = await self._rows("SELECT count(*) AS n FROM sessionq.find_stalled_jobs()")
        workers = await self._rows("SELECT state, count(*) AS n FROM sessionq.workers GROUP BY state")
        sessions = await self._rows(
            "SELECT state, count(*) AS n FROM sessionq.sessions WHERE kind = 'session' GROUP BY state"  # not Sandboxes
        )
        return {
            "jobs": {(r["queue_name"], r["status"]): int(r["jobs"]) for r in jobs},
            "paused": [r["queue_name"] for r in paused],
            "stalled": int(stalled[0]["n"]) if stalled else 0,
            "workers": {r["state"]: int(r["n"]) for r in workers},
            "sessions": {r["state"]: int(r["n"]) for r in sessions},
        }

    async def queue_stats(self) -> list[tuple[str, int, float]]:
        """(queue, waiting jobs, age in seconds of the oldest runnable one) per queue."""
        rows = await self._rows(
            "SELECT queue_name, jobs, extract(epoch FROM coalesce(oldest_due_age, interval '0')) AS age"
            " FROM sessionq.queue_depth WHERE status = 'todo'"
        )
        return [(r["queue_name"], int(r["jobs"]), float(r["age"])) for r in rows]


@dataclass(frozen=True)
class Expiry:
    outcome: ExpiryOutcome
    generation: UUID | None
    idle_seconds: float | None


def payload_hash(task: dict[str, Any], event: dict[str, Any] | None, dispatch_id: UUID | None) -> str:
    """Identity of a task write: an identical retry has the same hash."""
    return hashlib.sha256(dumps([task, event, str(dispatch_id) if dispatch_id else None]).encode()).hexdigest()


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
