"""sessionq.v1.FleetService: labels, a Session's own idle TTL, search and count, bulk actions
(docs/fleet.md, schema/22_fleet.sql).

Who sees what: search and count cover the Sessions the caller may read (GetSession's rule: its own,
and the one a share token it presents grants); bulk actions the caller's own (a share grants no
lifecycle operation); `all_creators` (every creator's) is for administrators (`auth.admins`). Labels are read by whoever
may read the Session and changed by its owner or a READ_WRITE share. An own idle TTL is bounded by
the operator: at most `sessions.maxIdleTtl` (0s: no maximum), 0s (never) only with
`sessions.allowNoIdleTtl`.
"""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2
from sessionq._pb.sessionq.v1 import fleet_pb2, fleet_pb2_grpc
from sessionq.api.auth import Authenticator, Identity
from sessionq.api.fields import check_display_name, check_request_id, parse_uuid, ts
from sessionq.api.paging import after_id, encode_token, next_id_token, page_limit
from sessionq.api.rpc import rpc
from sessionq.api.sessions import await_generation, session_to_proto
from sessionq.db.store import Store
from sessionq.domain.labels import key_valid, parse_selector, value_valid
from sessionq.models import (
    ActorState,
    BulkAction,
    BulkActionKind,
    BulkActionState,
    FleetSessionView,
    Session,
    SessionState,
)

# sessionq.check_labels' bounds (the authority), checked here first for a message without a round
# trip; tests/fleet/test_label_rules.py checks that both answer alike
MAX_LABELS = 32
MAX_LABEL_BYTES = 4096
MAX_IDLE_TTL = 100 * 365 * 86400  # seconds: sessionq's own bound (a date PostgreSQL can hold)

_ACTOR_TO_PROTO = {s: fleet_pb2.ActorState.Value(f"ACTOR_STATE_{s.name}") for s in ActorState}
_ACTOR_FROM_PROTO = {v: k for k, v in _ACTOR_TO_PROTO.items()}
_STATE_FROM_PROTO = {runtime_pb2.RuntimeState.Value(f"RUNTIME_STATE_{s}"): s for s in SessionState}
_KIND_FROM_PROTO = {fleet_pb2.BulkActionKind.Value(f"BULK_ACTION_KIND_{k}"): k for k in BulkActionKind}
_KIND_TO_PROTO = {v: k for k, v in _KIND_FROM_PROTO.items()}
_BULK_STATE_TO_PROTO = {s: fleet_pb2.BulkActionState.Value(f"BULK_ACTION_STATE_{s}") for s in BulkActionState}


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """Kubernetes' key and value rules, a bounded count and size: the API's copy of
    sessionq.check_labels, the authority, which checks them again where they are stored."""
    if len(labels) > MAX_LABELS:
        raise errors.invalid(f"a session has at most {MAX_LABELS} labels (got {len(labels)})")
    for key, value in labels.items():
        if not key_valid(key):
            raise errors.invalid(f"label key {errors.clip(key, 80)!r} is not valid: [prefix/]name, name at most"
                                 " 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends")
        if not value_valid(value):
            raise errors.invalid(f"label {errors.clip(key, 80)!r}: the value must be empty or at most 63"
                                 " characters of [A-Za-z0-9-_.], alphanumeric at both ends")
    if len(json.dumps(labels, separators=(", ", ": "))) > MAX_LABEL_BYTES:
        raise errors.invalid(f"the labels of a session take at most {MAX_LABEL_BYTES} bytes")
    return labels


def _code_name(sqlstate: str) -> str:
    """The gRPC status name of one of sessionq's SQLSTATEs (the admission's answer)."""
    code = errors.GRPC_CODES.get(sqlstate)
    return code.name if code is not None else sqlstate


def seconds(d: Duration) -> float:
    return d.seconds + d.nanos / 1e9


