"""sessionq.v1.TurnService: a Session's turns, and checkpoints and forks at any retained turn.

Each method checks what the protos cannot express and calls one store procedure
(schema/40_checkpoints.sql): list_turns, admit_turn_checkpoint (the checkpoint takes the turn's
pin over and is READY at once: no job to wait for), admit_fork_at_turn (a checkpoint at the turn and
a fork of it, in one transaction), then waits for the fork's creation like ForkSession. Only the
Session's owner may use them; another user's Session answers NOT_FOUND, as GetSession does.
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
from sessionq.models import Turn, TurnCheckpointability


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
