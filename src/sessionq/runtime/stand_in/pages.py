"""Keyset pages of the stand-in runtimes: page tokens, page sizes, and the pages of Actors and
Workers read from their tables."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from typing import Any

from sessionq.runtime.base import Actor, Code, Page, SubstrateError, Tag, Worker

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "actor_page",
    "clamp_page_size",
    "decode_actor_token",
    "encode_actor_token",
    "tag_page",
    "worker_boundary",
    "worker_page",
]

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


def encode_actor_token(atespace: str | None, name: str) -> str:
    """Keyset token resuming strictly after (atespace, name); atespace None for a listing within
    one atespace and for workers: urlsafe base64 (no padding) of compact JSON."""
    payload: dict[str, Any] = {"v": 1}
    if atespace is not None:
        payload["atespace"] = atespace
    payload["name"] = name
    raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


async def actor_page(
    cur: Any,
    select: str,
    atespace: str | None,
    boundary: tuple[str | None, str] | None,
    size: int,
    snapshots_of: Callable[[Any, list[Any]], Awaitable[dict[Any, Any]]],
    to_actor: Callable[[Any, Any], Actor],
) -> Page[Actor]:
    """One keyset page of Actors after `boundary` (a decoded page token), in one atespace or, with
    atespace None, across all of them: `select` reads the actor rows (alias a), `snapshots_of` their
    snapshots in one query, `to_actor` builds each."""
    if atespace is None:
        b_atespace, b_name = boundary if boundary is not None else ("", "")
        await cur.execute(select + " WHERE (a.atespace, a.name) > (%s, %s) ORDER BY a.atespace, a.name LIMIT %s",
                          (b_atespace, b_name, size + 1))
    else:
        b_name = boundary[1] if boundary is not None else ""
        await cur.execute(select + " WHERE a.atespace = %s AND a.name > %s ORDER BY a.name LIMIT %s",
                          (atespace, b_name, size + 1))
    rows = await cur.fetchall()
    more = len(rows) > size
    rows = rows[:size]
    snaps = await snapshots_of(cur, [r["uid"] for r in rows])
    items = [to_actor(r, snaps[r["uid"]]) for r in rows]
    token = encode_actor_token(items[-1].atespace if atespace is None else None, items[-1].name) if more else ""
    return Page(items=items, next_page_token=token)


async def tag_page(
    cur: Any, table: str, atespace: str | None, boundary: tuple[str | None, str] | None, size: int,
    to_tag: Callable[[Any], Tag],
) -> Page[Tag]:
    """One keyset page of the tags of `table` after `boundary`, in one atespace or, with atespace
    None, across all of them; the tokens are the Actors' (encode_actor_token)."""
    if atespace is None:
        b_atespace, b_name = boundary if boundary is not None else ("", "")
        await cur.execute(f"SELECT * FROM {table} t WHERE (t.atespace, t.name) > (%s, %s)"
                          " ORDER BY t.atespace, t.name LIMIT %s", (b_atespace, b_name, size + 1))
    else:
        b_name = boundary[1] if boundary is not None else ""
        await cur.execute(f"SELECT * FROM {table} t WHERE t.atespace = %s AND t.name > %s ORDER BY t.name LIMIT %s",
                          (atespace, b_name, size + 1))
    rows = await cur.fetchall()
    more = len(rows) > size
    items = [to_tag(r) for r in rows[:size]]
    token = encode_actor_token(items[-1].atespace if atespace is None else None, items[-1].name) if more else ""
    return Page(items=items, next_page_token=token)


def decode_actor_token(token: str, *, global_listing: bool) -> tuple[str | None, str]:
    """Inverse of `encode_actor_token`: (atespace or None, name). `global_listing` says whether the
    token must carry an atespace (a ListActors over all atespaces). Raises INVALID_ARGUMENT."""

    def bad(why: str) -> SubstrateError:
        return SubstrateError(Code.INVALID_ARGUMENT, f"invalid page token {token!r}: {why}")

    if not token or not isinstance(token, str):
        raise bad("empty")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise bad("not base64 JSON") from exc
    if not isinstance(payload, dict) or payload.get("v") != 1:
        raise bad("unsupported version")
    name = payload.get("name")
    if not isinstance(name, str):
        raise bad("missing name")
    expected = {"v", "name", "atespace"} if global_listing else {"v", "name"}
    if set(payload) != expected:
        known = set(payload) <= {"v", "name", "atespace"}
        raise bad("wrong keys for this listing" if known else "unknown keys")
    if global_listing:
        atespace = payload["atespace"]
        if not isinstance(atespace, str):
            raise bad("atespace is not a string")
        return atespace, name
    return None, name


async def worker_page(
    cur: Any, query: str, params: tuple[Any, ...], size: int, to_worker: Callable[[Any], Worker]
) -> Page[Worker]:
    """One keyset page of Workers: `query` selects the worker rows after the boundary in name
    order, its last parameter the LIMIT (`size` + 1, added here); `to_worker` builds each."""
    await cur.execute(query, (*params, size + 1))
    rows = await cur.fetchall()
    more = len(rows) > size
    items = [to_worker(r) for r in rows[:size]]
    return Page(items=items, next_page_token=encode_actor_token(None, items[-1].name) if more else "")


def worker_boundary(page_token: str) -> str:
    """The name a Workers page resumes after ("" for the first page)."""
    return decode_actor_token(page_token, global_listing=False)[1] if page_token else ""


def clamp_page_size(requested: int) -> int:
    if requested < 0:
        raise SubstrateError(Code.INVALID_ARGUMENT, f"negative page_size {requested}")
    if requested == 0:
        return DEFAULT_PAGE_SIZE
    return min(requested, MAX_PAGE_SIZE)
