"""sessionq.v1.TurnService: a Session's turns, and checkpoints and forks at any retained turn.

Each method checks what the protos cannot express and calls one store procedure
(schema/40_checkpoints.sql): list_turns, admit_turn_checkpoint (the checkpoint takes the turn's
pin over and is READY at once: no job to wait for), admit_fork_at_turn (a checkpoint at the turn and
a fork of it, in one transaction), then waits for the fork's creation like ForkSession. Only the
Session's owner may use them; another user's Session answers NOT_FOUND, as GetSession does.

sessionq.v1.TagService lists the runtime's tags (one runtime page a call, through `RuntimeReader`)
with what each pins (sessionq.describe_tags): administrators see every tag, anyone else those of
their own checkpoints and of their own Sessions' turn pins.
"""

from __future__ import annotations

import grpc

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import common_pb2
from sessionq._pb.sessionq.v1 import turns_pb2, turns_pb2_grpc
from sessionq.api.auth import Authenticator
from sessionq.api.checkpoints import checkpoint_to_proto
from sessionq.api.fields import check_request_id, has_control, parse_uuid, ts
from sessionq.api.paging import decode_token, encode_token, page_limit
from sessionq.api.rpc import rpc
from sessionq.api.sessions import await_generation, session_to_proto
from sessionq.db.store import Store
from sessionq.domain.agents import check_namespace
from sessionq.models import TagOwner, Turn, TurnCheckpointability
from sessionq.runtime.base import Code, RuntimeReader, SubstrateError, Tag


def turn_to_proto(t: Turn) -> turns_pb2.Turn:
    return turns_pb2.Turn(
        task_id=t.task_id,
        sequence=t.seq,
        state=t.state,
        created_at=ts(t.created_at),
        updated_at=ts(t.updated_at),
        checkpointability=turns_pb2.TurnCheckpointability.Value(f"TURN_CHECKPOINTABILITY_{t.status}"),
        message=t.message,
        checkpoint_id=str(t.checkpoint_id) if t.checkpoint_id else "",
        checkpointable=t.status == TurnCheckpointability.RETAINED,
    )


def _request_id(value: str) -> str:
    if not 1 <= len(value) <= 128:
        raise errors.invalid("request_id must be 1 to 128 characters")
    return check_request_id(value)


def _task_id(value: str) -> str:
    if not 1 <= len(value) <= 128:
        raise errors.invalid("task_id must be 1 to 128 characters")
    if has_control(value):
        raise errors.invalid("task_id must not contain control characters")
    return value


class TurnService(turns_pb2_grpc.TurnServiceServicer):
    def __init__(self, store: Store, auth: Authenticator) -> None:
        self.store = store
        self.auth = auth

    @rpc
    async def ListTurns(
        self, request: turns_pb2.ListTurnsRequest, context: grpc.aio.ServicerContext
    ) -> turns_pb2.ListTurnsResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        limit = page_limit(request.page.limit)
        after: int | None = None
        if request.page.page_token:
            raw = decode_token(request.page.page_token, 1)[0]
            if not raw.isdigit():
                raise errors.invalid("page_token is not valid")
            after = int(raw)
        rows = await self.store.list_turns(sid, who.user, after, limit + 1)
        token = encode_token(str(rows[limit - 1].seq)) if len(rows) > limit else ""
        return turns_pb2.ListTurnsResponse(
            turns=[turn_to_proto(t) for t in rows[:limit]], page=common_pb2.PageResponse(next_page_token=token)
        )

    @rpc
    async def CreateTurnCheckpoint(
        self, request: turns_pb2.CreateTurnCheckpointRequest, context: grpc.aio.ServicerContext
    ) -> turns_pb2.CreateTurnCheckpointResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        c = await self.store.admit_turn_checkpoint(
            sid, who.user, _request_id(request.request_id), _task_id(request.task_id)
        )
        return turns_pb2.CreateTurnCheckpointResponse(checkpoint=checkpoint_to_proto(c))

    @rpc
    async def ForkAtTurn(
        self, request: turns_pb2.ForkAtTurnRequest, context: grpc.aio.ServicerContext
    ) -> turns_pb2.ForkAtTurnResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        admission = await self.store.admit_fork_at_turn(
            sid, who.user, _request_id(request.request_id), _task_id(request.task_id)
        )
        session = await await_generation(self.store, admission, context)
        return turns_pb2.ForkAtTurnResponse(
            session=session_to_proto(session),
            checkpoint_id=str(admission.session.source_checkpoint_id or ""),
        )


def tag_to_proto(t: Tag, owner: TagOwner) -> turns_pb2.Tag:
    return turns_pb2.Tag(
        atespace=t.atespace,
        name=t.name,
        actor=t.actor_name,
        snapshot_generation=t.snapshot_generation,
        created_at=ts(t.created_at),
        kind=turns_pb2.TagKind.Value(f"TAG_KIND_{owner.kind}"),
        session_id=str(owner.session_id or ""),
        checkpoint_id=str(owner.checkpoint_id or ""),
        task_id=owner.task_id or "",
        state=owner.state or "",
    )


class TagService(turns_pb2_grpc.TagServiceServicer):
    def __init__(self, store: Store, auth: Authenticator, admins: list[str], runtime: RuntimeReader | None) -> None:
        self.store = store
        self.auth = auth
        self.admins = set(admins)
        self.runtime = runtime

    @rpc
    async def ListTags(
        self, request: turns_pb2.ListTagsRequest, context: grpc.aio.ServicerContext
    ) -> turns_pb2.ListTagsResponse:
        who = self.auth.identify(context)
        scope = check_namespace(request.atespace, "atespace") if request.atespace else None
        limit = page_limit(request.page.limit)
        token = ""
        if request.page.page_token:
            listed, token = decode_token(request.page.page_token, 2)  # (atespace, the runtime's own token)
            if listed != (scope or ""):
                raise errors.invalid("page_token belongs to another listing")
        if self.runtime is None:
            raise errors.unavailable("the runtime cannot be listed from this API server; retry later")
        try:
            page = await self.runtime.list_tags(scope, limit, token)
        except SubstrateError as e:
            if e.code == Code.INVALID_ARGUMENT:
                raise errors.invalid("page_token is not valid") from None
            raise errors.unavailable(f"the runtime did not list its tags ({e.code.name}); retry") from None
        owners = await self.store.describe_tags(who.user, who.user in self.admins, [t.name for t in page.items])
        nxt = encode_token(scope or "", page.next_page_token) if page.next_page_token else ""
        return turns_pb2.ListTagsResponse(
            tags=[tag_to_proto(t, owners[t.name]) for t in page.items if t.name in owners],
            page=common_pb2.PageResponse(next_page_token=nxt),
        )