def idle_ttl_of(d: Duration | None, max_ttl: float, allow_never: bool) -> float | None:
    """An own idle TTL in seconds within the operator's bounds (None: the default)."""
    if d is None:
        return None
    ttl = seconds(d)
    if ttl < 0:
        raise errors.invalid("idle_ttl must not be negative")
    if ttl == 0 and not allow_never:
        raise errors.invalid("idle_ttl 0s (never expire) is not allowed here (sessions.allowNoIdleTtl)")
    if max_ttl and ttl > max_ttl:
        raise errors.invalid(f"idle_ttl must be at most {max_ttl:g}s (sessions.maxIdleTtl)")
    if ttl > MAX_IDLE_TTL:
        raise errors.invalid(f"idle_ttl must be at most {MAX_IDLE_TTL // 86400} days")
    return ttl


def fleet_session(s: Session, actor_state: str | None) -> fleet_pb2.FleetSession:
    msg = fleet_pb2.FleetSession(session=session_to_proto(s), labels=s.labels or {})
    if s.idle_ttl is not None:
        msg.idle_ttl.FromNanoseconds(round(s.idle_ttl * 1e9))
    if actor_state:
        msg.actor_state = _ACTOR_TO_PROTO[ActorState(actor_state)]
    clock = max(s.created_at, s.last_event_at) if s.last_event_at else s.created_at
    msg.last_activity_at.CopyFrom(ts(clock))
    return msg


def fleet_session_view(f: FleetSessionView) -> fleet_pb2.FleetSession:
    """fleet_session of what SearchSessions reads of a Session (the same message for the same row:
    tests/fleet/test_search_api.py)."""
    msg = fleet_pb2.FleetSession(labels=f.labels or {})
    session_to_proto(f.view, msg.session)
    if f.idle_ttl is not None:
        msg.idle_ttl.FromNanoseconds(round(f.idle_ttl * 1e9))
    if f.actor_state:
        msg.actor_state = _ACTOR_TO_PROTO[ActorState(f.actor_state)]
    seconds, micros = divmod(f.active_us, 1_000_000)
    msg.last_activity_at.seconds, msg.last_activity_at.nanos = seconds, micros * 1000
    return msg


def bulk_to_proto(b: BulkAction, filter_msg: fleet_pb2.SessionFilter | None = None) -> fleet_pb2.BulkAction:
    msg = fleet_pb2.BulkAction(
        id=str(b.id), kind=_KIND_TO_PROTO[b.kind], state=_BULK_STATE_TO_PROTO[b.state], matched=b.matched,
        processed=b.processed, admitted=b.admitted, unchanged=b.unchanged, refused=b.refused,
        created_at=ts(b.created_at), finished_at=ts(b.finished_at),
    )
    if filter_msg is not None:
        msg.filter.CopyFrom(filter_msg)
    return msg


