"""`sessionq session ...` (also `sessionq agent session ...`): Sessions and their shares."""

from __future__ import annotations

import uuid
from typing import Any

import click
from google.protobuf.duration_pb2 import Duration
from sessionq.cli import fleet
from sessionq.cli.client import (
    DURATION,
    CliError,
    boxed_table,
    echo_list,
    echo_one,
    fmt_time,
    get_client,
    output_option,
    print_json,
    printable,
    strip_prefix,
)
from sessionq.cli.fleet import TTL, build_filter, create_labeled, filter_options, has_filter, search

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2, sessions_pb2_grpc
from sessionq._pb.sessionq.v1 import turns_pb2, turns_pb2_grpc

PAGE = 100
PERMISSIONS = {
    "read-only": sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY,
    "read-write": sessions_pb2.SESSION_SHARE_PERMISSION_READ_WRITE,
}


def _stub(ctx: click.Context) -> sessions_pb2_grpc.SessionServiceStub:
    return get_client(ctx).stub(sessions_pb2_grpc.SessionServiceStub)


def state_name(s: sessions_pb2.Session) -> str:
    return strip_prefix(runtime_pb2.RuntimeState.Name(s.state), "RUNTIME_STATE_")


def operation_name(s: sessions_pb2.Session) -> str:
    return strip_prefix(runtime_pb2.RuntimeOperation.Name(s.operation), "RUNTIME_OPERATION_")


def sessions_table(sessions: list[sessions_pb2.Session]) -> str:
    """ID AGENT STATE CREATED, boxed, as `kagent agent session list` prints them."""
    return boxed_table(
        ["ID", "AGENT", "STATE", "CREATED"],
        [[s.id, s.agent.name, state_name(s), fmt_time(s.created_at)] for s in sessions],
    )


def session_detail(s: sessions_pb2.Session) -> str:
    rows = [
        ("ID", s.id),
        ("NAME", s.name),
        ("AGENT", f"{s.agent.namespace}/{s.agent.name}" if s.agent.name else ""),
        ("STATE", state_name(s)),
        ("OPERATION", operation_name(s)),
        ("CREATOR", s.creator),
        ("REVISION", s.prepared_revision),
        ("CREATED", fmt_time(s.created_at)),
        ("UPDATED", fmt_time(s.updated_at)),
    ]
    if s.HasField("failure"):
        failure = f"{s.failure.reason}: {s.failure.message}" if s.failure.reason else s.failure.message
        rows.append(("FAILURE", failure))
    return boxed_table(["FIELD", "VALUE"], rows)


def shares_table(shares: list[sessions_pb2.SessionShare]) -> str:
    return boxed_table(
        ["ID", "SESSION", "PERMISSION", "CREATED", "EXPIRES"],
        [[sh.id, sh.session_id,
          strip_prefix(sessions_pb2.SessionSharePermission.Name(sh.permission), "SESSION_SHARE_PERMISSION_"),
          fmt_time(sh.created_at), fmt_time(sh.expires_at)] for sh in shares],
    )


def _show_session(response: Any, output: str, detail: bool = False) -> None:
    """A response holding one `session`: as JSON, a one-row table, or (detail) every field."""
    echo_one(response, "session", output, sessions_table, session_detail if detail else None)


@click.group()
def session() -> None:
    """Create, inspect, suspend, resume, delete and share Sessions."""


