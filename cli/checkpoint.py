"""`sessionq checkpoint ...` and `sessionq session fork`: checkpoints of Sessions and forks from them."""

from __future__ import annotations

import time
import uuid
from typing import Any

import click
import grpc
from google.rpc import error_details_pb2, status_pb2
from sessionq.cli.client import boxed_table, echo_list, fmt_time, get_client, output_option, print_json, strip_prefix
from sessionq.cli.session import _show_session, session

from sessionq._pb.kagent.api.v1alpha1 import checkpoints_pb2, checkpoints_pb2_grpc, common_pb2
from sessionq._pb.sessionq.v1 import turns_pb2, turns_pb2_grpc

PAGE = 100
SNAPSHOT_PENDING = "KAGENT_CHECKPOINT_SNAPSHOT_PENDING"


def _stub(ctx: click.Context) -> checkpoints_pb2_grpc.CheckpointServiceStub:
    return get_client(ctx).stub(checkpoints_pb2_grpc.CheckpointServiceStub)


def reason_of(error: grpc.RpcError) -> str | None:
    """The ErrorInfo reason of a failed call, if it carries one."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return str(info.reason)
    return None


def checkpoints_table(checkpoints: list[checkpoints_pb2.Checkpoint]) -> str:
    return boxed_table(
        ["ID", "SESSION", "HEAD TASK", "SEQ", "STATE", "NAME", "CREATED"],
        [
            [
                c.id,
                c.session_id,
                c.head_task_id,
                c.history_sequence,
                strip_prefix(checkpoints_pb2.CheckpointState.Name(c.state), "CHECKPOINT_STATE_"),
                c.name,
                fmt_time(c.created_at),
            ]
            for c in checkpoints
        ],
    )


def _show(response: Any, output: str) -> None:
    if output == "json":
        print_json(response)
    else:
        click.echo(checkpoints_table([response.checkpoint]))


@click.group()
def checkpoint() -> None:
    """Pin a Session's turn with a checkpoint; list, inspect, rename and delete checkpoints."""


@checkpoint.command()
@click.option("--session", "session_id", required=True, help="The Session to checkpoint.")
@click.option(
    "--head",
    "head_task_id",
    required=True,
    help="The finished turn (task ID) to pin; the call fails if the conversation moved past it.",
)
@click.option("--request-id", default=None, help="Idempotency key (1-128 characters; default: a fresh UUID).")
@output_option
@click.pass_context
def create(ctx: click.Context, session_id: str, head_task_id: str, request_id: str | None, output: str) -> None:
    """Create a checkpoint. While the snapshot of that turn is still being written the same request
    is sent again (as the API asks), until --timeout."""
    client = get_client(ctx)
    request = checkpoints_pb2.CreateCheckpointRequest(
        session_id=session_id, expected_head_task_id=head_task_id, request_id=request_id or str(uuid.uuid4())
    )
    deadline = time.monotonic() + client.timeout
    while True:
        try:
            response = _stub(ctx).CreateCheckpoint(
                request, metadata=client.metadata, timeout=max(deadline - time.monotonic(), 1.0)
            )
            break
        except grpc.RpcError as e:
            retry = reason_of(e) == SNAPSHOT_PENDING or e.code() == grpc.StatusCode.UNAVAILABLE
            if not retry or time.monotonic() > deadline:
                raise client.error(e) from None
            time.sleep(0.2)
    _show(response, output)


@checkpoint.command("list")
@click.option("--session", "session_id", required=True, help="The Session whose checkpoints to list.")
@output_option
@click.pass_context
def list_(ctx: click.Context, session_id: str, output: str) -> None:
    """List a Session's checkpoints (every page)."""
    client = get_client(ctx)
    request = checkpoints_pb2.ListCheckpointsRequest(session_id=session_id, page=common_pb2.PageRequest(limit=PAGE))
    result = client.call_all_pages(_stub(ctx).ListCheckpoints, request, checkpoints_pb2.ListCheckpointsResponse(),
                                   "checkpoints")
    echo_list(result, "checkpoints", output, checkpoints_table)


@checkpoint.command()
@click.argument("checkpoint_id")
@output_option
@click.pass_context
def get(ctx: click.Context, checkpoint_id: str, output: str) -> None:
    """Show one checkpoint."""
    _show(
        get_client(ctx).call(
            _stub(ctx).GetCheckpoint, checkpoints_pb2.GetCheckpointRequest(checkpoint_id=checkpoint_id)
        ),
        output,
    )


@checkpoint.command()
@click.argument("checkpoint_id")
@click.argument("name")
@output_option
@click.pass_context
def rename(ctx: click.Context, checkpoint_id: str, name: str, output: str) -> None:
    """Rename a checkpoint ("" restores the default name)."""
    request = checkpoints_pb2.UpdateCheckpointNameRequest(checkpoint_id=checkpoint_id, name=name)
    _show(get_client(ctx).call(_stub(ctx).UpdateCheckpointName, request), output)


@checkpoint.command()
@click.argument("checkpoint_id")
@output_option
@click.pass_context
def delete(ctx: click.Context, checkpoint_id: str, output: str) -> None:
    """Delete a checkpoint: its tag goes and the snapshot may be collected. Refused while a live
    fork pins it."""
    client = get_client(ctx)
    response = client.call_retrying(
        _stub(ctx).DeleteCheckpoint, checkpoints_pb2.DeleteCheckpointRequest(checkpoint_id=checkpoint_id)
    )
    if output == "json":
        print_json(response)
    else:
        click.echo(f"checkpoint {checkpoint_id} deleted")


@session.command()
@click.argument("source_id", metavar="ID")
@click.option("--at", "task_id", default=None,
              help="Fork Session ID at this turn (a task ID from `session turns`) instead of from checkpoint ID.")
@click.option("--request-id", default=None, help="Idempotency key (1-128 characters; default: a fresh UUID).")
@output_option
@click.pass_context
def fork(ctx: click.Context, source_id: str, task_id: str | None, request_id: str | None, output: str) -> None:
    """Start a new Session from checkpoint ID: it continues the pinned conversation on its own. With
    --at, ID is a Session and the fork is made at that retained turn: it replays the conversation up
    to and including the turn, and its agent remembers exactly what it knew then."""
    client = get_client(ctx)
    rid = request_id or str(uuid.uuid4())
    if task_id is not None:
        at = turns_pb2.ForkAtTurnRequest(session_id=source_id, task_id=task_id, request_id=rid)
        response = client.call_retrying(client.stub(turns_pb2_grpc.TurnServiceStub).ForkAtTurn, at)
    else:
        request = checkpoints_pb2.ForkSessionRequest(checkpoint_id=source_id, request_id=rid)
        response = client.call_retrying(_stub(ctx).ForkSession, request)
    _show_session(response, output)
