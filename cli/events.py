"""`sessionq events`: the lifecycle events of the Sessions the caller may see (docs/events.md),
one Session's with --session; --follow keeps reading as they happen, resuming after the last one
shown (the same position the SSE streams' Last-Event-ID names)."""

from __future__ import annotations

import json
import time

import click
from google.protobuf import json_format
from sessionq.cli.client import echo_list, fmt_time, get_client, output_option, plain_table, print_json, printable

from sessionq._pb.kagent.api.v1alpha1 import common_pb2
from sessionq._pb.sessionq.v1 import events_pb2, events_pb2_grpc

TYPES = [name.removeprefix("EVENT_KIND_").lower() for name in events_pb2.EventKind.keys()
         if name != "EVENT_KIND_UNSPECIFIED"]
FOLLOW_POLL = 1.0  # seconds between reads while following


def events_table(events: list[events_pb2.Event]) -> str:
    return plain_table(
        ["TIME", "SESSION", "TYPE", "AGENT", "DETAIL"],
        [[fmt_time(e.created_at), e.session_id, e.type, f"{e.agent_namespace}/{e.agent_name}",
          printable(json.dumps(json_format.MessageToDict(e.payload), separators=(",", ":")))] for e in events],
    )


def echo_events(events: list[events_pb2.Event], output: str, header: bool) -> None:
    if output == "json":
        for e in events:  # one JSON object a line, as they come
            click.echo(json.dumps(json_format.MessageToDict(e)))
    elif events:
        table = events_table(events).splitlines()
        click.echo("\n".join(table if header else table[1:]))


@click.command("events")
@click.option("--session", "session_id", default="", metavar="ID", help="Only this Session's events.")
@click.option("--type", "types", multiple=True, type=click.Choice(TYPES), help="Only these event types (repeatable).")
@click.option("--after", default="", metavar="EVENT_ID", help="Start after this event id (default: the oldest kept).")
@click.option("--follow", "-f", is_flag=True, help="Keep reading new events as they happen (Ctrl-C stops).")
@click.option("--limit", type=click.IntRange(0, 100), default=0, help="Page size (0: the server's default, 50).")
@output_option
@click.pass_context
def events(ctx: click.Context, session_id: str, types: tuple[str, ...], after: str, follow: bool, limit: int,
           output: str) -> None:
    """List lifecycle events, oldest first; -o json writes one event a line."""
    client = get_client(ctx)
    stub = client.stub(events_pb2_grpc.EventServiceStub)
    request = events_pb2.ListEventsRequest(
        session_id=session_id,
        kinds=[events_pb2.EventKind.Value(f"EVENT_KIND_{t.upper()}") for t in types],
        page=common_pb2.PageRequest(limit=limit, page_token=after),
    )
    shown = False
    try:
        while True:
            response = client.call(stub.ListEvents, request)
            echo_events(list(response.events), output, header=not shown)
            shown = shown or bool(response.events)
            if response.cursor:
                request.page.page_token = response.cursor
            if response.page.next_page_token:
                continue
            if not follow:
                break
            time.sleep(FOLLOW_POLL)
    except KeyboardInterrupt:
        return
    if not shown and output != "json":
        click.echo("No events.", err=True)


def webhooks_table(hooks: list[events_pb2.Webhook]) -> str:
    return plain_table(
        ["ID", "URL", "EVENTS", "AGENT", "ENABLED", "FAILURES"],
        [[w.id, printable(w.url), ",".join(events_pb2.EventKind.Name(k).removeprefix("EVENT_KIND_").lower()
                                             for k in w.event_types) or "<all>",
          f"{w.agent_namespace}/{w.agent_name}" if w.agent_name else "<any>",
          "yes" if w.enabled else "no (disabled)", w.consecutive_failures] for w in hooks],
    )


@click.group()
def webhooks() -> None:
    """Webhook subscriptions: lifecycle events POSTed to a URL, signed (Standard Webhooks)."""


@webhooks.command("create")
@click.option("--url", required=True, help="The receiver: an http or https URL.")
@click.option("--event", "types", multiple=True, type=click.Choice(TYPES),
              help="Only these event types (repeatable; default: all).")
@click.option("--agent", default="", metavar="NAMESPACE/NAME", help="Only the Sessions of this Agent.")
@click.option("--global", "is_global", is_flag=True, help="Every Session's events (administrators only).")
@output_option
@click.pass_context
def create(ctx: click.Context, url: str, types: tuple[str, ...], agent: str, is_global: bool, output: str) -> None:
    """Create a subscription; its signing secret (whsec_...) is shown this once."""
    namespace, _, name = agent.partition("/")
    if agent and not (namespace and name):
        raise click.BadParameter("NAMESPACE/NAME", param_hint="--agent")
    client = get_client(ctx)
    stub = client.stub(events_pb2_grpc.WebhookServiceStub)
    request = events_pb2.CreateWebhookRequest(
        url=url, event_types=[events_pb2.EventKind.Value(f"EVENT_KIND_{t.upper()}") for t in types],
        agent_namespace=namespace if agent else "", agent_name=name if agent else "", **{"global": is_global},
    )
    response = client.call(stub.CreateWebhook, request)
    if output == "json":
        print_json(response)
        return
    click.echo(webhooks_table([response.webhook]))
    click.echo(f"Signing secret (shown once; store it now): {response.secret}")


@webhooks.command("list")
@output_option
@click.pass_context
def list_(ctx: click.Context, output: str) -> None:
    """List your subscriptions (administrators: everyone's); secrets are never shown."""
    client = get_client(ctx)
    stub = client.stub(events_pb2_grpc.WebhookServiceStub)
    result = client.call_all_pages(stub.ListWebhooks, events_pb2.ListWebhooksRequest(),
                                   events_pb2.ListWebhooksResponse(), "webhooks")
    echo_list(result, "webhooks", output, webhooks_table, empty="No webhooks.")


@webhooks.command("delete")
@click.argument("webhook_id")
@click.pass_context
def delete(ctx: click.Context, webhook_id: str) -> None:
    """Delete a subscription (its pending deliveries go with it)."""
    client = get_client(ctx)
    stub = client.stub(events_pb2_grpc.WebhookServiceStub)
    client.call(stub.DeleteWebhook, events_pb2.DeleteWebhookRequest(id=webhook_id))
    click.echo(f"Deleted webhook {webhook_id}.")
