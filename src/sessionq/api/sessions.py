"""kagent.api.v1alpha1.SessionService: admit lifecycle operations and read Sessions.

Servicers validate, call one store method, map, respond. Mutations admit their operation, then
wait (within the request deadline) for that generation to finish, woken by NOTIFY; past the
deadline they answer UNAVAILABLE and the client retries the same call (OP-16).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import datetime
from typing import Any

import grpc

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq.api.auth import Authenticator, hash_token
from sessionq.api.fields import check_request_id, parse_uuid, ts
from sessionq.api.paging import after_id, next_id_token, page_limit
from sessionq.api.rpc import rpc, wait_budget
from sessionq.db.store import Store
from sessionq.domain.volumes import capacity_bytes
from sessionq.metrics import OPERATIONS
from sessionq.models import (
    Admission,
    AdmissionOutcome,
    AttemptFailure,
    ObservationStatus,
    OperationKind,
    PreparationFailure,
    Session,
    SessionState,
    SessionView,
    Share,
    SharePermission,
)

BUSY_WAIT = 5.0  # how long a lifecycle call waits out a turn's cleanup or quiescence
MAX_SHARE_TTL = 100 * 365 * 86400  # seconds; longer: until revoked (an unset ttl, no shares.maxTtl)

PERMISSIONS = {
    sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY: SharePermission.READ_ONLY,
    sessions_pb2.SESSION_SHARE_PERMISSION_READ_WRITE: SharePermission.READ_WRITE,
}


_STATES = {state: runtime_pb2.RuntimeState.Value(f"RUNTIME_STATE_{state}") for state in SessionState}
_OPERATIONS = {op: runtime_pb2.RuntimeOperation.Value(f"RUNTIME_OPERATION_{op}") for op in OperationKind}


def session_to_proto(s: Session | SessionView, msg: sessions_pb2.Session | None = None) -> sessions_pb2.Session:
    """The Session message of a Session, or of what GetSession and ListSessions read of one (a
    SessionView: Session.view() of the same row; their equality is tested in
    tests/sessions/test_session_proto.py). Fills `msg` in place when given (the response's own field:
    no copy of the message)."""
    v = s.view() if isinstance(s, Session) else s
    if msg is None:
        msg = sessions_pb2.Session()
    sid = v.id
    msg.id = sid
    msg.creator = v.creator
    if v.revision_id:
        msg.prepared_revision = v.revision_id
    msg.a2a_authority = f"{v.agent_namespace}/{v.agent_name}"
    msg.state = _STATES[v.state]  # type: ignore[index]
    msg.operation = _OPERATIONS[v.operation]  # type: ignore[index]
    msg.name = v.name
    msg.context_id = sid
    agent = msg.agent
    agent.namespace = v.agent_namespace
    agent.name = v.agent_name
    seconds, micros = divmod(v.created_us, 1_000_000)
    msg.created_at.seconds, msg.created_at.nanos = seconds, micros * 1000
    seconds, micros = divmod(v.updated_us, 1_000_000)
    msg.updated_at.seconds, msg.updated_at.nanos = seconds, micros * 1000
    if v.failure_message:
        msg.failure.reason = v.failure_reason or ""
        msg.failure.message = v.failure_message
    if v.quiescence_failure:  # the quiescence failure record (30_tasks.sql, record_quiescence_failure)
        msg.last_quiescence_failure.CopyFrom(_quiescence_failure(v.quiescence_failure))
    # volume_source (17) stays unset: a Session is only ever seeded from a snapshot that a configured
    # volume admission accepted, and sessionq has none (CreateSession refuses every volume_source)
    return msg


def _quiescence_failure(f: dict[str, Any]) -> sessions_pb2.QuiescenceFailure:
    return sessions_pb2.QuiescenceFailure(
        task_id=f.get("task_id") or "",
        reason=f.get("reason") or "",
        message=f.get("message") or "",
        failed_at=ts(datetime.fromisoformat(f["failed_at"])) if f.get("failed_at") else None,
    )


def share_to_proto(sh: Share) -> sessions_pb2.SessionShare:
    return sessions_pb2.SessionShare(
        id=str(sh.id),
        session_id=str(sh.session_id),
        permission=sessions_pb2.SessionSharePermission.Value(f"SESSION_SHARE_PERMISSION_{sh.permission}"),
        created_at=ts(sh.created_at),
        expires_at=ts(sh.expires_at),
    )


async def await_generation(store: Store, admission: Admission, context: grpc.aio.ServicerContext) -> Session:
    """Wait for the admitted or joined generation and translate what happened to it (of a Session,
    or of a Sandbox: the messages name which)."""
    s = admission.session
    kind = s.operation.lower()
    noun = s.kind.value
    if admission.outcome in (AdmissionOutcome.EXISTING, AdmissionOutcome.NOOP) or admission.generation is None:
        return s
    if admission.outcome == AdmissionOutcome.ADMITTED:
        OPERATIONS.labels(kind=s.operation, outcome=AdmissionOutcome.ADMITTED).inc()
    obs = await store.wait_for_generation(s.id, admission.generation, wait_budget(context), admission=admission)
    if obs.status == ObservationStatus.DONE:
        assert obs.session is not None
        return obs.session
    if obs.status == ObservationStatus.PENDING:
        last = ""
        if obs.session is not None and obs.session.failure_message and obs.session.failure_reason in set(AttemptFailure):
            last = f"; its last attempt failed ({obs.session.failure_reason}: {obs.session.failure_message}) and is retried"
        raise errors.unavailable(
            f"the {kind} operation of {noun} {s.id} is still in progress{last}; retry the same call to follow it"
        )
    if obs.status == ObservationStatus.FAILED:
        assert obs.session is not None
        message = (
            f"the {kind} operation of {noun} {s.id} failed before it changed anything: {obs.session.failure_message}"
        )
        if obs.session.failure_reason == PreparationFailure.RUNTIME_UNAVAILABLE:
            raise errors.unavailable(message + "; retry the same call")
        raise errors.precondition(message)
    if (
        obs.status == ObservationStatus.GONE
        or obs.session is None
        or (s.operation == OperationKind.CREATE and obs.session.state in (SessionState.DELETING, SessionState.DELETED))
    ):
        raise errors.not_found(f"{noun} {s.id} not found (it was deleted)")
    raise errors.conflict(
        f"the {kind} operation of {noun} {s.id} was superseded by a newer "
        f"{obs.session.operation.lower() if obs.session.operation != OperationKind.NONE else 'operation'}"
    )


def share_ttl(request: sessions_pb2.CreateSessionShareRequest, max_ttl: float) -> float | None:
    """A share's lifetime in seconds (None: until revoked). An unset ttl takes the configured
    maximum (shares.maxTtl; 0: none); a ttl above it is refused. ttl > 0 is the field's rule."""
    if not request.HasField("ttl"):
        return max_ttl or None
    ttl = request.ttl.seconds + request.ttl.nanos / 1e9
    if max_ttl and ttl > max_ttl:
        raise errors.invalid(f"ttl must be at most {max_ttl:g}s (shares.maxTtl); leave it unset for the maximum")
    if ttl > MAX_SHARE_TTL:  # a date PostgreSQL cannot hold: sessionq's own bound
        raise errors.invalid(f"ttl must be at most {MAX_SHARE_TTL // 86400} days; leave it unset for no expiry")
    return ttl


