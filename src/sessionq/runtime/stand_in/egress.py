"""The canonical stored form of an egress allow-set, as both stand-in runtimes keep it (a JSON list
in their ``egress_policies.rules``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sessionq.runtime.base import Code, EgressRule, SubstrateError

__all__ = ["EGRESS_PROTOCOLS", "canonical_rules", "rule_collection"]

EGRESS_PROTOCOLS = frozenset({"http", "https", "tls_passthrough"})


def _rule_to_json(rule: EgressRule) -> dict[str, Any]:
    return {
        "protocol": rule.protocol,
        "hostname": rule.hostname,
        "port": rule.port,
        "credential_headers": dict(sorted(rule.credential_headers.items())),
    }


def _rule_from_json(data: dict[str, Any]) -> EgressRule:
    return EgressRule(
        protocol=data["protocol"],
        hostname=data["hostname"],
        port=int(data["port"]),
        credential_headers=dict(data.get("credential_headers") or {}),
    )


def _rule_sort_key(rule: dict[str, Any]) -> tuple[str, str, int, str]:
    return (rule["protocol"], rule["hostname"], rule["port"], json.dumps(rule["credential_headers"]))


def canonical_rules(rules: Iterable[EgressRule], *, actor: str) -> list[dict[str, Any]]:
    """Validate and de-duplicate an allow-set; conflicting rules for one host and port are rejected."""
    seen: dict[tuple[str, int], dict[str, Any]] = {}
    for rule in rules:
        if not isinstance(rule, EgressRule):
            raise SubstrateError(Code.INVALID_ARGUMENT, f"egress policy of actor {actor}: not an EgressRule")
        if rule.protocol not in EGRESS_PROTOCOLS:
            raise SubstrateError(
                Code.INVALID_ARGUMENT,
                f"egress policy of actor {actor}: unsupported protocol {rule.protocol!r}",
            )
        if not rule.hostname or not isinstance(rule.port, int) or not 0 < rule.port < 65536:
            raise SubstrateError(
                Code.INVALID_ARGUMENT,
                f"egress policy of actor {actor}: invalid destination {rule.hostname!r}:{rule.port!r}",
            )
        data = _rule_to_json(rule)
        key = (rule.hostname.lower(), rule.port)
        if key in seen and seen[key] != data:
            raise SubstrateError(
                Code.INVALID_ARGUMENT,
                f"egress policy of actor {actor}: conflicting rules for {rule.hostname}:{rule.port}",
            )
        seen[key] = data
    return sorted(seen.values(), key=_rule_sort_key)


def rule_collection(data: list[dict[str, Any]]) -> frozenset[EgressRule] | tuple[EgressRule, ...]:
    rules = [_rule_from_json(d) for d in data]
    try:
        return frozenset(rules)
    except TypeError:
        # EgressRule is a frozen dataclass holding a dict (credential_headers), so it is unhashable
        # and cannot go into a frozenset; fall back to a tuple in canonical order.
        return tuple(rules)
