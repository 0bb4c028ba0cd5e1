"""Agent specs, their egress policy, and preparing revisions in the runtime."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import yaml

from sessionq import errors
from sessionq.store import Store
from sessionq.substrate.base import Code, Substrate, SubstrateError

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "kagent"
DEFAULT_IMAGE = "sessionq/simulated-agent:latest"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


def check_namespace(value: str, what: str = "namespace") -> str:
    if not _DNS_LABEL.match(value or ""):
        raise errors.invalid(
            f"{what} {errors.clip(value)!r} must be a DNS label (lowercase letters, digits and '-', at most 63)"
        )
    return value


def check_name(value: str, what: str = "name") -> str:
    if not _DNS_SUBDOMAIN.match(value or ""):
        raise errors.invalid(
            f"{what} {errors.clip(value)!r} must be a DNS subdomain (lowercase letters, digits, '-' and '.')"
        )
    return value


@dataclass(frozen=True)
class EgressDestination:
    url: str
    credential_headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentSpec:
    namespace: str
    name: str
    template: str = ""
    egress: tuple[EgressDestination, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "template": self.template,
            "egress": [{"url": d.url, "credentialHeaders": dict(d.credential_headers)} for d in self.egress],
        }

    @property
    def image(self) -> str:
        return self.template or DEFAULT_IMAGE

    def spec_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()


def parse_spec(data: Any) -> AgentSpec:
    """Parse and validate an Agent spec (a YAML text or a mapping)."""
    if isinstance(data, str):
        try:
            data = yaml.safe_load(data)
        except yaml.YAMLError as e:
            raise errors.invalid(f"agent spec is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise errors.invalid("agent spec must be a mapping with at least a name")
    unknown = set(data) - {"name", "namespace", "template", "egress"}
    if unknown:
        raise errors.invalid(f"agent spec has unknown keys: {', '.join(sorted(unknown))}")
    name = check_name(str(data.get("name") or ""), "agent name")
    namespace = check_namespace(str(data.get("namespace") or DEFAULT_NAMESPACE), "agent namespace")
    template = data.get("template") or ""
    if not isinstance(template, str) or len(template) > 512:
        raise errors.invalid("template must be an image reference of at most 512 characters")
    egress_raw = data.get("egress") or []
    if not isinstance(egress_raw, list):
        raise errors.invalid("egress must be a list of {url, credentialHeaders}")
    egress = []
    for i, item in enumerate(egress_raw):
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            raise errors.invalid(f"egress[{i}] must be a mapping with a url")
        headers = item.get("credentialHeaders") or {}
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise errors.invalid(f"egress[{i}].credentialHeaders must map header names to values")
        egress.append(EgressDestination(item["url"], dict(headers)))
    return AgentSpec(namespace, name, template, tuple(egress))


def compile_egress(spec: AgentSpec, cluster_domain: str = "cluster.local") -> list[dict[str, Any]]:
    """Compile the spec's HTTP(S) origins into the runtime's protocol-specific allow rules.

    Each origin keeps its scheme, DNS name and port; its credential headers ride on its own rule.
    Rejected, naming the entry: literal IP addresses, names that are not fully qualified, and two
    protocols on one host and port.
    """
    rules: dict[tuple[str, int], dict[str, Any]] = {}
    for i, dest in enumerate(spec.egress):
        where = f"egress[{i}] ({errors.clip(dest.url)})"
        parts = urlsplit(dest.url)
        if parts.scheme not in ("http", "https"):
            raise errors.invalid(f"{where}: only http and https origins are supported")
        host = (parts.hostname or "").rstrip(".").lower()
        if not host:
            raise errors.invalid(f"{where}: the URL has no host name")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            raise errors.invalid(f"{where}: literal IP addresses are not supported; use a DNS name")
        if re.fullmatch(r"[0-9]+|0x[0-9a-f]*", host.split(".")[-1]):
            # short or numeric IPv4 spellings (127.1, 0x7f.0.0.1, 0177.0.0.1) are addresses too
            raise errors.invalid(f"{where}: literal IP addresses are not supported; use a DNS name")
        if not _DNS_SUBDOMAIN.match(host):
            raise errors.invalid(f"{where}: {errors.clip(host)!r} is not a valid DNS name")
        if "." not in host or _is_partial_cluster_name(host, cluster_domain):
            raise errors.invalid(
                f"{where}: {errors.clip(host)!r} is not fully qualified; use the full name, "
                f"e.g. <service>.<namespace>.svc.{cluster_domain}"
            )
        try:
            port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise errors.invalid(f"{where}: invalid port") from None
        if not 0 < port < 65536:
            raise errors.invalid(f"{where}: invalid port {port}")
        for header in dest.credential_headers:
            if not _HEADER.match(header):
                raise errors.invalid(f"{where}: {errors.clip(header)!r} is not a valid header name")
        key = (host, port)
        if key in rules and rules[key]["protocol"] != parts.scheme:
            raise errors.invalid(
                f"{where}: {host}:{port} is already allowed as {rules[key]['protocol']}; "
                "two protocols on one host and port are not supported"
            )
        rule = rules.setdefault(
            key, {"protocol": parts.scheme, "hostname": host, "port": port, "credential_headers": {}}
        )
        rule["credential_headers"].update(dest.credential_headers)
    return sorted(rules.values(), key=lambda r: (r["hostname"], r["port"]))


def _is_partial_cluster_name(host: str, cluster_domain: str) -> bool:
    """In-cluster names must be complete: 'svc.namespace' or 'svc.namespace.svc' would be
    expanded by DNS search domains into a name the egress policy does not hold."""
    labels = host.split(".")
    if host.endswith("." + cluster_domain):
        return False
    return "svc" in labels or labels[-1] in ("local", "cluster")


async def prepare_revision(store: Store, runtime: Substrate, revision_id: UUID) -> str:
    """Create the revision's actor template (once; a retry adopts the template it already made)
    and record the outcome. Returns the revision's final state."""
    rev = await store.get_revision(revision_id)
    if rev.state != "PENDING":
        return rev.state
    try:
        try:
            template = await runtime.get_actor_template(rev.template_atespace, rev.template_name)
        except SubstrateError as e:
            if e.code != Code.NOT_FOUND:
                raise
            try:
                template = await runtime.create_actor_template(rev.template_atespace, rev.template_name, rev.image)
            except SubstrateError as again:
                if again.code != Code.ALREADY_EXISTS:
                    raise
                # a concurrent preparation of this revision made it: the template is this revision's own
                template = await runtime.get_actor_template(rev.template_atespace, rev.template_name)
    except SubstrateError as e:
        if e.code in (Code.INVALID_ARGUMENT, Code.FAILED_PRECONDITION):
            log.warning("revision %s failed: %s", revision_id, e.message)
            await store.finish_revision(revision_id, None, f"actor template {rev.template_name}: {e.message}")
            return "FAILED"
        raise  # transient: the job retries
    await store.finish_revision(revision_id, template.uid, None)
    return "READY"
