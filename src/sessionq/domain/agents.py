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
from sessionq.config import ConfigError, parse_duration
from sessionq.db.store import Store
from sessionq.models import ApplyMode, BusyPolicy, RevisionState
from sessionq.runtime.base import Code, Substrate, SubstrateError

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "kagent"
DEFAULT_IMAGE = "sessionq/simulated-agent:latest"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")

# What every read path (API, CLI, logs) shows in place of a credential header value that is set; an
# empty value is shown empty. Applying a spec that holds this marker keeps the stored value of that
# header on the same egress URL (so `agent get -o yaml` fed back to `agent apply` changes nothing).
REDACTED = "<redacted>"

# An OCI image reference, as github.com/distribution/reference parses it:
#   [domain[:port]/]path-component[/path-component...][:tag][@digest]
_ALNUM = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_IMAGE_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_IMAGE_REFERENCE = re.compile(
    rf"(?P<name>{_IMAGE_NAME})(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@(?P<algorithm>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*):(?P<hex>[0-9a-fA-F]{32,}))?",
    re.ASCII,
)
_DIGEST_LENGTHS = {"sha256": 64, "sha512": 128}
_IMAGE_NAME_MAX = 255  # the name (domain and path), as distribution/reference limits it
_TEMPLATE_MAX = 512
_TEMPLATE_RULE = (
    "template must be an image reference such as registry.example.com/team/agent:1.0 or "
    "...@sha256:<64 hex digits>: lowercase path components, optional tag and digest, no spaces or "
    f"control characters, at most {_TEMPLATE_MAX} characters"
)
# what an Agent runs (the Actor's container: command, args, env), with the limits of ateapi's Container
ARGV_MAX_ITEMS = 64
ARGV_MAX_CHARS = 4096
ENV_MAX_ITEMS = 32
ENV_NAME_MAX = 256
ENV_VALUE_MAX = 32768
RESERVED_ENV_PREFIX = "SESSIONQ_"  # set by sessionq and its runtimes (workload token, durable directory, ...)
_ENV_NAME = re.compile(r"^[\x21-\x3c\x3e-\x7e]+$")  # printable ASCII without '=' or spaces
# C0 controls, DEL and C1 controls; header values may hold a horizontal tab (RFC 9110)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_TAB = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


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


def check_template(value: str) -> str:
    """An Agent's template: empty (the runtime's default) or an OCI image reference. The message
    never repeats the value (it may hold anything, control characters included)."""
    if value == "":
        return value
    m = _IMAGE_REFERENCE.fullmatch(value) if len(value) <= _TEMPLATE_MAX else None
    if m is None or len(m.group("name")) > _IMAGE_NAME_MAX:
        raise errors.invalid(_TEMPLATE_RULE)
    algorithm, digest = m.group("algorithm"), m.group("hex")
    if algorithm in _DIGEST_LENGTHS and len(digest) != _DIGEST_LENGTHS[algorithm]:
        raise errors.invalid(f"template: a {algorithm} digest has {_DIGEST_LENGTHS[algorithm]} hex digits")
    return value


def check_busy_policy(value: Any) -> BusyPolicy | None:
    """An Agent's busyPolicy: reject, enqueue or interrupt (absent: the message's own, else reject)."""
    if value is None:
        return None
    try:
        return BusyPolicy(value) if isinstance(value, str) else BusyPolicy("")
    except ValueError:
        raise errors.invalid(f"busyPolicy must be one of {', '.join(p.value for p in BusyPolicy)}") from None


KEEP_WARM_MAX = 86400.0  # a day: an Actor kept running longer is a server, not a session


def check_keep_warm(value: Any) -> float | None:
    """An Agent's keepWarm: a duration such as "30s" (seconds; fractions allowed), 0 to a day
    (absent: sessions.keepWarm). A negative or malformed one is refused; the message never repeats it."""
    if value is None:
        return None
    try:
        seconds = parse_duration(value, "keepWarm") if isinstance(value, str) else -1.0
    except ConfigError:
        seconds = -1.0
    if not 0 <= seconds <= KEEP_WARM_MAX:
        raise errors.invalid('keepWarm must be a duration from "0s" to "86400s", such as "30s"')
    return seconds


