"""`sessionq agent ...`: apply, list and inspect Agents.

The group is importable as `sessionq.cli.agent:agent`; `sessionq.cli.main` also mounts the
`session` group under it (`sessionq agent session create ...`, the kagent spelling), and further
agent commands (e.g. `agent invoke`) live in their own modules and are added to this group.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import click
import yaml
from google.protobuf import json_format, struct_pb2
from sessionq.cli.client import (
    CliError,
    boxed_table,
    get_client,
    output_option,
    output_option_yaml,
    print_message,
    printable,
    yaml_problem,
)

from sessionq._pb.kagent.api.v1alpha1 import agents_pb2, agents_pb2_grpc, common_pb2
from sessionq.models import RevisionState

POLL_INTERVAL = 0.2
SPEC_KEYS = {"name", "namespace", "template", "egress", "command", "args", "env"}
API_VERSION = "api.kagent.dev/v1alpha3"  # the Agent resource (sessionq.domain.agent_resource)
KIND = "Agent"


def _stub(ctx: click.Context) -> agents_pb2_grpc.AgentServiceStub:
    return get_client(ctx).stub(agents_pb2_grpc.AgentServiceStub)


@dataclass(frozen=True)
class Document:
    """An Agent to apply: its reference and its resource (apiVersion, kind, metadata, spec)."""

    namespace: str
    name: str
    resource: dict[str, Any]

    @property
    def ref(self) -> common_pb2.ResourceReference:
        return common_pb2.ResourceReference(namespace=self.namespace, name=self.name)

    def structured(self) -> common_pb2.StructuredObject:
        value = struct_pb2.Struct()
        value.update(self.resource)
        return common_pb2.StructuredObject(api_version=API_VERSION, kind=KIND, value=value)


def _plain_spec(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A spec in the CLI's own YAML (name, namespace, template, egress), checked for its shape."""
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
        egress.append({"url": item["url"], "credentialHeaders": {str(k): str(v) for k, v in headers.items()}})
    plain = {"name": str(data["name"]), "namespace": str(data.get("namespace") or "kagent"),
             "template": template, "egress": egress}
    # what the Actor runs: passed as given, the server validates it
    plain.update({k: data[k] for k in ("command", "args", "env") if data.get(k) is not None})
    return plain


def _from_plain(spec: dict[str, Any]) -> Document:
    return Document(spec["namespace"], spec["name"], {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"namespace": spec["namespace"], "name": spec["name"]},
        "spec": {"template": spec["template"], "egress": spec["egress"],
                 **{k: spec[k] for k in ("command", "args", "env") if k in spec}},
    })


def _from_resource(value: dict[str, Any], source: str) -> Document:
    """A Kubernetes-style Agent resource (apiVersion, kind: Agent, metadata, spec; status ignored)."""
    metadata = value.get("metadata") or {}
    if not isinstance(metadata, dict) or not metadata.get("name"):
        raise CliError(f"{source}: the Agent resource has no metadata.name")
    namespace = str(metadata.get("namespace") or "kagent")
    resource = {k: v for k, v in value.items() if k != "status"}
    resource["metadata"] = {"namespace": namespace, "name": str(metadata["name"])}
    return Document(namespace, str(metadata["name"]), resource)


