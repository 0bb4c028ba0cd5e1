"""Request and response fields: the checks the protos' rules cannot express (api/validation.py
enforces those), and the conversions every servicer uses."""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime
from uuid import UUID

from google.protobuf.timestamp_pb2 import Timestamp

from sessionq import errors


def parse_uuid(value: str, field: str) -> UUID:
    """A UUID field as a UUID. The request fields that carry one have a string.uuid rule
    (api/validation.py), so this only converts them; page tokens and the A2A ids are checked here."""
    if not value:
        raise errors.invalid(f"{field} is required")
    try:
        return UUID(value)
    except ValueError:
        raise errors.invalid(f"{field} {errors.clip(value)!r} is not a valid UUID") from None


def check_request_id(value: str, field: str = "request_id") -> str:
    """Its length (1-128) is a buf.validate rule of every request that has one; control characters
    are sessionq's own rule, which the protos do not express (a request id is quoted in messages,
    logs and operator views)."""
    if has_control(value):
        raise errors.invalid(f"{field} must not contain control characters")
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def has_control(value: str) -> bool:
    """Whether the text holds a control character (C0, DEL or C1)."""
    return bool(_CONTROL.search(value)) or any(unicodedata.category(c) == "Cc" for c in value)


def check_display_name(value: str, field: str = "name") -> str:
    if len(value) > 200:
        raise errors.invalid(f"{field} must be at most 200 characters (got {len(value)})")
    if value != value.strip():
        raise errors.invalid(f"{field} must not start or end with white space")
    if has_control(value):
        raise errors.invalid(f"{field} must not contain control characters")
    return value


def ts(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    t = Timestamp()
    t.FromDatetime(value)
    return t
