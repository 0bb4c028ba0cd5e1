"""`sessionq actors list`: the runtime's Actors, as `kubectl ate get actors` shows them."""

from __future__ import annotations

import click
from sessionq.cli.client import fmt_age, get_client, output_option, plain_table, print_json, printable

from sessionq._pb.kagent.api.v1alpha1 import common_pb2
from sessionq._pb.sessionq.v1 import inventory_pb2, inventory_pb2_grpc


def actors_table(actors: list[inventory_pb2.Actor]) -> str:
    return plain_table(
        ["ATESPACE", "NAME", "TEMPLATE", "STATE", "WORKER", "VERSION", "AGE"],
        [[a.atespace, a.name, a.template, a.state, a.worker or "<none>", a.version, fmt_age(a.created_at)]
         for a in actors],
    )


@click.group()
def actors() -> None:
    """The runtime's Actors (read-only)."""


@actors.command("list")
@click.option("--atespace", default="", help="Only this atespace (default: every atespace).")
@click.option("--limit", type=click.IntRange(0, 100), default=0,
              help="Page size (0: the server's default, 50).")
@click.option("--page-token", default="", help="Continue from a previous page.")
@click.option("--all", "all_pages", is_flag=True, help="Fetch every page.")
@output_option
@click.pass_context
def list_(ctx: click.Context, atespace: str, limit: int, page_token: str, all_pages: bool,
          output: str) -> None:
    """List Actors: one page, or every page with --all."""
    client = get_client(ctx)
    stub = client.stub(inventory_pb2_grpc.InventoryServiceStub)
    request = inventory_pb2.ListActorsRequest(
        atespace=atespace, page=common_pb2.PageRequest(limit=limit, page_token=page_token),
    )
    result = inventory_pb2.ListActorsResponse()
    while True:
        response = client.call(stub.ListActors, request)
        result.actors.extend(response.actors)
        result.page.CopyFrom(response.page)
        if not all_pages or not response.page.next_page_token:
            break
        request.page.page_token = response.page.next_page_token
    if output == "json":
        print_json(result)
        return
    if result.actors:
        click.echo(actors_table(list(result.actors)))
    else:
        where = f" in atespace {atespace}" if atespace else ""
        click.echo(f"No actors found{where}.", err=True)
    if result.page.next_page_token:
        click.echo(printable(f"(more actors: --page-token {result.page.next_page_token}, or --all)"), err=True)