def check_egress_url(index: int, url: str) -> None:
    """What an egress URL must never hold, checked before any message repeats it: control
    characters or spaces (CR/LF would split the proxy's request; Python's URL parser silently drops
    some of them) and user info (a password in the URL would be shown wherever the URL is)."""
    if _CONTROL.search(url) or " " in url:
        raise errors.invalid(f"egress[{index}].url must not contain spaces or control characters")
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        raise errors.invalid(f"egress[{index}].url is not a valid URL") from None
    if "@" in netloc:
        raise errors.invalid(
            f"egress[{index}].url must not contain a user name or password; "
            "give credentials as credentialHeaders (they are never shown back)"
        )


def check_argv(value: Any, what: str) -> tuple[str, ...]:
    """An Agent's command or args: a list of at most 64 strings of at most 4096 characters, without
    NUL (the message never repeats an item)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.invalid(f"{what} must be a list of strings")
    if len(value) > ARGV_MAX_ITEMS:
        raise errors.invalid(f"{what} has {len(value)} items; at most {ARGV_MAX_ITEMS}")
    for i, v in enumerate(value):
        if len(v) > ARGV_MAX_CHARS:
            raise errors.invalid(f"{what}[{i}] is longer than {ARGV_MAX_CHARS} characters")
        if "\x00" in v:
            raise errors.invalid(f"{what}[{i}] must not contain a NUL character")
    if what == "command" and value and not value[0]:
        raise errors.invalid("command[0] (the program) must not be empty")
    return tuple(value)


def check_env(value: Any) -> dict[str, str]:
    """An Agent's env: a mapping of at most 32 variables, names of printable ASCII without '=' (not
    starting with SESSIONQ_, which sessionq sets), string values of at most 32768 characters."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise errors.invalid("env must map variable names to string values")
    if len(value) > ENV_MAX_ITEMS:
        raise errors.invalid(f"env has {len(value)} variables; at most {ENV_MAX_ITEMS}")
    env: dict[str, str] = {}
    for name, v in value.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name) or len(name) > ENV_NAME_MAX:
            raise errors.invalid(
                f"env: {errors.clip(str(name))!r} is not a variable name (printable ASCII without '=' or "
                f"spaces, at most {ENV_NAME_MAX} characters)"
            )
        if name.upper().startswith(RESERVED_ENV_PREFIX):
            raise errors.invalid(f"env: {name[:64]!r}: names starting with {RESERVED_ENV_PREFIX} are set by sessionq")
        if not isinstance(v, str):
            raise errors.invalid(f"env: the value of {name[:64]!r} must be a string (quote numbers and booleans)")
        if len(v) > ENV_VALUE_MAX:
            raise errors.invalid(f"env: the value of {name[:64]!r} is longer than {ENV_VALUE_MAX} characters")
        if "\x00" in v:
            raise errors.invalid(f"env: the value of {name[:64]!r} must not contain a NUL character")
        env[name] = v
    return env


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
    description: str = ""
    # the A2A skills its card advertises: {id, name, description, tags, examples}
    skills: tuple[dict[str, Any], ...] = ()
    # what the Actor runs (a process runtime's default agent without a command; a container runtime's image)
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, hash=False)
    # what a message to a Session whose turn still runs does, when the message does not say (None: reject)
    busy_policy: BusyPolicy | None = None
    # how long its Actors stay running after a turn before they may be suspended (None: sessions.keepWarm)
    keep_warm: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "template": self.template,
            "egress": [{"url": d.url, "credentialHeaders": dict(d.credential_headers)} for d in self.egress],
        }
        # only when set, so that the hash of a spec without them is unchanged
        if self.description:
            out["description"] = self.description
        if self.skills:
            out["skills"] = [dict(k) for k in self.skills]
        if self.command:
            out["command"] = list(self.command)
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = dict(self.env)
        if self.busy_policy is not None:
            out["busyPolicy"] = self.busy_policy.value
        if self.keep_warm is not None:  # seconds, as the procedures read it (keep_warm_of)
            out["keepWarm"] = f"{self.keep_warm:g}s"
        return out

    def with_egress(self, egress: tuple[EgressDestination, ...]) -> AgentSpec:
        return AgentSpec(self.namespace, self.name, self.template, egress, self.description, self.skills,
                         self.command, self.args, dict(self.env), self.busy_policy, self.keep_warm)

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
    unknown = set(data) - {
        "name", "namespace", "template", "egress", "description", "skills", "command", "args", "env", "busyPolicy",
        "keepWarm",
    }
    if unknown:
        raise errors.invalid(f"agent spec has unknown keys: {', '.join(sorted(unknown))}")
    name = check_name(str(data.get("name") or ""), "agent name")
    namespace = check_namespace(str(data.get("namespace") or DEFAULT_NAMESPACE), "agent namespace")
    template = data.get("template") or ""
    if not isinstance(template, str):
        raise errors.invalid(_TEMPLATE_RULE)
    check_template(template)
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
        check_egress_url(i, item["url"])
        for header, value in headers.items():
            if _CONTROL_BUT_TAB.search(value):
                # the value is a secret: the message names the header only
                raise errors.invalid(
                    f"egress[{i}].credentialHeaders: the value of {header[:64]!r} must not contain "
                    "control characters (CR, LF, ...)"
                )
        egress.append(EgressDestination(item["url"], dict(headers)))
    command = check_argv(data.get("command"), "command")
    args = check_argv(data.get("args"), "args")
    env = check_env(data.get("env"))
    return AgentSpec(namespace, name, template, tuple(egress), _description(data.get("description")),
                     _skills(data.get("skills")), command, args, env, check_busy_policy(data.get("busyPolicy")),
                     check_keep_warm(data.get("keepWarm")))


