"""kagent.api.v1alpha1.CheckpointService: checkpoints of Sessions and forks from them.

The frontend only admits: CreateCheckpoint records a CREATING checkpoint (sessionq.admit_checkpoint)
and waits - woken by NOTIFY - for the create_checkpoint job to tag the snapshot; DeleteCheckpoint
waits for the tag's removal; ForkSession admits a creation from the checkpoint and waits for it
like CreateSession. Past the deadline: UNAVAILABLE, and the client retries the same request.
"""

from __future__ import annotations

import grpc

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import checkpoints_pb2, checkpoints_pb2_grpc, common_pb2, sessions_pb2
from sessionq.api.auth import Authenticator
from sessionq.api.fields import check_request_id, parse_uuid, ts
from sessionq.api.paging import after_id, next_id_token, page_limit
from sessionq.api.rpc import rpc, wait_budget
from sessionq.api.sessions import await_generation, session_to_proto
from sessionq.db.store import Store
from sessionq.models import Checkpoint, CheckpointState


def checkpoint_to_proto(c: Checkpoint) -> checkpoints_pb2.Checkpoint:
    msg = checkpoints_pb2.Checkpoint(
        id=str(c.id),
        session_id=str(c.session_id),
        head_task_id=c.head_task_id,
        history_sequence=c.history_sequence,
        state=checkpoints_pb2.CheckpointState.Value(f"CHECKPOINT_STATE_{c.state}"),
        created_at=ts(c.created_at),
        name=c.name,
    )
    if c.failure_message:
        msg.failure.CopyFrom(sessions_pb2.Failure(reason="CheckpointFailed", message=c.failure_message))
    return msg


class CheckpointService(checkpoints_pb2_grpc.CheckpointServiceServicer):
    def __init__(self, store: Store, auth: Authenticator) -> None:
        self.store = store
        self.auth = auth

    @rpc
    async def CreateCheckpoint(
        self, request: checkpoints_pb2.CreateCheckpointRequest, context: grpc.aio.ServicerContext
    ) -> checkpoints_pb2.CreateCheckpointResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        check_request_id(request.request_id)  # expected_head_task_id set: its rule
        c = await self.store.admit_checkpoint(sid, who.user, request.request_id, request.expected_head_task_id)
        if c.state == CheckpointState.CREATING:
            settled = {CheckpointState.READY, CheckpointState.FAILED, CheckpointState.DELETING}
            c = await self.store.wait_for_checkpoint(c.id, settled, wait_budget(context)) or c
            if c.state == CheckpointState.CREATING:
                raise errors.unavailable(f"checkpoint {c.id} is still being created; retry the same request")
        return checkpoints_pb2.CreateCheckpointResponse(checkpoint=checkpoint_to_proto(c))

    @rpc
    async def GetCheckpoint(
        self, request: checkpoints_pb2.GetCheckpointRequest, context: grpc.aio.ServicerContext
    ) -> checkpoints_pb2.GetCheckpointResponse:
        who = self.auth.identify(context)
        c = await self.store.get_checkpoint(parse_uuid(request.checkpoint_id, "checkpoint_id"), who.user)
        return checkpoints_pb2.GetCheckpointResponse(checkpoint=checkpoint_to_proto(c))

    @rpc
    async def ListCheckpoints(
        self, request: checkpoints_pb2.ListCheckpointsRequest, context: grpc.aio.ServicerContext
    ) -> checkpoints_pb2.ListCheckpointsResponse:
        who = self.auth.identify(context)
        sid = parse_uuid(request.session_id, "session_id")
        limit = page_limit(request.page.limit)
        after = after_id(request.page)
        rows = await self.store.list_checkpoints(sid, who.user, after, limit + 1)
        token = next_id_token(rows, limit)
        return checkpoints_pb2.ListCheckpointsResponse(
            checkpoints=[checkpoint_to_proto(c) for c in rows[:limit]],
            page=common_pb2.PageResponse(next_page_token=token),
        )

    @rpc
    async def DeleteCheckpoint(
        self, request: checkpoints_pb2.DeleteCheckpointRequest, context: grpc.aio.ServicerContext
    ) -> checkpoints_pb2.DeleteCheckpointResponse:
        who = self.auth.identify(context)
        cid = parse_uuid(request.checkpoint_id, "checkpoint_id")
        await self.store.admit_checkpoint_delete(cid, who.user)
        left = await self.store.wait_for_checkpoint(cid, set(), wait_budget(context))
        if left is not None:
            raise errors.unavailable(f"checkpoint {cid} is still being deleted; retry the same request")
        return checkpoints_pb2.DeleteCheckpointResponse()

    @rpc
    async def ForkSession(
        self, request: checkpoints_pb2.ForkSessionRequest, context: grpc.aio.ServicerContext
    ) -> checkpoints_pb2.ForkSessionResponse:
        who = self.auth.identify(context)
        cid = parse_uuid(request.checkpoint_id, "checkpoint_id")
        check_request_id(request.request_id)
        admission = await self.store.admit_fork(cid, who.user, request.request_id)
        session = await await_generation(self.store, admission, context)
        return checkpoints_pb2.ForkSessionResponse(session=session_to_proto(session))

    @rpc
    async def UpdateCheckpointName(
        self, request: checkpoints_pb2.UpdateCheckpointNameRequest, context: grpc.aio.ServicerContext
    ) -> checkpoints_pb2.UpdateCheckpointNameResponse:
        who = self.auth.identify(context)
        cid = parse_uuid(request.checkpoint_id, "checkpoint_id")
        c = await self.store.rename_checkpoint(cid, who.user, request.name)
        return checkpoints_pb2.UpdateCheckpointNameResponse(checkpoint=checkpoint_to_proto(c))
