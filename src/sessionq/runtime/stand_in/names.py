"""The name rule of the stand-in runtimes and their template references (docs/runtime.md, "Names")."""

from __future__ import annotations

from sessionq.runtime.base import Code, SubstrateError

__all__ = ["NAME_MAX_LENGTH", "require_name", "require_ref", "split_template"]

# the longest name: a DNS label's bound, which the wire gives every atespace and resource name
# (shared/spec/substrate-wire.md, "short-name")
NAME_MAX_LENGTH = 63


def require_name(kind: str, value: object) -> None:
    """The name rule every runtime applies to an atespace and to the name of an Actor, a template or
    a tag it is asked to create (docs/runtime.md, "Names"): 1 to NAME_MAX_LENGTH characters, no "/",
    no control character (NUL among them), neither "." nor "..". Raises INVALID_ARGUMENT; the
    message quotes at most the name's first characters."""
    if not isinstance(value, str):
        raise SubstrateError(Code.INVALID_ARGUMENT, f"invalid {kind}: not a string")
    if not value or len(value) > NAME_MAX_LENGTH:
        shown = value if len(value) <= NAME_MAX_LENGTH else value[:NAME_MAX_LENGTH] + "..."
        raise SubstrateError(
            Code.INVALID_ARGUMENT, f"invalid {kind} {shown!r}: 1 to {NAME_MAX_LENGTH} characters ({len(value)})"
        )
    if value in (".", "..") or "/" in value or any(c < " " or c == "\x7f" for c in value):
        raise SubstrateError(
            Code.INVALID_ARGUMENT, f"invalid {kind} {value!r}: no '/' or control character, not '.' or '..'"
        )


def require_ref(kind: str, atespace: object, name: object) -> None:
    """The name rule applied to what a call looks up (an Actor, a template, a tag: `kind`) by its
    atespace and name: a name the rule refuses names nothing that could exist, and is refused with
    INVALID_ARGUMENT as a real Substrate refuses a name that is no DNS label, before any query
    (PostgreSQL text cannot hold a NUL)."""
    require_name("atespace", atespace)
    require_name(f"{kind} name", name)


def split_template(template: str) -> tuple[str, str]:
    """A template reference "<atespace>/<name>" as (atespace, name), each under the name rule;
    INVALID_ARGUMENT otherwise."""
    atespace, sep, name = template.partition("/")
    if not sep or not atespace or not name or "/" in name:
        shown = template if len(template) <= 2 * NAME_MAX_LENGTH else template[: 2 * NAME_MAX_LENGTH] + "..."
        raise SubstrateError(Code.INVALID_ARGUMENT, f"template must be '<atespace>/<name>', got {shown!r}")
    require_ref("template", atespace, name)
    return atespace, name
