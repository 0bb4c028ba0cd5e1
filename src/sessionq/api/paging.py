"""Pages of a listing: the page size, and page tokens (opaque to clients, versioned)."""

from __future__ import annotations

import base64
from typing import Any
from uuid import UUID

from sessionq import errors
from sessionq.api.fields import parse_uuid

DEFAULT_PAGE = 50
MAX_PAGE = 100


def page_limit(limit: int) -> int:
    """The rows of a page: 0 is the default. PageRequest.limit's rule (0..100) is checked before
    the servicer runs; the range is checked here too for the A2A and inventory pages."""
    if limit < 0 or limit > MAX_PAGE:
        raise errors.invalid(f"page.limit must be between 0 and {MAX_PAGE} (got {limit})")
    return limit or DEFAULT_PAGE


def encode_token(*parts: str) -> str:
    raw = "\x1f".join(("v1", *parts)).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, count: int) -> list[str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise errors.invalid("page_token is not valid") from None
    parts = raw.split("\x1f")
    if len(parts) != count + 1 or parts[0] != "v1":
        raise errors.invalid("page_token is not valid")
    return parts[1:]


def after_id(page: Any) -> UUID | None:
    """Where an id-ordered listing resumes: after the id its page token names (None: the start)."""
    return parse_uuid(decode_token(page.page_token, 1)[0], "page_token") if page.page_token else None


def next_id_token(rows: list[Any], limit: int) -> str:
    """The continuation of an id-ordered page read with limit + 1 rows: only when the look-ahead
    row exists, naming the last returned id."""
    return encode_token(str(rows[limit - 1].id)) if len(rows) > limit else ""
