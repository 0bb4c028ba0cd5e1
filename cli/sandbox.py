"""`sessionq sandbox ...`: kagent's standalone Sandboxes (SandboxService)."""

from __future__ import annotations

import uuid
from typing import Any

import click
from google.protobuf.duration_pb2 import Duration
from sessionq.cli.client import (
    DURATION,
    CliError,
    boxed_table,
    echo_list,
    echo_one,
    fmt_time,
    get_client,
    output_option,
    strip_prefix,
)

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, runtime_pb2, sandboxes_pb2, sandboxes_pb2_grpc

PAGE = 100


def _stub(ctx: click.Context) -> sandboxes_pb2_grpc.SandboxServiceStub:
    return get_client(ctx).stub(sandboxes_pb2_grpc.SandboxServiceStub)


def state_name(s: sandboxes_pb2.Sandbox) -> str:
    return strip_prefix(runtime_pb2.RuntimeState.Name(s.state), "RUNTIME_STATE_")


def sandboxes_table(sandboxes: list[sandboxes_pb2.Sandbox]) -> str:
    """ID TEMPLATE STATE CREATED EXPIRES, boxed."""
    return boxed_table(
        ["ID", "TEMPLATE", "STATE", "CREATED", "EXPIRES"],
        [[s.id, s.sandbox_template.name, state_name(s), fmt_time(s.created_at), fmt_time(s.expires_at)]
         for s in sandboxes],
    )


def sandbox_detail(s: sandboxes_pb2.Sandbox) -> str:
    rows = [
        ("ID", s.id),
        ("NAME", s.name),
        ("TEMPLATE", f"{s.sandbox_template.namespace}/{s.sandbox_template.name}" if s.sandbox_template.name else ""),
        ("STATE", state_name(s)),
        ("OPERATION", strip_prefix(runtime_pb2.RuntimeOperation.Name(s.operation), "RUNTIME_OPERATION_")),
        ("CREATOR", s.creator),
        ("REVISION", s.prepared_revision),
        ("CREATED", fmt_time(s.created_at)),
        ("UPDATED", fmt_time(s.updated_at)),
        ("EXPIRES", fmt_time(s.expires_at)),
    ]
    if s.HasField("failure"):
        rows.append(("FAILURE", f"{s.failure.reason}: {s.failure.message}" if s.failure.reason else s.failure.message))
    return boxed_table(["FIELD", "VALUE"], rows)


def _show(response: Any, output: str, detail: bool = False) -> None:
    """A response holding one `sandbox`: as JSON, a one-row table, or (detail) every field."""
    echo_one(response, "sandbox", output, sandboxes_table, sandbox_detail if detail else None)


@click.group()
def sandbox() -> None:
    """Create, inspect, suspend, resume and delete standalone Sandboxes (they expire by themselves)."""


@sandbox.command()
@click.option("--template", "template", required=True,
              help="The sandbox template: an Agent, whose prepared revision the Sandbox runs.")
@click.option("--namespace", default="kagent", show_default=True, help="The template's namespace.")
@click.option("--name", default="", help="A display name for the Sandbox.")
@click.option("--ttl", type=DURATION, default=None,
              help="Lifetime, 1s to 24h, e.g. 30m (default: the server's sandboxes.defaultTtl).")
@click.option("--request-id", default=None,
              help="Idempotency key (1-128 characters; default: a fresh UUID). "
                   "Repeating it with the same input returns the same Sandbox.")
@output_option
@click.pass_context
def create(ctx: click.Context, template: str, namespace: str, name: str, ttl: float | None,
           request_id: str | None, output: str) -> None:
    """Create a Sandbox (retried with the same request id while the server is busy)."""
    request = sandboxes_pb2.CreateSandboxRequest(
        request_id=request_id or str(uuid.uuid4()),
        name=name,
        sandbox_template=common_pb2.ResourceReference(namespace=namespace, name=template),
    )
    if ttl is not None:
        duration = Duration()
        duration.FromNanoseconds(int(ttl * 1e9))
        request.ttl.CopyFrom(duration)
    _show(get_client(ctx).call_creating(_stub(ctx).CreateSandbox, request), output)


@sandbox.command()
@click.argument("sandbox_id")
@output_option
@click.pass_context
def get(ctx: click.Context, sandbox_id: str, output: str) -> None:
    """Show one Sandbox."""
    response = get_client(ctx).call(_stub(ctx).GetSandbox, sandboxes_pb2.GetSandboxRequest(sandbox_id=sandbox_id))
    _show(response, output, detail=True)


@sandbox.command("list")
@click.option("--template", "template", default="", help="Only the Sandboxes of this template.")
@click.option("--namespace", default="", help="The template's namespace (default kagent when --template is given).")
@output_option
@click.pass_context
def list_(ctx: click.Context, template: str, namespace: str, output: str) -> None:
    """List your Sandboxes (every page)."""
    if namespace and not template:
        raise CliError("--namespace filters by a template: give --template too")
    client = get_client(ctx)
    stub = _stub(ctx)
    request = sandboxes_pb2.ListSandboxesRequest(page=common_pb2.PageRequest(limit=PAGE))
    if template:
        request.sandbox_template.CopyFrom(common_pb2.ResourceReference(namespace=namespace or "kagent", name=template))
    result = client.call_all_pages(stub.ListSandboxes, request, sandboxes_pb2.ListSandboxesResponse(), "sandboxes")
    echo_list(result, "sandboxes", output, sandboxes_table, "No sandboxes found.")


@sandbox.command()
@click.argument("sandbox_id")
@output_option
@click.pass_context
def suspend(ctx: click.Context, sandbox_id: str, output: str) -> None:
    """Suspend a Sandbox (running commands and file transfers may be cut off)."""
    request = sandboxes_pb2.SuspendSandboxRequest(sandbox_id=sandbox_id)
    _show(get_client(ctx).call_retrying(_stub(ctx).SuspendSandbox, request), output)


@sandbox.command()
@click.argument("sandbox_id")
@output_option
@click.pass_context
def resume(ctx: click.Context, sandbox_id: str, output: str) -> None:
    """Resume a suspended Sandbox."""
    request = sandboxes_pb2.ResumeSandboxRequest(sandbox_id=sandbox_id)
    _show(get_client(ctx).call_retrying(_stub(ctx).ResumeSandbox, request), output)


@sandbox.command()
@click.argument("sandbox_id")
@output_option
@click.pass_context
def delete(ctx: click.Context, sandbox_id: str, output: str) -> None:
    """Delete a Sandbox and its runtime."""
    request = sandboxes_pb2.DeleteSandboxRequest(sandbox_id=sandbox_id)
    _show(get_client(ctx).call_retrying(_stub(ctx).DeleteSandbox, request), output)
