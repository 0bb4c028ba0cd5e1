"""`sessionq agent ...`: apply, list and inspect Agents.

The group is importable as `sessionq.cli.agent:agent`; `sessionq.cli.main` also mounts the
`session` group under it (`sessionq agent session create ...`, the kagent spelling), and further
agent commands (e.g. `agent invoke`) live in their own modules and are added to this group.
"""

from __future__ import annotations

import time
from typing import Any

import click
import yaml
from sessionq.cli.client import (
    CliError,
    boxed_table,
    fmt_time,
    get_client,
    output_option,
    output_option_yaml,
    print_json,
    print_message,
    printable,
    yaml_problem,
)

from sessionq._pb.kagent.api.v1alpha1 import agents_pb2, agents_pb2_grpc, common_pb2
from sessionq.models import RevisionState

PAGE = 100
POLL_INTERVAL = 0.2
SPEC_KEYS = {"name", "namespace", "template", "egress"}


def _stub(ctx: click.Context) -> agents_pb2_grpc.AgentServiceStub:
    return get_client(ctx).stub(agents_pb2_grpc.AgentServiceStub)


def spec_of_agent_document(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The spec in the output of `agent get -o yaml|json` (the response, or the Agent in it), as a
    plain spec: name, namespace, template, egress. Status fields are ignored."""
    agent = data.get("agent", data)
    spec = agent.get("spec") if isinstance(agent, dict) else None
    if not isinstance(spec, dict):
        raise CliError(f"{source}: an `agent get` document must hold agent.spec")
    ref = spec.get("ref") or (agent.get("ref") if isinstance(agent, dict) else None) or {}
    if not isinstance(ref, dict):
        raise CliError(f"{source}: agent.spec.ref must be a mapping with a name")
    plain = {"name": ref.get("name"), "namespace": ref.get("namespace"), "template": spec.get("template"),
             "egress": spec.get("egress")}
    return {k: v for k, v in plain.items() if v is not None}


def spec_from_yaml(text: str, source: str) -> agents_pb2.AgentSpec:
    """name, namespace (default kagent), template, egress: [{url, credentialHeaders}] -> AgentSpec.

    The output of `agent get -o yaml|json` is accepted too (its spec is applied). Its credential
    header values read `<redacted>`: applied as they are, they keep the values the server has for
    the same header on the same URL."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise CliError(f"{source} is not valid YAML: {yaml_problem(e)}") from None
    if not isinstance(data, dict):
        raise CliError(f"{source} must hold a mapping with at least a name")
    if "agent" in data or "spec" in data:
        data = spec_of_agent_document(data, source)
    unknown = set(data) - SPEC_KEYS
    if unknown:
        raise CliError(f"{source} has unknown keys: {', '.join(sorted(map(str, unknown)))} "
                       f"(an Agent spec has {', '.join(sorted(SPEC_KEYS))})")
    if not data.get("name"):
        raise CliError(f"{source} has no name")
    template = data.get("template") or ""
    if not isinstance(template, str):
        raise CliError(f"{source}: template must be a string (an image reference)")
    egress_raw = data.get("egress") or []
    if not isinstance(egress_raw, list):
        raise CliError(f"{source}: egress must be a list of {{url, credentialHeaders}}")
    egress = []
    for i, item in enumerate(egress_raw):
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            raise CliError(f"{source}: egress[{i}] must be a mapping with a url")
        extra = set(item) - {"url", "credentialHeaders"}
        if extra:
            raise CliError(f"{source}: egress[{i}] has unknown keys: {', '.join(sorted(map(str, extra)))}")
        headers = item.get("credentialHeaders") or {}
        if not isinstance(headers, dict):
            raise CliError(f"{source}: egress[{i}].credentialHeaders must map header names to values")
        egress.append(agents_pb2.EgressDestination(
            url=item["url"], credential_headers={str(k): str(v) for k, v in headers.items()},
        ))
    return agents_pb2.AgentSpec(
        ref=common_pb2.ResourceReference(namespace=str(data.get("namespace") or "kagent"),
                                         name=str(data["name"])),
        template=template,
        egress=egress,
    )


def condition(agent: agents_pb2.Agent, kind: str) -> agents_pb2.Condition | None:
    return next((c for c in agent.conditions if c.type == kind), None)


def desired_revision(agent: agents_pb2.Agent) -> agents_pb2.Revision | None:
    return next((r for r in agent.revisions if r.id == agent.desired_revision), None)


def ref_name(agent: agents_pb2.Agent) -> str:
    return f"{agent.ref.namespace}/{agent.ref.name}"


def ready_text(agent: agents_pb2.Agent) -> str:
    ready = condition(agent, "Ready")
    return ready.status if ready else "Unknown"


def revision_number(agent: agents_pb2.Agent, revision_id: str) -> str:
    rev = next((r for r in agent.revisions if r.id == revision_id), None)
    return str(rev.number) if rev else ""


def agents_table(agents: list[agents_pb2.Agent]) -> str:
    rows = []
    for a in agents:
        desired = desired_revision(a)
        rows.append([
            a.ref.namespace, a.ref.name, a.spec.template or "<default>", ready_text(a),
            f"{desired.number} ({desired.state})" if desired else "",
            revision_number(a, a.latest_successful_revision), fmt_time(a.created_at),
        ])
    return boxed_table(["NAMESPACE", "NAME", "TEMPLATE", "READY", "DESIRED REVISION", "SERVING REVISION",
                        "CREATED"], rows)


def egress_text(e: agents_pb2.EgressDestination) -> str:
    """A URL and the names of its credential headers (their values are never shown)."""
    if not e.credential_headers:
        return e.url
    return f"{e.url} (credential headers: {', '.join(sorted(e.credential_headers))})"


def agent_detail(agent: agents_pb2.Agent) -> str:
    desired = desired_revision(agent)
    lines = [
        f"Agent:     {printable(ref_name(agent))}",
        f"Template:  {printable(agent.spec.template or '<default>')}",
        f"Egress:    {printable(', '.join(egress_text(e) for e in agent.spec.egress) or '<none>')}",
        f"Revisions: desired {desired.number if desired else '?'}, "
        f"serving {revision_number(agent, agent.latest_successful_revision) or '<none>'}",
        f"Created:   {fmt_time(agent.created_at)}",
        "",
        "Conditions:",
        boxed_table(["TYPE", "STATUS", "REASON", "MESSAGE", "LAST TRANSITION"],
                    [[c.type, c.status, c.reason, c.message, fmt_time(c.last_transition_time)]
                     for c in agent.conditions]),
        "",
        "Revisions:",
        boxed_table(["NUMBER", "ID", "STATE", "TEMPLATE", "CREATED", "PREPARED", "FAILURE"],
                    [[r.number, r.id, r.state,
                      f"{r.template_atespace}/{r.template_name}" if r.template_name else "",
                      fmt_time(r.created_at), fmt_time(r.prepared_at), r.failure.message]
                     for r in sorted(agent.revisions, key=lambda r: -r.number)]),
    ]
    return "\n".join(lines)


def wait_until_prepared(ctx: click.Context, ref: common_pb2.ResourceReference,
                        timeout: float) -> agents_pb2.Agent:
    """Poll GetAgent until the desired revision is READY (Ready condition True), or FAILED (an
    error naming the failure), or the timeout passes (an error)."""
    client = get_client(ctx)
    stub = _stub(ctx)
    deadline = time.monotonic() + timeout
    while True:
        agent: agents_pb2.Agent = client.call(stub.GetAgent, agents_pb2.GetAgentRequest(agent=ref)).agent
        desired = desired_revision(agent)
        ready = condition(agent, "Ready")
        if desired is not None and desired.state == RevisionState.FAILED:
            why = desired.failure.message or (ready.message if ready else "") or "no reason given"
            raise CliError(f"agent {ref_name(agent)} revision {desired.number} failed: {why}")
        if desired is not None and desired.state == RevisionState.READY:
            return agent
        if desired is None and ready is not None and ready.status == "True":
            return agent
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            state = f"revision {desired.number} is {desired.state}" if desired else "no revision is prepared"
            raise CliError(
                f"agent {ref_name(agent)} is not ready after {timeout:g}s ({state}); "
                "is a sessionq worker running? (`sessionq agent get` shows its conditions)"
            )
        time.sleep(min(POLL_INTERVAL, remaining))


@click.group()
def agent() -> None:
    """Declare Agents and follow the preparation of their revisions."""


@agent.command()
@click.option("-f", "--file", "spec_file", type=click.File("r"), required=True,
              help="The Agent spec (YAML: name, namespace, template, egress); - reads stdin.")
@click.option("--no-wait", is_flag=True, help="Return at once instead of waiting for the revision.")
@click.option("--wait-timeout", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds to wait for the desired revision to be prepared.")
@output_option
@click.pass_context
def apply(ctx: click.Context, spec_file: Any, no_wait: bool, wait_timeout: float, output: str) -> None:
    """Create or update an Agent from a spec, then wait until its revision is prepared."""
    source = getattr(spec_file, "name", "the spec")
    spec = spec_from_yaml(spec_file.read(), str(source))
    client = get_client(ctx)
    request = agents_pb2.ApplyAgentRequest(spec=spec)
    response: agents_pb2.ApplyAgentResponse = client.call(_stub(ctx).ApplyAgent, request)
    if not no_wait:
        response.agent.CopyFrom(wait_until_prepared(ctx, response.agent.ref, wait_timeout))
    if output == "json":
        print_json(response)
        return
    desired = desired_revision(response.agent)
    number = desired.number if desired else "?"
    what = f"revision {number} created" if response.revision_created else f"unchanged, revision {number}"
    state = f"; {desired.state}" if desired else ""
    click.echo(printable(f"agent {ref_name(response.agent)} applied ({what}{state})"))


@agent.command("list")
@click.option("--namespace", default="", help="Only this namespace (default: all).")
@output_option_yaml
@click.pass_context
def list_(ctx: click.Context, namespace: str, output: str) -> None:
    """List Agents (every page)."""
    client = get_client(ctx)
    stub = _stub(ctx)
    request = agents_pb2.ListAgentsRequest(namespace=namespace, page=common_pb2.PageRequest(limit=PAGE))
    result = agents_pb2.ListAgentsResponse()
    while True:
        response = client.call(stub.ListAgents, request)
        result.agents.extend(response.agents)
        if not response.page.next_page_token:
            break
        request.page.page_token = response.page.next_page_token
    if output in ("json", "yaml"):
        print_message(result, output)
    elif not result.agents:
        click.echo("No agents found.", err=True)
    else:
        click.echo(agents_table(list(result.agents)))


@agent.command()
@click.argument("name")
@click.option("--namespace", default="kagent", show_default=True)
@output_option_yaml
@click.pass_context
def get(ctx: click.Context, name: str, namespace: str, output: str) -> None:
    """Show one Agent: its conditions and revisions. Credential header values read <redacted>;
    `agent apply -f` of the `-o yaml` output keeps them."""
    ref = common_pb2.ResourceReference(namespace=namespace, name=name)
    response = get_client(ctx).call(_stub(ctx).GetAgent, agents_pb2.GetAgentRequest(agent=ref))
    if output in ("json", "yaml"):
        print_message(response, output)
    else:
        click.echo(agent_detail(response.agent))
