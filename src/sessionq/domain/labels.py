"""Labels and label selectors of Sessions (docs/fleet.md).

A selector is Kubernetes' syntax: requirements separated by commas, each `key`, `!key`,
`key=value` (or `==`), `key!=value`, `key in (a,b)` or `key notin (a,b)`. `parse_selector` turns it
into the requirement list of a fleet filter (sessionq.session_filter_sql in schema/22_fleet.sql),
checking keys and values by the same rules as stored labels (sessionq.check_labels).

The label rules' authority is the database's (sessionq.label_key_valid, label_value_valid,
check_labels: every stored label passes them); `key_valid` and `value_valid` are the API's copy, so
bad input is answered without a round trip, and tests/fleet/test_label_rules.py checks that the
copy answers as the authority does.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from sessionq import errors

NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_SELECTOR = 4096  # characters of a selector
MAX_REQUIREMENTS = 32
MAX_VALUES = 100  # values of one in / notin set


class SelectorOp(enum.StrEnum):
    """A requirement's operator, as session_filter_sql takes it (equality is `in` with one value)."""

    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    NOT_EXISTS = "notexists"


@dataclass(frozen=True)
class Requirement:
    key: str
    op: SelectorOp
    values: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "op": self.op.value, "values": list(self.values)}


def key_valid(key: str) -> bool:
    """Kubernetes' label key rule (sessionq.label_key_valid)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not PREFIX.fullmatch(prefix) or "/" in prefix):
        return False
    return len(name) <= 63 and NAME.fullmatch(name) is not None


def value_valid(value: str) -> bool:
    """Kubernetes' label value rule (sessionq.label_value_valid)."""
    return value == "" or (len(value) <= 63 and NAME.fullmatch(value) is not None)


def _key(key: str) -> str:
    if not key_valid(key):
        raise errors.invalid(f"selector: label key {errors.clip(key, 80)!r} is not valid")
    return key


def _value(value: str) -> str:
    if not value_valid(value):
        raise errors.invalid(f"selector: label value {errors.clip(value, 80)!r} is not valid")
    return value


def _split(selector: str) -> list[str]:
    """The requirements of a selector: split at commas outside parentheses."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise errors.invalid("selector: unbalanced parentheses")
        elif ch == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    if depth != 0:
        raise errors.invalid("selector: unbalanced parentheses")
    parts.append(selector[start:])
    return [p.strip() for p in parts]


SET = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")
COMPARE = re.compile(r"^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$")


def parse_selector(selector: str) -> list[Requirement]:
    """The requirements of a label selector (empty: none); INVALID_ARGUMENT with a short message
    for bad syntax or a key or value that breaks the label rules."""
    if len(selector) > MAX_SELECTOR:
        raise errors.invalid(f"selector must be at most {MAX_SELECTOR} characters")
    if not selector.strip():
        return []
    out: list[Requirement] = []
    for part in _split(selector):
        if not part:
            raise errors.invalid("selector: an empty requirement (two commas, or a trailing one)")
        if m := SET.match(part):
            values = tuple(_value(v.strip()) for v in m.group(3).split(","))
            if len(values) > MAX_VALUES:
                raise errors.invalid(f"selector: a set has at most {MAX_VALUES} values")
            op = SelectorOp.IN if m.group(2) == "in" else SelectorOp.NOT_IN
            out.append(Requirement(_key(m.group(1)), op, values))
        elif m := COMPARE.match(part):
            op = SelectorOp.NOT_IN if m.group(2) == "!=" else SelectorOp.IN
            out.append(Requirement(_key(m.group(1)), op, (_value(m.group(3)),)))
        elif part.startswith("!"):
            out.append(Requirement(_key(part[1:].strip()), SelectorOp.NOT_EXISTS))
        else:
            out.append(Requirement(_key(part), SelectorOp.EXISTS))
        if len(out) > MAX_REQUIREMENTS:
            raise errors.invalid(f"selector: at most {MAX_REQUIREMENTS} requirements")
    return out


def parse_assignments(pairs: list[str]) -> tuple[dict[str, str], list[str]]:
    """kubectl's label arguments: KEY=VALUE sets, KEY- removes (for the CLI)."""
    sets: dict[str, str] = {}
    removes: list[str] = []
    for pair in pairs:
        if "=" in pair:
            key, _, value = pair.partition("=")
            sets[key] = value
        elif pair.endswith("-"):
            removes.append(pair[:-1])
        else:
            raise errors.invalid(f"label {errors.clip(pair, 80)!r}: expected KEY=VALUE, or KEY- to remove it")
    return sets, removes


def matches(labels: dict[str, str], requirements: list[Requirement]) -> bool:
    """Whether a label map satisfies every requirement: the rule session_filter_sql applies, in
    Python (the tests' brute force and the console's preview)."""
    for r in requirements:
        present = r.key in labels
        if (r.op == SelectorOp.EXISTS and not present) or (r.op == SelectorOp.NOT_EXISTS and present):
            return False
        if r.op == SelectorOp.IN and not (present and labels[r.key] in r.values):
            return False
        if r.op == SelectorOp.NOT_IN and present and labels[r.key] in r.values:
            return False
    return True
