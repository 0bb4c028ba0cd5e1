"""The Agent as kagent's AgentService carries it: one resource, `apiVersion`, `kind`, `metadata`,
`spec` and `status`, as plain JSON-like data (the API turns it into a protobuf Struct).

`spec` is sessionq's Agent spec (`template`, `egress`, and what the Actor runs: `command`, `args`,
`env`); the name and namespace are the resource's
metadata and must agree with the request's `ref`. `status` is output only: the Accepted,
ResolvedRefs, Compatible and Ready conditions, the desired and the latest successful revision and
every revision's state. Credential header values are write-only: every resource built here holds
them redacted (`<redacted>`), and a resource applied with `<redacted>` keeps the stored value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sessionq import errors
from sessionq.domain.agents import AgentSpec, parse_spec, redact_spec
from sessionq.models import Agent, Revision

API_VERSION = "api.kagent.dev/v1alpha3"
KIND = "Agent"
RESOURCE_KEYS = {"apiVersion", "kind", "metadata", "spec", "status"}
SPEC_KEYS = {"template", "egress", "command", "args", "env"}


def spec_from_resource(namespace: str, name: str, api_version: str, kind: str, value: Any) -> AgentSpec:
    """The spec an Agent resource declares for the Agent `ref` names. The envelope, the object's
    own type fields and its metadata must agree with `ref`; `status` is ignored (output only)."""
    if api_version != API_VERSION:
        raise errors.invalid(f"resource.api_version must be {API_VERSION} (got {errors.clip(api_version)!r})")
    if kind != KIND:
        raise errors.invalid(f"resource.kind must be {KIND} (got {errors.clip(kind)!r})")
    if not isinstance(value, dict):
        raise errors.invalid("resource.value is required: the Agent resource (metadata, spec)")
    for key, want in (("apiVersion", api_version), ("kind", kind)):
        if key in value and value[key] != want:
            raise errors.invalid(
                f"resource.value.{key} {errors.clip(str(value[key]))!r} does not agree with the envelope's {want!r}"
            )
    unknown = set(value) - RESOURCE_KEYS
    if unknown:
        raise errors.invalid(
            f"the Agent resource has unknown keys: {errors.clip(', '.join(sorted(map(str, unknown))))} "
            f"(it has {', '.join(sorted(RESOURCE_KEYS))})"
        )
    metadata = value.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise errors.invalid("resource metadata must be a mapping (name, namespace)")
    for key, want in (("name", name), ("namespace", namespace)):
        got = metadata.get(key)
        if got not in (None, "") and got != want:
            raise errors.invalid(
                f"resource metadata.{key} {errors.clip(str(got))!r} does not match ref.{key} {want!r}"
            )
    spec = value.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise errors.invalid("resource spec must be a mapping (template, egress)")
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise errors.invalid(
            f"the Agent spec has unknown keys: {errors.clip(', '.join(sorted(map(str, unknown))))} "
            f"(it has {', '.join(sorted(SPEC_KEYS))}; the name and namespace are the metadata's)"
        )
    return parse_spec({**spec, "name": name, "namespace": namespace})


def _time(value: datetime | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resource_of(agent: Agent, revisions: list[Revision]) -> dict[str, Any]:
    """The whole Agent resource (credential header values redacted)."""
    spec = redact_spec(agent.spec)
    desired = next((r for r in revisions if r.id == agent.desired_revision_id), None)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "namespace": agent.namespace,
            "name": agent.name,
            "creationTimestamp": _time(agent.created_at),
            # the desired revision's number: it grows with every change of the spec
            "generation": desired.number if desired else 0,
            "annotations": {"sessionq.dev/created-by": agent.created_by},
        },
        "spec": {
            "template": spec.get("template", ""),
            "egress": spec.get("egress") or [],
            **{k: spec[k] for k in ("command", "args", "env") if spec.get(k)},
        },
        "status": {
            "observedGeneration": desired.number if desired else 0,
            "conditions": [
                {
                    "type": c["type"],
                    "status": c["status"],
                    "reason": c.get("reason", ""),
                    "message": c.get("message", ""),
                    "lastTransitionTime": _time(c.get("lastTransitionTime")),
                }
                for c in agent.conditions
            ],
            "desiredRevision": str(agent.desired_revision_id),
            "latestSuccessfulRevision": str(agent.latest_successful_revision_id or ""),
            "revisions": [
                {
                    "id": str(r.id),
                    "number": r.number,
                    "state": str(r.state),
                    "template": f"{r.template_atespace}/{r.template_name}",
                    "failure": r.failure_message or "",
                    "createdAt": _time(r.created_at),
                    "preparedAt": _time(r.prepared_at),
                }
                for r in sorted(revisions, key=lambda r: r.number)
            ],
            "updatedAt": _time(agent.updated_at),
        },
    }
