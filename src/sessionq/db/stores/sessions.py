"""Sessions, Sandboxes and shares: admission, claims, completion, observation and the Session reads
(schema/20_sessions.sql, schema/25_sandboxes.sql)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from uuid import UUID

from psycopg.types.json import Jsonb

from sessionq import errors
from sessionq.db import notify
from sessionq.db.kept_reads import PointRead
from sessionq.db.notify import Channel
from sessionq.db.raw import Columns, GetValue, RawStatement, record_reader, text_array, text_param
from sessionq.db.stores.base import StoreBase
from sessionq.models import (
    Admission,
    Claim,
    ClaimStatus,
    DeletionReason,
    Observation,
    ObservationStatus,
    OperationKind,
    OperationStart,
    RowKind,
    Session,
    SessionView,
    Share,
    SharePermission,
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


class SessionStore(StoreBase):
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

    async def begin_operation(self, session_id: UUID, executor: UUID, lifetime: float) -> OperationStart:
        """An executor's first step (never client-facing): the Session and its pinned revision,
        claimed at once when preparation has nothing to inspect (see sessionq.begin_operation)."""
        row = await self._one(
            "SELECT * FROM sessionq.begin_operation(%s, %s, %s)", (session_id, executor, lifetime)
        )
        return OperationStart.from_row(row)

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