@session.command()
@click.option("--agent", "agent_name", required=True, help="The Agent to talk to.")
@click.option("--namespace", default="kagent", show_default=True, help="The Agent's namespace.")
@click.option("--name", default="", help="A display name for the Session.")
@click.option("--request-id", default=None,
              help="Idempotency key (1-128 characters; default: a fresh UUID). "
                   "Repeating it returns the same Session.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="A label (repeatable). Labels are not secrets: every reader of the Session sees them.")
@click.option("--ttl", type=TTL, default=None,
              help="The Session's own idle TTL, e.g. 3d (0s: never, where the server allows it).")
@output_option
@click.pass_context
def create(ctx: click.Context, agent_name: str, namespace: str, name: str, request_id: str | None,
           labels: tuple[str, ...], ttl: float | None, output: str) -> None:
    """Create a Session with an Agent (retried with the same request id while the server is busy)."""
    request = sessions_pb2.CreateSessionRequest(
        request_id=request_id or str(uuid.uuid4()),
        name=name,
        agent=common_pb2.ResourceReference(namespace=namespace, name=agent_name),
    )
    if labels or ttl is not None:  # sessionq's FleetService: kagent's request has no labels
        create_labeled(ctx, request, labels, ttl, output)
        return
    _show_session(get_client(ctx).call_creating(_stub(ctx).CreateSession, request), output)


@session.command()
@click.argument("session_id")
@output_option
@click.pass_context
def get(ctx: click.Context, session_id: str, output: str) -> None:
    """Show one Session."""
    request = sessions_pb2.GetSessionRequest(session_id=session_id)
    response = get_client(ctx).call(_stub(ctx).GetSession, request)
    _show_session(response, output, detail=True)


@session.command("list")
@click.option("--agent", "agent_name", default="", help="Only this Agent's Sessions.")
@click.option("--namespace", default="", help="The Agent's namespace (default kagent when --agent is given).")
@click.option("--all-creators", is_flag=True, help="Every creator's Sessions (administrators only).")
@filter_options
@output_option
@click.pass_context
def list_(ctx: click.Context, agent_name: str, namespace: str, all_creators: bool, output: str,
          **filters: Any) -> None:
    """List your Sessions (every page), or those a filter matches (--selector and the others)."""
    if has_filter(**filters):
        search(ctx, build_filter(agent_name, namespace, all_creators, **filters), output)
        return
    client = get_client(ctx)
    stub = _stub(ctx)
    request = sessions_pb2.ListSessionsRequest(all_creators=all_creators,
                                              page=common_pb2.PageRequest(limit=PAGE))
    if namespace and not agent_name:
        raise CliError("--namespace filters by an Agent: give --agent too")
    if agent_name:  # an Agent reference names both (kagent's rule)
        request.agent.CopyFrom(common_pb2.ResourceReference(namespace=namespace or "kagent", name=agent_name))
    result = client.call_all_pages(stub.ListSessions, request, sessions_pb2.ListSessionsResponse(), "sessions")
    echo_list(result, "sessions", output, sessions_table, "No sessions found.")


@session.command()
@click.argument("session_id")
@click.argument("name")
@output_option
@click.pass_context
def rename(ctx: click.Context, session_id: str, name: str, output: str) -> None:
    """Set a Session's display name ("" clears it)."""
    request = sessions_pb2.UpdateSessionNameRequest(session_id=session_id, name=name)
    response = get_client(ctx).call(_stub(ctx).UpdateSessionName, request)
    _show_session(response, output, detail=True)


@session.command()
@click.argument("session_id")
@output_option
@click.pass_context
def suspend(ctx: click.Context, session_id: str, output: str) -> None:
    """Suspend a Session's runtime."""
    request = sessions_pb2.SuspendSessionRequest(session_id=session_id)
    _show_session(get_client(ctx).call_retrying(_stub(ctx).SuspendSession, request), output)


@session.command()
@click.argument("session_id")
@output_option
@click.pass_context
def resume(ctx: click.Context, session_id: str, output: str) -> None:
    """Resume a suspended Session's runtime."""
    request = sessions_pb2.ResumeSessionRequest(session_id=session_id)
    _show_session(get_client(ctx).call_retrying(_stub(ctx).ResumeSession, request), output)


@session.command()
@click.argument("session_id")
@output_option
@click.pass_context
def delete(ctx: click.Context, session_id: str, output: str) -> None:
    """Delete a Session and its runtime."""
    request = sessions_pb2.DeleteSessionRequest(session_id=session_id)
    _show_session(get_client(ctx).call_retrying(_stub(ctx).DeleteSession, request), output)


# -- time travel: turns and forks at a turn (sessionq.v1.TurnService) -------------------------------

def _turns_stub(ctx: click.Context) -> turns_pb2_grpc.TurnServiceStub:
    return get_client(ctx).stub(turns_pb2_grpc.TurnServiceStub)


def turns_table(turns: list[turns_pb2.Turn]) -> str:
    """# TASK STATE CREATED CHECKPOINTABLE (or why not)."""
    def why(t: turns_pb2.Turn) -> str:
        name = strip_prefix(turns_pb2.TurnCheckpointability.Name(t.checkpointability), "TURN_CHECKPOINTABILITY_")
        if t.checkpointable:
            return "yes"
        return f"no: {name}" + (f" (checkpoint {t.checkpoint_id})" if t.checkpoint_id else "")
    return boxed_table(
        ["#", "TASK", "STATE", "CREATED", "CHECKPOINTABLE"],
        [[t.sequence, t.task_id, strip_prefix(t.state, "TASK_STATE_"), fmt_time(t.created_at), why(t)]
         for t in turns],
    )


@session.command()
@click.argument("session_id")
@output_option
@click.pass_context
def turns(ctx: click.Context, session_id: str, output: str) -> None:
    """List a Session's turns, each with whether it can be checkpointed or forked now (its snapshot
    is retained: the last sessions.turnSnapshots settled turns), or why not."""
    request = turns_pb2.ListTurnsRequest(session_id=session_id, page=common_pb2.PageRequest(limit=PAGE))
    result = get_client(ctx).call_all_pages(_turns_stub(ctx).ListTurns, request, turns_pb2.ListTurnsResponse(),
                                            "turns")
    echo_list(result, "turns", output, turns_table, "No turns yet.")


# -- shares -----------------------------------------------------------------------------------------

@session.group()
def share() -> None:
    """Share tokens that grant access to a Session."""


@share.command("create")
@click.argument("session_id")
@click.option("--permission", type=click.Choice(sorted(PERMISSIONS), case_sensitive=False), required=True,
              help="read-only: get, list, subscribe; read-write: also send and cancel.")
@click.option("--ttl", type=DURATION, default="1h", show_default=True, help="Lifetime, e.g. 30m, 1h, 7d.")
@output_option
@click.pass_context
def share_create(ctx: click.Context, session_id: str, permission: str, ttl: float, output: str) -> None:
    """Create a share token for a Session (the token is shown only once)."""
    duration = Duration()
    duration.FromNanoseconds(int(ttl * 1e9))
    request = sessions_pb2.CreateSessionShareRequest(
        session_id=session_id, permission=PERMISSIONS[permission.lower()], ttl=duration,
    )
    response = get_client(ctx).call(_stub(ctx).CreateSessionShare, request)
    if output == "json":
        print_json(response)
        return
    click.echo(shares_table([response.share]))
    click.echo(f"token: {printable(response.token)}")
    click.echo("(the token is shown only this once; send it as the x-kagent-share-token header)")


@share.command("list")
@click.argument("session_id")
@output_option
@click.pass_context
def share_list(ctx: click.Context, session_id: str, output: str) -> None:
    """List a Session's shares (every page)."""
    client = get_client(ctx)
    stub = _stub(ctx)
    request = sessions_pb2.ListSessionSharesRequest(session_id=session_id,
                                                   page=common_pb2.PageRequest(limit=PAGE))
    result = client.call_all_pages(stub.ListSessionShares, request, sessions_pb2.ListSessionSharesResponse(), "shares")
    echo_list(result, "shares", output, shares_table, "No shares found.")


@share.command("revoke")
@click.argument("share_id")
@output_option
@click.pass_context
def share_revoke(ctx: click.Context, share_id: str, output: str) -> None:
    """Revoke a share."""
    response = get_client(ctx).call(_stub(ctx).RevokeSessionShare,
                                    sessions_pb2.RevokeSessionShareRequest(share_id=share_id))
    if output == "json":
        print_json(response)
    else:
        click.echo(f"share {share_id} revoked")


# -- the fleet (cli/fleet.py): labels, idle TTL, count, bulk actions, usage ------------------------

for _command in (fleet.count, fleet.label, fleet.ttl, fleet.usage, fleet.bulk):
    session.add_command(_command)