def document_from_yaml(text: str, source: str) -> Document:
    """What `agent apply -f` reads, in any of its forms:

    - the CLI's plain spec: name, namespace (default kagent), template, egress: [{url, credentialHeaders}];
    - an Agent resource (apiVersion api.kagent.dev/v1alpha3, kind Agent, metadata, spec);
    - the output of `agent get -o yaml|json` (the response or the Agent in it; its resource), and
      that of earlier versions of sessionq (agent.spec with its ref).

    Credential header values that read `<redacted>` keep the values the server has for the same
    header on the same URL."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise CliError(f"{source} is not valid YAML: {yaml_problem(e)}") from None
    if not isinstance(data, dict):
        raise CliError(f"{source} must hold a mapping with at least a name")
    agent = data.get("agent", data)
    if isinstance(agent, dict) and isinstance(agent.get("resource"), dict):  # `agent get` output
        resource = agent["resource"]
        value = resource.get("value")
        if resource.get("kind", KIND) != KIND or not isinstance(value, dict):
            raise CliError(f"{source}: agent.resource must hold an Agent")
        return _from_resource(value, source)
    if "kind" in data or "apiVersion" in data:
        if data.get("kind") != KIND:
            raise CliError(f"{source}: kind must be {KIND} (got {printable(data.get('kind'))})")
        return _from_resource(data, source)
    if isinstance(agent, dict) and isinstance(agent.get("spec"), dict):  # an older `agent get` output
        spec = agent["spec"]
        ref = spec.get("ref") or agent.get("ref") or {}
        if not isinstance(ref, dict):
            raise CliError(f"{source}: agent.spec.ref must be a mapping with a name")
        plain = {"name": ref.get("name"), "namespace": ref.get("namespace"), "template": spec.get("template"),
                 "egress": spec.get("egress")}
        return _from_plain(_plain_spec({k: v for k, v in plain.items() if v is not None}, source))
    if "agent" in data or "spec" in data:
        raise CliError(f"{source}: an `agent get` document must hold agent.resource")
    return _from_plain(_plain_spec(data, source))


def resource_of(agent: agents_pb2.Agent) -> dict[str, Any]:
    return json_format.MessageToDict(agent.resource.value) if agent.resource.HasField("value") else {}


def status(agent: agents_pb2.Agent) -> dict[str, Any]:
    value = resource_of(agent).get("status")
    return value if isinstance(value, dict) else {}


def spec(agent: agents_pb2.Agent) -> dict[str, Any]:
    value = resource_of(agent).get("spec")
    return value if isinstance(value, dict) else {}


def condition(agent: agents_pb2.Agent, kind: str) -> dict[str, Any] | None:
    return next((c for c in status(agent).get("conditions") or [] if c.get("type") == kind), None)


def revisions(agent: agents_pb2.Agent) -> list[dict[str, Any]]:
    return [r for r in status(agent).get("revisions") or [] if isinstance(r, dict)]


def number(rev: dict[str, Any]) -> int:
    return int(rev.get("number") or 0)


def desired_revision(agent: agents_pb2.Agent) -> dict[str, Any] | None:
    want = status(agent).get("desiredRevision")
    return next((r for r in revisions(agent) if r.get("id") == want), None)


def ref_name(agent: agents_pb2.Agent) -> str:
    return f"{agent.ref.namespace}/{agent.ref.name}"


def ready_text(agent: agents_pb2.Agent) -> str:
    ready = condition(agent, "Ready")
    return str(ready.get("status", "Unknown")) if ready else "Unknown"


def revision_number(agent: agents_pb2.Agent, revision_id: str) -> str:
    rev = next((r for r in revisions(agent) if r.get("id") == revision_id), None)
    return str(number(rev)) if rev else ""


def agents_table(agents: list[agents_pb2.Agent]) -> str:
    rows = []
    for a in agents:
        desired = desired_revision(a)
        created = (resource_of(a).get("metadata") or {}).get("creationTimestamp") or ""
        rows.append([
            a.ref.namespace, a.ref.name, spec(a).get("template") or "<default>", ready_text(a),
            f"{number(desired)} ({desired.get('state')})" if desired else "",
            revision_number(a, str(status(a).get("latestSuccessfulRevision") or "")), created,
        ])
    return boxed_table(["NAMESPACE", "NAME", "TEMPLATE", "READY", "DESIRED REVISION", "SERVING REVISION",
                        "CREATED"], rows)


def egress_text(e: dict[str, Any]) -> str:
    """A URL and the names of its credential headers (their values are never shown)."""
    headers = e.get("credentialHeaders") or {}
    if not headers:
        return str(e.get("url", ""))
    return f"{e.get('url', '')} (credential headers: {', '.join(sorted(headers))})"


def agent_detail(agent: agents_pb2.Agent) -> str:
    desired = desired_revision(agent)
    serving = revision_number(agent, str(status(agent).get("latestSuccessfulRevision") or ""))
    created = (resource_of(agent).get("metadata") or {}).get("creationTimestamp") or ""
    lines = [
        f"Agent:     {printable(ref_name(agent))}",
        f"Template:  {printable(spec(agent).get('template') or '<default>')}",
        f"Egress:    {printable(', '.join(egress_text(e) for e in spec(agent).get('egress') or []) or '<none>')}",
        f"Revisions: desired {number(desired) if desired else '?'}, serving {serving or '<none>'}",
        f"Created:   {printable(created)}",
        "",
        "Conditions:",
        boxed_table(["TYPE", "STATUS", "REASON", "MESSAGE", "LAST TRANSITION"],
                    [[c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", ""),
                      c.get("lastTransitionTime") or ""] for c in status(agent).get("conditions") or []]),
        "",
        "Revisions:",
        boxed_table(["NUMBER", "ID", "STATE", "TEMPLATE", "CREATED", "PREPARED", "FAILURE"],
                    [[number(r), r.get("id", ""), r.get("state", ""), r.get("template", ""),
                      r.get("createdAt") or "", r.get("preparedAt") or "", r.get("failure", "")]
                     for r in sorted(revisions(agent), key=lambda r: -number(r))]),
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
        agent: agents_pb2.Agent = client.call(stub.GetAgent, agents_pb2.GetAgentRequest(ref=ref)).agent
        desired = desired_revision(agent)
        ready = condition(agent, "Ready")
        if desired is not None and desired.get("state") == RevisionState.FAILED:
            why = desired.get("failure") or (ready or {}).get("message") or "no reason given"
            raise CliError(f"agent {ref_name(agent)} revision {number(desired)} failed: {why}")
        if desired is not None and desired.get("state") == RevisionState.READY:
            return agent
        if desired is None and ready is not None and ready.get("status") == "True":
            return agent
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            state = f"revision {number(desired)} is {desired.get('state')}" if desired else "no revision is prepared"
            raise CliError(
                f"agent {ref_name(agent)} is not ready after {timeout:g}s ({state}); "
                "is a sessionq worker running? (`sessionq agent get` shows its conditions)"
            )
        time.sleep(min(POLL_INTERVAL, remaining))


def apply_document(ctx: click.Context, doc: Document) -> tuple[agents_pb2.Agent, bool]:
    """Create the Agent, or update it when it exists (either may race another apply: the other
    call then follows). Returns the Agent and whether its desired revision changed."""
    client = get_client(ctx)
    stub = _stub(ctx)
    for _ in range(3):
        try:
            before = client.call(stub.GetAgent, agents_pb2.GetAgentRequest(ref=doc.ref)).agent
        except CliError as e:
            if not str(e.message).startswith("NOT_FOUND"):
                raise
            try:
                created = client.call(stub.CreateAgent, agents_pb2.CreateAgentRequest(
                    ref=doc.ref, resource=doc.structured()))
                return created.agent, True
            except CliError as again:
                if not str(again.message).startswith("ALREADY_EXISTS"):
                    raise
                continue  # created meanwhile: update it
        try:
            updated = client.call(stub.UpdateAgent, agents_pb2.UpdateAgentRequest(
                ref=doc.ref, resource=doc.structured())).agent
        except CliError as e:
            if not str(e.message).startswith("NOT_FOUND"):
                raise
            continue  # deleted meanwhile: create it
        return updated, status(updated).get("desiredRevision") != status(before).get("desiredRevision")
    raise CliError(f"agent {doc.namespace}/{doc.name} keeps changing under this apply; try again")


@click.group()
def agent() -> None:
    """Declare Agents and follow the preparation of their revisions."""


@agent.command()
@click.option("-f", "--file", "spec_file", type=click.File("r"), required=True,
              help="The Agent (YAML: a spec with name, namespace, template, egress; or an Agent resource); "
                   "- reads stdin.")
@click.option("--no-wait", is_flag=True, help="Return at once instead of waiting for the revision.")
@click.option("--wait-timeout", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds to wait for the desired revision to be prepared.")
@output_option
@click.pass_context
def apply(ctx: click.Context, spec_file: Any, no_wait: bool, wait_timeout: float, output: str) -> None:
    """Create or update an Agent, then wait until its revision is prepared."""
    source = getattr(spec_file, "name", "the spec")
    doc = document_from_yaml(spec_file.read(), str(source))
    applied, created = apply_document(ctx, doc)
    if not no_wait:
        applied = wait_until_prepared(ctx, applied.ref, wait_timeout)
    if output == "json":
        body: dict[str, Any] = {"agent": json_format.MessageToDict(applied)}
        if created:
            body["revisionCreated"] = True
        click.echo(json.dumps(body, indent=2))
        return
    desired = desired_revision(applied)
    n = number(desired) if desired else "?"
    what = f"revision {n} created" if created else f"unchanged, revision {n}"
    state = f"; {desired.get('state')}" if desired else ""
    click.echo(printable(f"agent {ref_name(applied)} applied ({what}{state})"))


@agent.command("list")
@click.option("--namespace", default="kagent", show_default=True, help="The namespace to list.")
@output_option_yaml
@click.pass_context
def list_(ctx: click.Context, namespace: str, output: str) -> None:
    """List the Agents of a namespace."""
    result = get_client(ctx).call(_stub(ctx).ListAgents, agents_pb2.ListAgentsRequest(namespace=namespace))
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
    response = get_client(ctx).call(_stub(ctx).GetAgent, agents_pb2.GetAgentRequest(ref=ref))
    if output in ("json", "yaml"):
        print_message(response, output)
    else:
        click.echo(agent_detail(response.agent))
