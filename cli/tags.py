"""`sessionq tags list`: the runtime's tags, as `kubectl ate get tags` shows them, with what each
pins for sessionq (a checkpoint's tag, a turn pin)."""

from __future__ import annotations

import click
from sessionq.cli.client import fmt_age, get_client, output_option, plain_table, print_json, printable, strip_prefix

from sessionq._pb.kagent.api.v1alpha1 import common_pb2
from sessionq._pb.sessionq.v1 import turns_pb2, turns_pb2_grpc


def tags_table(tags: list[turns_pb2.Tag]) -> str:
    def pins(t: turns_pb2.Tag) -> str:
        kind = strip_prefix(turns_pb2.TagKind.Name(t.kind), "TAG_KIND_").lower().replace("_", " ")
        if t.kind == turns_pb2.TAG_KIND_CHECKPOINT:
            return f"{kind} {t.checkpoint_id}"
        if t.kind == turns_pb2.TAG_KIND_TURN_PIN:
            return f"{kind} ({t.state.lower()})"
        return kind
    return plain_table(
        ["ATESPACE", "NAME", "ACTOR", "GENERATION", "PINS", "SESSION", "TURN", "AGE"],
        [[t.atespace, t.name, t.actor, t.snapshot_generation, pins(t), t.session_id or "<none>",
          t.task_id or "<none>", fmt_age(t.created_at)] for t in tags],
    )


@click.group()
def tags() -> None:
    """The runtime's tags (read-only): checkpoints' tags and turn pins."""


@tags.command("list")
@click.option("--atespace", default="", help="Only this atespace (default: every atespace).")
@click.option("--limit", type=click.IntRange(0, 100), default=0, help="Page size (0: the server's default, 50).")
@output_option
@click.pass_context
def list_(ctx: click.Context, atespace: str, limit: int, output: str) -> None:
    """List the tags you may see (an administrator: every tag), every page."""
    client = get_client(ctx)
    stub = client.stub(turns_pb2_grpc.TagServiceStub)
    request = turns_pb2.ListTagsRequest(atespace=atespace, page=common_pb2.PageRequest(limit=limit))
    result = client.call_all_pages(stub.ListTags, request, turns_pb2.ListTagsResponse(), "tags")
    if output == "json":
        print_json(result)
    elif not result.tags:
        click.echo(printable(f"No tags found in {atespace or 'any atespace'}."), err=True)
    else:
        click.echo(tags_table(list(result.tags)))