class SessionService(sessions_pb2_grpc.SessionServiceServicer):
    def __init__(
        self, store: Store, auth: Authenticator, admins: list[str] | None = None, max_share_ttl: float = 0.0
    ) -> None:
        self.store = store
        self.auth = auth
        self.admins = set(admins or ())
        self.max_share_ttl = max_share_ttl

    @rpc
    async def CreateSession(
        self, request: sessions_pb2.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.CreateSessionResponse:
        # request_id, name, agent, volume_source and admission_token are checked by their
        # buf.validate rules (api/validation.py)
        who = self.auth.identify(context)
        check_request_id(request.request_id)
        if request.HasField("volume_source"):
            # a capacity its pattern lets through but that is no whole number of bytes is the
            # client's mistake (INVALID_ARGUMENT) whatever the server's configuration
            capacity_bytes(request.volume_source.capacity)
            # kagent refuses every volume source when no volume admission is configured; sessionq
            # has none (the admission_token, which only an admission reads, is never stored)
            raise errors.precondition(
                "volume_source needs a configured volume admission, and this server has none: "
                "a session cannot be seeded from a snapshot here"
            )
        namespace, name = request.agent.namespace, request.agent.name
        admission = await self.store.admit_create(who.user, request.request_id, namespace, name, request.name)
        session = await await_generation(self.store, admission, context)
        return sessions_pb2.CreateSessionResponse(session=session_to_proto(session))

    @rpc
    async def GetSession(
        self, request: sessions_pb2.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.GetSessionResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        view = await self.store.get_session_view(sid, who.user, who.share_hash)
        response = sessions_pb2.GetSessionResponse()
        session_to_proto(view, response.session)
        return response

    @rpc
    async def ListSessions(
        self, request: sessions_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.ListSessionsResponse:
        who = self.auth.identify(context)
        limit = page_limit(request.page.limit)
        if request.all_creators and who.user not in self.admins:
            raise errors.permission_denied("listing every creator's sessions needs an administrator")
        after = after_id(request.page)
        namespace = agent = None
        if request.HasField("agent"):  # a set agent is a whole ResourceReference (its rules)
            namespace, agent = request.agent.namespace, request.agent.name
        rows = await self.store.list_session_views(
            who.user, request.all_creators, namespace, agent, after, limit + 1
        )
        response = sessions_pb2.ListSessionsResponse()
        page = response.sessions
        for view in rows[:limit]:
            session_to_proto(view, page.add())
        response.page.SetInParent()  # present even when empty, as kagent answers
        response.page.next_page_token = next_id_token(rows, limit)
        return response

    @rpc
    async def UpdateSessionName(
        self, request: sessions_pb2.UpdateSessionNameRequest, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.UpdateSessionNameResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        session = await self.store.rename_session(sid, who.user, who.share_hash, request.name)
        return sessions_pb2.UpdateSessionNameResponse(session=session_to_proto(session))

    async def _lifecycle(
        self, session_id: str, kind: OperationKind, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.Session:
        who = self.auth.identify(context)
        sid = parse_uuid(session_id, "session_id")
        # a turn's cleanup or its quiescence is brief: wait for it (within the deadline) rather than fail
        deadline = time.monotonic() + min(BUSY_WAIT, wait_budget(context))
        while True:
            try:
                admission = await self.store.admit_operation(sid, who.user, who.share_hash, kind)
                break
            except errors.SessionqError as e:
                if e.reason != "KAGENT_SESSION_BUSY" or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.05)
        return session_to_proto(await await_generation(self.store, admission, context))

    @rpc
    async def SuspendSession(
        self, request: sessions_pb2.SuspendSessionRequest, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.SuspendSessionResponse:
        return sessions_pb2.SuspendSessionResponse(session=await self._lifecycle(request.session_id, OperationKind.SUSPEND, context))

    @rpc
    async def ResumeSession(
        self, request: sessions_pb2.ResumeSessionRequest, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.ResumeSessionResponse:
        return sessions_pb2.ResumeSessionResponse(session=await self._lifecycle(request.session_id, OperationKind.RESUME, context))

    @rpc
    async def DeleteSession(
        self, request: sessions_pb2.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.DeleteSessionResponse:
        return sessions_pb2.DeleteSessionResponse(session=await self._lifecycle(request.session_id, OperationKind.DELETE, context))

    @rpc
    async def CreateSessionShare(
        self, request: sessions_pb2.CreateSessionShareRequest, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.CreateSessionShareResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        permission = PERMISSIONS[request.permission]  # READ_ONLY or READ_WRITE: its rules
        ttl = share_ttl(request, self.max_share_ttl)
        token = "sqs_" + secrets.token_urlsafe(32)
        share = await self.store.create_share(sid, who.user, permission, ttl, hash_token(token))
        return sessions_pb2.CreateSessionShareResponse(share=share_to_proto(share), token=token)

    @rpc
    async def ListSessionShares(
        self, request: sessions_pb2.ListSessionSharesRequest, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.ListSessionSharesResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        limit = page_limit(request.page.limit)
        after = after_id(request.page)
        rows = await self.store.list_shares(sid, who.user, after, limit + 1)
        token = next_id_token(rows, limit)
        return sessions_pb2.ListSessionSharesResponse(
            shares=[share_to_proto(s) for s in rows[:limit]], page=common_pb2.PageResponse(next_page_token=token)
        )

    @rpc
    async def RevokeSessionShare(
        self, request: sessions_pb2.RevokeSessionShareRequest, context: grpc.aio.ServicerContext
    ) -> sessions_pb2.RevokeSessionShareResponse:
        who = self.auth.identify(context)
        await self.store.revoke_share(parse_uuid(request.share_id, "share_id"), who.user)
        return sessions_pb2.RevokeSessionShareResponse()