MAX_SKILLS = 32


def _text(value: Any, field: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit or _CONTROL_BUT_TAB.search(value.replace("\n", " ")):
        raise errors.invalid(f"{field} must be a text of at most {limit} characters without control characters")
    return value


def _description(value: Any) -> str:
    return _text(value, "description", 1000)


def _skills(value: Any) -> tuple[dict[str, Any], ...]:
    """The A2A skills of the card: a list of {id, name, description, tags, examples} (id required)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_SKILLS:
        raise errors.invalid(f"skills must be a list of at most {MAX_SKILLS} mappings with an id")
    skills = []
    for i, raw in enumerate(value):
        if not isinstance(raw, dict) or set(raw) - {"id", "name", "description", "tags", "examples"}:
            raise errors.invalid(f"skills[{i}] must be a mapping of id, name, description, tags, examples")
        skill: dict[str, Any] = {"id": _text(raw.get("id"), f"skills[{i}].id", 64)}
        if not skill["id"]:
            raise errors.invalid(f"skills[{i}].id is required")
        for key, limit in (("name", 200), ("description", 1000)):
            if raw.get(key) is not None:
                skill[key] = _text(raw.get(key), f"skills[{i}].{key}", limit)
        for key in ("tags", "examples"):
            items = raw.get(key) or []
            if not isinstance(items, list) or len(items) > 32:
                raise errors.invalid(f"skills[{i}].{key} must be a list of at most 32 texts")
            if items:
                skill[key] = [_text(x, f"skills[{i}].{key}", 500) for x in items]
        skills.append(skill)
    return tuple(skills)


def redact_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A stored spec as every reader sees it: each credential header value that is set becomes
    REDACTED (an empty one stays empty, so a reader knows whether a value is set). The same as
    sessionq.redact_agent_spec, which the store's reads apply already; the API applies this too."""
    if not isinstance(spec.get("egress"), list):
        return spec
    return {**spec, "egress": [_redact_destination(d) for d in spec["egress"]]}


def _redact_destination(d: Any) -> Any:
    if not isinstance(d, dict) or not isinstance(d.get("credentialHeaders"), dict):
        return d
    return {**d, "credentialHeaders": {k: REDACTED if v != "" else "" for k, v in d["credentialHeaders"].items()}}


def uses_redacted(spec: AgentSpec) -> bool:
    return any(v == REDACTED for d in spec.egress for v in d.credential_headers.values())


def keep_stored_credentials(spec: AgentSpec, stored: dict[str, Any] | None, agent: str) -> AgentSpec:
    """The spec with each REDACTED header value replaced by the stored value of the same header
    (names compared case-insensitively) on the same egress URL of the stored spec (the Agent's
    desired spec, None when there is no Agent). A marker without such a stored value is refused:
    a secret is kept only for the URL it was given for."""
    known: dict[tuple[str, str], str] = {}
    for d in (stored or {}).get("egress") or []:
        for k, v in (d.get("credentialHeaders") or {}).items():
            known[(d.get("url", ""), k.lower())] = v
    egress = []
    for i, dest in enumerate(spec.egress):
        headers = {}
        for k, v in dest.credential_headers.items():
            if v == REDACTED:
                if (dest.url, k.lower()) not in known:
                    raise errors.invalid(
                        f"egress[{i}].credentialHeaders: {k[:64]!r} is {REDACTED}, but agent {agent} has no "
                        f"stored value for it at this URL; give the real value"
                    )
                v = known[(dest.url, k.lower())]
            headers[k] = v
        egress.append(EgressDestination(dest.url, headers))
    return spec.with_egress(tuple(egress))


def compile_egress(spec: AgentSpec, cluster_domain: str = "cluster.local") -> list[dict[str, Any]]:
    """Compile the spec's HTTP(S) origins into the runtime's protocol-specific allow rules.

    Each origin keeps its scheme, DNS name and port; its credential headers ride on its own rule.
    Rejected, naming the entry: literal IP addresses, names that are not fully qualified, and two
    protocols on one host and port.
    """
    rules: dict[tuple[str, int], dict[str, Any]] = {}
    for i, dest in enumerate(spec.egress):
        check_egress_url(i, dest.url)  # before `where` repeats the URL
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


_KEEP_ATTEMPTS = 3  # an apply that keeps stored credentials re-reads them when another apply came in between


async def apply_spec(
    store: Store, spec: AgentSpec, caller: str, admin: bool, cluster_domain: str, mode: ApplyMode = ApplyMode.APPLY
) -> bool:
    """Validate, compile and apply a spec; True when a new revision was made. REDACTED header
    values keep the stored values (see keep_stored_credentials): they are read from the desired
    revision, and the procedure refuses the apply (SQ409) if that is no longer the desired one, in
    which case it is read again."""
    compile_egress(spec, cluster_domain)  # rejected here, before anything is read or any Actor exists
    for attempt in range(_KEEP_ATTEMPTS):
        base: UUID | None = None
        resolved = spec
        if uses_redacted(spec):
            stored: dict[str, Any] | None = None
            found = await store.stored_agent_spec(spec.namespace, spec.name)
            if found is not None:
                base, stored = found
            resolved = keep_stored_credentials(spec, stored, f"{spec.namespace}/{spec.name}")
        try:
            return await store.apply_agent(
                resolved.namespace, resolved.name, resolved.to_json(), resolved.spec_hash(), resolved.image,
                compile_egress(resolved, cluster_domain), caller, admin, base, mode,
            )
        except errors.SessionqError as e:
            if e.sqlstate != "SQ409" or base is None or attempt + 1 == _KEEP_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _is_partial_cluster_name(host: str, cluster_domain: str) -> bool:
    """In-cluster names must be complete: 'svc.namespace' or 'svc.namespace.svc' would be
    expanded by DNS search domains into a name the egress policy does not hold."""
    labels = host.split(".")
    if host.endswith("." + cluster_domain):
        return False
    return "svc" in labels or labels[-1] in ("local", "cluster")


def process_of(spec: dict[str, Any]) -> dict[str, Any]:
    """The command, args and env a stored revision spec declares (only those it sets)."""
    out: dict[str, Any] = {}
    for key in ("command", "args"):
        if spec.get(key):
            out[key] = [str(v) for v in spec[key]]
    if spec.get("env"):
        out["env"] = {str(k): str(v) for k, v in spec["env"].items()}
    return out


async def prepare_revision(store: Store, runtime: Substrate, revision_id: UUID) -> RevisionState:
    """Create the revision's actor template (once; a retry adopts the template it already made)
    and record the outcome. Returns the revision's final state."""
    rev = await store.get_revision(revision_id)
    if rev.state != RevisionState.PENDING:
        return rev.state
    try:
        try:
            template = await runtime.get_actor_template(rev.template_atespace, rev.template_name)
        except SubstrateError as e:
            if e.code != Code.NOT_FOUND:
                raise
            try:
                template = await runtime.create_actor_template(
                    rev.template_atespace, rev.template_name, rev.image, **process_of(rev.spec)
                )
            except SubstrateError as again:
                if again.code != Code.ALREADY_EXISTS:
                    raise
                # a concurrent preparation of this revision made it: the template is this revision's own
                template = await runtime.get_actor_template(rev.template_atespace, rev.template_name)
    except SubstrateError as e:
        if e.code in (Code.INVALID_ARGUMENT, Code.FAILED_PRECONDITION):
            log.warning("revision %s failed: %s", revision_id, e.message)
            await store.finish_revision(revision_id, None, f"actor template {rev.template_name}: {e.message}")
            return RevisionState.FAILED
        raise  # transient: the job retries
    await store.finish_revision(revision_id, template.uid, None)
    return RevisionState.READY
