"""`sessionq session ...` for a fleet (sessionq.v1.FleetService, docs/fleet.md): labels, a Session's
own idle TTL, search and count by selector, bulk actions, usage.

`session create` and `session list` (cli/session.py) come here when given a fleet option (`--label`,
`--ttl`; `--selector` and the other filters); the other commands are added to the `session` group.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from google.protobuf.timestamp_pb2 import Timestamp
from sessionq.cli.client import (
    CliError,
    boxed_table,
    echo_list,
    fmt_time,
    get_client,
    output_option,
    parse_duration,
    print_json,
    printable,
    strip_prefix,
)

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sessions_pb2
from sessionq._pb.sessionq.v1 import fleet_pb2, fleet_pb2_grpc

PAGE = 100
STATES = ["CREATING", "READY", "SUSPENDED", "DELETING"]
ACTOR_STATES = ["running", "paused", "suspended"]
BULK_KINDS = {
    "suspend": fleet_pb2.BULK_ACTION_KIND_SUSPEND,
    "resume": fleet_pb2.BULK_ACTION_KIND_RESUME,
    "delete": fleet_pb2.BULK_ACTION_KIND_DELETE,
}


def _stub(ctx: click.Context) -> fleet_pb2_grpc.FleetServiceStub:
    return get_client(ctx).stub(fleet_pb2_grpc.FleetServiceStub)


class TtlType(click.ParamType):
    """An idle TTL: a duration (90s, 30m, 7d), 0s for never, or `default` (the server's)."""

    name = "ttl"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float | None:
        if value is None or isinstance(value, float):
            return value
        if str(value).strip().lower() == "default":
            return None
        try:
            return parse_duration(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


TTL = TtlType()


def labels_of(pairs: tuple[str, ...] | list[str]) -> tuple[dict[str, str], list[str]]:
    """KEY=VALUE sets, KEY- removes (kubectl's spelling); the server checks the label rules."""
    sets: dict[str, str] = {}
    removes: list[str] = []
    for pair in pairs:
        if "=" in pair:
            key, _, value = pair.partition("=")
            sets[key] = value
        elif pair.endswith("-") and len(pair) > 1:
            removes.append(pair[:-1])
        else:
            raise CliError(f"label {printable(pair)!r}: expected KEY=VALUE (or KEY- to remove it)")
    return sets, removes


def _duration(seconds: float, msg: Any) -> None:
    msg.FromNanoseconds(round(seconds * 1e9))


def _ts(when: datetime) -> Timestamp:
    t = Timestamp()
    t.FromDatetime(when.astimezone(UTC))
    return t


def fleet_table(sessions: list[fleet_pb2.FleetSession]) -> str:
    """ID AGENT STATE ACTOR LABELS LAST ACTIVITY."""
    return boxed_table(
        ["ID", "AGENT", "STATE", "ACTOR", "LABELS", "LAST ACTIVITY"],
        [[f.session.id, f.session.agent.name,
          strip_prefix(runtime_pb2.RuntimeState.Name(f.session.state), "RUNTIME_STATE_"),
          strip_prefix(fleet_pb2.ActorState.Name(f.actor_state), "ACTOR_STATE_").lower().replace("unspecified", "-"),
          printable(",".join(f"{k}={v}" for k, v in sorted(f.labels.items()))), fmt_time(f.last_activity_at)]
         for f in sessions],
    )


def fleet_detail(f: fleet_pb2.FleetSession) -> str:
    s = f.session
    ttl = "default" if not f.HasField("idle_ttl") else ("never" if f.idle_ttl.ToNanoseconds() == 0
                                                        else f"{f.idle_ttl.ToNanoseconds() / 1e9:g}s")
    rows = [
        ("ID", s.id), ("NAME", s.name), ("AGENT", f"{s.agent.namespace}/{s.agent.name}"),
        ("STATE", strip_prefix(runtime_pb2.RuntimeState.Name(s.state), "RUNTIME_STATE_")),
        ("ACTOR", strip_prefix(fleet_pb2.ActorState.Name(f.actor_state), "ACTOR_STATE_").lower()),
        ("CREATOR", s.creator), ("CREATED", fmt_time(s.created_at)), ("LAST ACTIVITY", fmt_time(f.last_activity_at)),
        ("IDLE TTL", ttl),
        *[(f"LABEL {printable(k)}", printable(v)) for k, v in sorted(f.labels.items())],
    ]
    return boxed_table(["FIELD", "VALUE"], rows)


def show(response: Any, output: str) -> None:
    if output == "json":
        print_json(response)
    else:
        click.echo(fleet_detail(response.session))


def create_labeled(ctx: click.Context, request: sessions_pb2.CreateSessionRequest, labels: tuple[str, ...],
                   ttl: float | None, output: str) -> None:
    """`session create` with --label or --ttl: FleetService.CreateSession (labels and TTL are written
    with the admission)."""
    sets, removes = labels_of(labels)
    if removes:
        raise CliError("--label takes KEY=VALUE")
    fleet = fleet_pb2.CreateSessionRequest(session=request, labels=sets)
    if ttl is not None:
        _duration(ttl, fleet.idle_ttl)
    try:
        response = get_client(ctx).call_retrying(_stub(ctx).CreateSession, fleet)
    except CliError as e:
        if "retry the same call" in e.message or "UNAVAILABLE" in e.message:
            raise CliError(f"{e.message}; to follow it, run the same command with --request-id "
                           f"{request.request_id}") from None
        raise
    show(response, output)


def filter_options(f: Any) -> Any:
    """The fleet filter's options (shared by list, count and bulk)."""
    options = [
        click.option("--selector", "-l", default="", help="Label selector: 'team=billing,tier in (a,b),!legacy'."),
        click.option("--state", "states", multiple=True, type=click.Choice(STATES, case_sensitive=False),
                     help="Only Sessions in this state (repeatable)."),
        click.option("--actor-state", "actor_states", multiple=True,
                     type=click.Choice(ACTOR_STATES, case_sensitive=False),
                     help="Only Sessions whose Actor is running, paused or suspended (repeatable)."),
        click.option("--creator", default="", help="Only this creator's Sessions (another's: --all-creators)."),
        click.option("--idle-for", type=TTL, default=None,
                     help="Only Sessions idle at least this long (no turn since), e.g. 3d."),
        click.option("--active-within", type=TTL, default=None, help="Only Sessions active within this long."),
        click.option("--created-within", type=TTL, default=None, help="Only Sessions created within this long."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def build_filter(agent_name: str, namespace: str, all_creators: bool, selector: str, states: tuple[str, ...],
                 actor_states: tuple[str, ...], creator: str, idle_for: float | None, active_within: float | None,
                 created_within: float | None) -> fleet_pb2.SessionFilter:
    f = fleet_pb2.SessionFilter(selector=selector, creator=creator, all_creators=all_creators)
    if namespace and not agent_name:
        raise CliError("--namespace filters by an Agent: give --agent too")
    if agent_name:
        f.agent.CopyFrom(common_pb2.ResourceReference(namespace=namespace or "kagent", name=agent_name))
    f.states.extend(runtime_pb2.RuntimeState.Value(f"RUNTIME_STATE_{s.upper()}") for s in states)
    f.actor_states.extend(fleet_pb2.ActorState.Value(f"ACTOR_STATE_{s.upper()}") for s in actor_states)
    now = datetime.now(UTC)
    if idle_for:
        f.active_before.CopyFrom(_ts(now - timedelta(seconds=idle_for)))
    if active_within:
        f.active_after.CopyFrom(_ts(now - timedelta(seconds=active_within)))
    if created_within:
        f.created_after.CopyFrom(_ts(now - timedelta(seconds=created_within)))
    return f


def has_filter(selector: str, states: tuple[str, ...], actor_states: tuple[str, ...], creator: str,
               idle_for: float | None, active_within: float | None, created_within: float | None) -> bool:
    """Whether any of the fleet's own filter options is given."""
    return bool(selector or states or actor_states or creator
                or any(d is not None for d in (idle_for, active_within, created_within)))


def search(ctx: click.Context, flt: fleet_pb2.SessionFilter, output: str) -> None:
    """`session list` with a fleet filter: every page of SearchSessions."""
    client = get_client(ctx)
    request = fleet_pb2.SearchSessionsRequest(filter=flt, page=common_pb2.PageRequest(limit=PAGE))
    result = client.call_all_pages(_stub(ctx).SearchSessions, request, fleet_pb2.SearchSessionsResponse(),
                                   "sessions")
    echo_list(result, "sessions", output, fleet_table, "No sessions found.")


@click.command()
@click.option("--agent", "agent_name", default="", help="Only this Agent's Sessions.")
@click.option("--namespace", default="", help="The Agent's namespace (default kagent when --agent is given).")
@click.option("--all-creators", is_flag=True, help="Every creator's Sessions (administrators only).")
@filter_options
@output_option
@click.pass_context
def count(ctx: click.Context, agent_name: str, namespace: str, all_creators: bool, output: str,
          **filters: Any) -> None:
    """Count the Sessions a filter matches."""
    flt = build_filter(agent_name, namespace, all_creators, **filters)
    response = get_client(ctx).call(_stub(ctx).CountSessions, fleet_pb2.CountSessionsRequest(filter=flt))
    if output == "json":
        print_json(response)
    else:
        click.echo(response.count)


@click.command()
@click.argument("session_id")
@click.argument("labels", nargs=-1, required=True)
@click.option("--overwrite-all", is_flag=True, help="The labels become exactly those given.")
@output_option
@click.pass_context
def label(ctx: click.Context, session_id: str, labels: tuple[str, ...], overwrite_all: bool, output: str) -> None:
    """Set labels (KEY=VALUE) and remove them (KEY-) on a Session. Labels are not secrets: every
    reader of the Session sees them."""
    sets, removes = labels_of(labels)
    request = fleet_pb2.UpdateSessionLabelsRequest(session_id=session_id, set=sets, remove=removes,
                                                   replace=overwrite_all)
    show(get_client(ctx).call(_stub(ctx).UpdateSessionLabels, request), output)


@click.command()
@click.argument("session_id")
@click.argument("ttl", type=TTL)
@output_option
@click.pass_context
def ttl(ctx: click.Context, session_id: str, ttl: float | None, output: str) -> None:
    """Set a Session's own idle TTL: a duration like 3d, 0s for never (where the server allows it),
    or `default` for the server's sessions.idleTtl."""
    request = fleet_pb2.SetSessionIdleTtlRequest(session_id=session_id)
    if ttl is not None:
        _duration(ttl, request.idle_ttl)
    show(get_client(ctx).call(_stub(ctx).SetSessionIdleTtl, request), output)


@click.command()
@click.argument("session_id")
@output_option
@click.pass_context
def usage(ctx: click.Context, session_id: str, output: str) -> None:
    """What a Session used: turns, Actor running time, snapshots and their bytes, checkpoints, resumes."""
    response = get_client(ctx).call(_stub(ctx).GetSessionUsage, fleet_pb2.GetSessionUsageRequest(session_id=session_id))
    if output == "json":
        print_json(response)
        return
    u = response.usage
    mean = u.resume_seconds_total / u.resumes if u.resumes else 0.0
    click.echo(boxed_table(["FIGURE", "VALUE"], [
        ("TURNS", u.turns), ("ACTOR RUNNING", f"{u.running_seconds:.1f}s" + (" (running now)" if u.running else "")),
        ("SNAPSHOTS", u.snapshots), ("SNAPSHOT BYTES", snapshot_bytes(u)),
        ("CHECKPOINTS HELD", u.checkpoints_held), ("RESUMES", u.resumes),
        ("RESUME LATENCY", f"mean {mean * 1000:.0f} ms, max {u.resume_seconds_max * 1000:.0f} ms"),
    ]))


def snapshot_bytes(u: fleet_pb2.SessionUsage) -> str:
    """The snapshots' bytes, saying how many snapshots they cover when not all sizes are known."""
    if not u.snapshots_sized:
        return "unknown (the runtime reports no sizes)" if u.snapshots else "0"
    if u.snapshots_sized == u.snapshots:
        return str(u.snapshot_bytes)
    return f"{u.snapshot_bytes} (size known of {u.snapshots_sized} of {u.snapshots} snapshots)"


def bulk_table(actions: list[fleet_pb2.BulkAction]) -> str:
    return boxed_table(
        ["ID", "KIND", "STATE", "MATCHED", "PROCESSED", "ADMITTED", "UNCHANGED", "REFUSED", "CREATED"],
        [[a.id, strip_prefix(fleet_pb2.BulkActionKind.Name(a.kind), "BULK_ACTION_KIND_"),
          strip_prefix(fleet_pb2.BulkActionState.Name(a.state), "BULK_ACTION_STATE_"), a.matched, a.processed,
          a.admitted, a.unchanged, a.refused, fmt_time(a.created_at)] for a in actions],
    )


@click.group()
def bulk() -> None:
    """Act on every Session a filter matches: one ordinary operation each, through its own
    admission (a busy Session is reported, never forced)."""


def _bulk(ctx: click.Context, kind: int, idle_ttl: float | None, agent_name: str, namespace: str,
          all_creators: bool, dry_run: bool, wait: bool, request_id: str | None, output: str,
          filters: dict[str, Any]) -> None:
    if not (agent_name or has_filter(**filters)):
        raise CliError("a bulk action needs a filter (--selector, --agent, --state, ...): it acts on every match")
    flt = build_filter(agent_name, namespace, all_creators, **filters)
    request = fleet_pb2.StartBulkActionRequest(request_id=request_id or str(uuid.uuid4()), kind=kind, filter=flt,
                                               dry_run=dry_run)
    if idle_ttl is not None:
        _duration(idle_ttl, request.idle_ttl)
    client = get_client(ctx)
    response = client.call(_stub(ctx).StartBulkAction, request)
    if dry_run:
        if output == "json":
            print_json(response)
        else:
            click.echo(f"{response.count} session(s) match (dry run: nothing done); the first ones:")
            if response.first_page:
                click.echo(fleet_table(list(response.first_page)))
        return
    action = response.action
    while wait and action.state != fleet_pb2.BULK_ACTION_STATE_DONE:
        time.sleep(0.5)
        action = client.call(_stub(ctx).GetBulkAction, fleet_pb2.GetBulkActionRequest(id=action.id)).action
    if output == "json":
        print_json(fleet_pb2.GetBulkActionResponse(action=action))
    else:
        click.echo(bulk_table([action]))
        if action.state != fleet_pb2.BULK_ACTION_STATE_DONE:
            click.echo(f"follow it with: sessionq session bulk status {action.id}")


def bulk_options(f: Any) -> Any:
    for option in reversed([
        click.option("--agent", "agent_name", default="", help="Only this Agent's Sessions."),
        click.option("--namespace", default="", help="The Agent's namespace (default kagent)."),
        click.option("--all-creators", is_flag=True, help="Every creator's Sessions (administrators only)."),
        click.option("--dry-run", is_flag=True, help="Show the count and the first page; do nothing."),
        click.option("--wait/--no-wait", default=True, show_default=True,
                     help="Wait until every matching Session was acted on (admitted or reported)."),
        click.option("--request-id", default=None, help="Idempotency key (default: a fresh UUID)."),
    ]):
        f = option(f)
    return filter_options(output_option(f))


for _name, _kind in BULK_KINDS.items():
    def _make(kind: int, name: str) -> Any:
        @bulk.command(name, help=f"{name.capitalize()} every Session the filter matches.")
        @bulk_options
        @click.pass_context
        def command(ctx: click.Context, agent_name: str, namespace: str, all_creators: bool, dry_run: bool,
                    wait: bool, request_id: str | None, output: str, **filters: Any) -> None:
            _bulk(ctx, kind, None, agent_name, namespace, all_creators, dry_run, wait, request_id, output, filters)

        return command

    _make(_kind, _name)


@bulk.command("ttl")
@click.argument("idle_ttl", type=TTL)
@bulk_options
@click.pass_context
def bulk_ttl(ctx: click.Context, idle_ttl: float | None, agent_name: str, namespace: str, all_creators: bool,
             dry_run: bool, wait: bool, request_id: str | None, output: str, **filters: Any) -> None:
    """Set the idle TTL of every Session the filter matches (`default`: back to the server's)."""
    _bulk(ctx, fleet_pb2.BULK_ACTION_KIND_SET_IDLE_TTL, idle_ttl, agent_name, namespace, all_creators, dry_run,
          wait, request_id, output, filters)


@bulk.command("status")
@click.argument("action_id")
@output_option
@click.pass_context
def bulk_status(ctx: click.Context, action_id: str, output: str) -> None:
    """A bulk action's progress, and the Sessions it reported rather than forced."""
    client = get_client(ctx)
    action = client.call(_stub(ctx).GetBulkAction, fleet_pb2.GetBulkActionRequest(id=action_id)).action
    items = client.call_all_pages(
        _stub(ctx).ListBulkActionItems,
        fleet_pb2.ListBulkActionItemsRequest(id=action_id, page=common_pb2.PageRequest(limit=PAGE)),
        fleet_pb2.ListBulkActionItemsResponse(), "items")
    if output == "json":
        print_json(fleet_pb2.GetBulkActionResponse(action=action))
        print_json(items)
        return
    click.echo(bulk_table([action]))
    if items.items:
        click.echo(boxed_table(["SESSION", "CODE", "MESSAGE"],
                               [[i.session_id, i.code, printable(i.message)] for i in items.items]))