class FleetService(fleet_pb2_grpc.FleetServiceServicer):
    def __init__(
        self, store: Store, auth: Authenticator, admins: list[str] | None = None, max_idle_ttl: float = 0.0,
        allow_no_idle_ttl: bool = False,
    ) -> None:
        self.store = store
        self.auth = auth
        self.admins = set(admins or ())
        self.max_idle_ttl = max_idle_ttl
        self.allow_no_idle_ttl = allow_no_idle_ttl

    def _ttl(self, msg: Any, field: str = "idle_ttl") -> float | None:
        return idle_ttl_of(getattr(msg, field) if msg.HasField(field) else None, self.max_idle_ttl,
                           self.allow_no_idle_ttl)

    def filter_of(self, who: Identity, f: fleet_pb2.SessionFilter) -> tuple[bool, dict[str, Any]]:
        """(all creators, the filter as session_filter_sql takes it); PERMISSION_DENIED for another
        creator's Sessions without being an administrator asking for every creator's."""
        admin_all = f.all_creators
        if admin_all and who.user not in self.admins:
            raise errors.permission_denied("every creator's sessions need an administrator")
        out: dict[str, Any] = {}
        if f.creator:
            if f.creator != who.user and not admin_all:
                raise errors.permission_denied("another creator's sessions need an administrator and all_creators")
            out["creator"] = f.creator
        if f.HasField("agent"):
            out["namespace"], out["agent"] = f.agent.namespace, f.agent.name
        if f.states:
            try:
                out["states"] = [str(_STATE_FROM_PROTO[s]) for s in f.states]
            except KeyError:
                raise errors.invalid("filter.states: a state must be set") from None
        if f.actor_states:
            try:
                out["actor_states"] = [str(_ACTOR_FROM_PROTO[s]) for s in f.actor_states]
            except KeyError:
                raise errors.invalid("filter.actor_states: a state must be set") from None
        for name in ("created_after", "created_before", "active_after", "active_before"):
            if f.HasField(name):
                out[name] = getattr(f, name).ToDatetime(tzinfo=UTC).isoformat()
        requirements = parse_selector(f.selector)
        if requirements:
            out["selector"] = [r.to_json() for r in requirements]
        return admin_all, out

    @rpc
    async def CreateSession(
        self, request: fleet_pb2.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> fleet_pb2.CreateSessionResponse:
        who = self.auth.identify(context)
        inner = request.session  # kagent's request: its buf.validate rules were checked
        if not request.HasField("session") or not inner.request_id or not inner.HasField("agent"):
            raise errors.invalid("session.request_id and session.agent are required")
        check_request_id(inner.request_id, "session.request_id")
        check_display_name(inner.name, "session.name")
        if inner.HasField("volume_source"):
            raise errors.precondition("volume_source needs a configured volume admission, and this server has none")
        labels = check_labels(dict(request.labels))
        ttl = self._ttl(request)
        admission = await self.store.admit_create_labeled(
            who.user, inner.request_id, inner.agent.namespace, inner.agent.name, inner.name, labels, ttl
        )
        session = await await_generation(self.store, admission, context)
        s, actor = await self.store.fleet_session(session.id, who.user, who.share_hash)
        return fleet_pb2.CreateSessionResponse(session=fleet_session(s, actor))

    @rpc
    async def GetSession(
        self, request: fleet_pb2.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> fleet_pb2.GetSessionResponse:
        who = self.auth.identify(context)
        s, actor = await self.store.fleet_session(parse_uuid(request.session_id, "session_id"), who.user, who.share_hash)
        return fleet_pb2.GetSessionResponse(session=fleet_session(s, actor))

    @rpc
    async def UpdateSessionLabels(
        self, request: fleet_pb2.UpdateSessionLabelsRequest, context: grpc.aio.ServicerContext
    ) -> fleet_pb2.UpdateSessionLabelsResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        labels = check_labels(dict(request.set))
        remove = list(request.remove)
        if len(remove) > MAX_LABELS * 4 or any(not key_valid(k) for k in remove):
            raise errors.invalid("remove: label keys, at most 128")
        await self.store.set_session_labels(sid, who.user, who.share_hash, labels, remove, request.replace)
        s, actor = await self.store.fleet_session(sid, who.user, who.share_hash)
        return fleet_pb2.UpdateSessionLabelsResponse(session=fleet_session(s, actor))

    @rpc
    async def SetSessionIdleTtl(
        self, request: fleet_pb2.SetSessionIdleTtlRequest, context: grpc.aio.ServicerContext
    ) -> fleet_pb2.SetSessionIdleTtlResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        ttl = self._ttl(request)
        await self.store.set_session_idle_ttl(sid, who.user, who.share_hash, ttl)
        s, actor = await self.store.fleet_session(sid, who.user, who.share_hash)
        return fleet_pb2.SetSessionIdleTtlResponse(session=fleet_session(s, actor))

    @rpc
    async def SearchSessions(
        self, request: fleet_pb2.SearchSessionsRequest, context: grpc.aio.ServicerContext
    ) -> fleet_pb2.SearchSessionsResponse:
        who = self.auth.identify(context)
        limit = page_limit(request.page.limit)
        all_creators, filter_ = self.filter_of(who, request.filter)
        rows = await self.store.search_session_views(who.user, who.share_hash, all_creators, filter_,
                                                     after_id(request.page), limit + 1)
        response = fleet_pb2.SearchSessionsResponse(sessions=[fleet_session_view(f) for f in rows[:limit]])
        response.page.SetInParent()
        response.page.next_page_token = next_id_token([f.view for f in rows], limit)
        return response

    @rpc
    async def CountSessions(
        self, request: fleet_pb2.CountSessionsRequest, context: grpc.aio.ServicerContext
    ) -> fleet_pb2.CountSessionsResponse:
        who = self.auth.identify(context)
        all_creators, filter_ = self.filter_of(who, request.filter)
        return fleet_pb2.CountSessionsResponse(count=await self.store.count_sessions(
            who.user, who.share_hash, all_creators, filter_))

    @rpc
    async def StartBulkAction(
        self, request: fleet_pb2.StartBulkActionRequest, context: grpc.aio.ServicerContext
    ) -> fleet_pb2.StartBulkActionResponse:
        who = self.auth.identify(context)
        if request.kind not in _KIND_FROM_PROTO:
            raise errors.invalid("kind must be SUSPEND, RESUME, DELETE or SET_IDLE_TTL")
        kind = _KIND_FROM_PROTO[request.kind]
        if request.HasField("idle_ttl") and kind != BulkActionKind.SET_IDLE_TTL:
            raise errors.invalid("idle_ttl is for SET_IDLE_TTL only")
        ttl = self._ttl(request) if kind == BulkActionKind.SET_IDLE_TTL else None
        all_creators, filter_ = self.filter_of(who, request.filter)
        if request.dry_run:
            # what the action would act on: the caller's own Sessions (a share grants no lifecycle
            # operation), or everyone's
            count = await self.store.count_sessions(who.user, None, all_creators, filter_)
            rows = await self.store.search_sessions(who.user, None, all_creators, filter_, None, 50)
            return fleet_pb2.StartBulkActionResponse(count=count, first_page=[fleet_session(s, a) for s, a in rows])
        if not request.request_id:
            raise errors.invalid("request_id is required (1 to 128 characters)")
        check_request_id(request.request_id)
        action = await self.store.start_bulk_action(who.user, request.request_id, all_creators, kind, filter_, ttl)
        return fleet_pb2.StartBulkActionResponse(action=bulk_to_proto(action, request.filter), count=action.matched)

    @rpc
    async def GetBulkAction(
        self, request: fleet_pb2.GetBulkActionRequest, context: grpc.aio.ServicerContext
    ) -> fleet_pb2.GetBulkActionResponse:
        who = self.auth.identify(context)
        action = await self.store.get_bulk_action(parse_uuid(request.id, "id"), who.user)
        return fleet_pb2.GetBulkActionResponse(action=bulk_to_proto(action))

    @rpc
    async def ListBulkActionItems(
        self, request: fleet_pb2.ListBulkActionItemsRequest, context: grpc.aio.ServicerContext
    ) -> fleet_pb2.ListBulkActionItemsResponse:
        who = self.auth.identify(context)
        limit = page_limit(request.page.limit)
        after = after_id(request.page)
        rows = await self.store.list_bulk_action_items(parse_uuid(request.id, "id"), who.user, after, limit + 1)
        items = [
            fleet_pb2.BulkActionItem(session_id=str(i.session_id), code=_code_name(i.code), message=i.message)
            for i in rows[:limit]
        ]
        token = encode_token(str(rows[limit - 1].session_id)) if len(rows) > limit else ""
        return fleet_pb2.ListBulkActionItemsResponse(items=items, page=common_pb2.PageResponse(next_page_token=token))

    @rpc
    async def GetSessionUsage(
        self, request: fleet_pb2.GetSessionUsageRequest, context: grpc.aio.ServicerContext
    ) -> fleet_pb2.GetSessionUsageResponse:
        who = self.auth.identify(context)
        u = await self.store.get_session_usage(parse_uuid(request.session_id, "session_id"), who.user, who.share_hash)
        return fleet_pb2.GetSessionUsageResponse(usage=fleet_pb2.SessionUsage(
            turns=u["turns"], running_seconds=u["running_seconds"], running=u["running"], snapshots=u["snapshots"],
            checkpoints_held=u["checkpoints_held"], resumes=u["resumes"], resume_seconds_total=u["resume_seconds"],
            resume_seconds_max=u["resume_seconds_max"], snapshot_bytes=u["snapshot_bytes"],
            snapshots_sized=u["snapshots_sized"],
        ))
