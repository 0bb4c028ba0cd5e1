"""Inventory: paginated, authorization-filtered listings of the runtime's Actors and Workers.

`Inventory` pages over the runtime's list calls (`RuntimeReader`) (clauses INV-1..INV-7):

- Rows are filtered by the request scope (an atespace, or every watched one), the watched
  atespaces and the caller's authorization BEFORE they fill a public page; one more authorized
  row is looked up ahead and a continuation is issued only when it exists.
- The public page token (`CursorCodec`) holds the last returned identity and the request scope:
  versioned, HMAC-SHA256 signed with a server secret, never a runtime token. It grants nothing:
  authorization is evaluated anew on every page (the injected ``authorize`` callable, called once
  per runtime batch). A continuation resumes right after the boundary even when that row is gone.
  Watched atespaces are traversed in sorted order.
- Each request has a budget: `MAX_ROWS` fetched rows and `MAX_PAGES` runtime pages across
  atespaces, and a `TIMEOUT` deadline (or the caller's earlier one). The first runtime batch asks
  ``limit + 1`` rows, later ones up to `LATER_BATCH`, capped by what is left of the row budget.
  Every fetched row counts (denied rows, lookahead, unused rows of a batch). Exhaustion raises
  SQ429 (RESOURCE_EXHAUSTED) or SQ504 (DEADLINE_EXCEEDED) and returns no partial page.
- Runtime failures are logged with their details; the caller gets a generic UNAVAILABLE. A
  runtime token that does not advance (equal to one already used in this scan) ends the scan as
  an UNAVAILABLE failure.

The translation of an identity into the runtime's keyset token format (Substrate v0.7.0-alpha1)
lives only in `runtime_token` / `parse_runtime_token`; their contract tests must be re-checked when
the runtime is upgraded.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sessionq import errors
from sessionq.errors import SessionqError
from sessionq.runtime.base import Actor, Page, RuntimeReader, Worker

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ROWS = 10_000  # fetched runtime rows per public request
MAX_PAGES = 100  # runtime list calls per public request
TIMEOUT = 10.0  # seconds per public request (or the caller's earlier deadline)
LATER_BATCH = 1_000  # page size of every runtime batch after the first
RUNTIME_TOKEN_VERSION = 1
CURSOR_VERSION = "i1"

ActorKey = tuple[str, str]  # (atespace, name)
ActorAuthorizer = Callable[[Sequence[Actor]], Awaitable[AbstractSet[ActorKey]]]
WorkerAuthorizer = Callable[[Sequence[Worker]], Awaitable[AbstractSet[str]]]

UNAVAILABLE_MESSAGE = "the runtime inventory is unavailable; retry the request"


# -- the runtime's keyset token (Substrate v0.7.0-alpha1) ----------------------------------------


def runtime_token(name: str, atespace: str | None = None) -> str:
    """The runtime's page token resuming strictly after an identity: urlsafe base64 without
    padding of compact JSON ``{"v":1,"atespace":..,"name":..}`` for a global ListActors,
    ``{"v":1,"name":..}`` for ListActors within one atespace and for ListWorkers."""
    payload: dict[str, Any] = {"v": RUNTIME_TOKEN_VERSION}
    if atespace is not None:
        payload["atespace"] = atespace
    payload["name"] = name
    raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def parse_runtime_token(token: str, *, with_atespace: bool) -> tuple[str | None, str]:
    """Inverse of `runtime_token`: (atespace or None, name); ValueError when malformed."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"runtime token {errors.clip(token)!r} is not base64 JSON") from e
    expected = {"v", "name", "atespace"} if with_atespace else {"v", "name"}
    if not isinstance(payload, dict) or set(payload) != expected or payload["v"] != RUNTIME_TOKEN_VERSION:
        raise ValueError(f"runtime token {errors.clip(token)!r} has another format")
    name, atespace = payload["name"], payload.get("atespace")
    if not isinstance(name, str) or (with_atespace and not isinstance(atespace, str)):
        raise ValueError(f"runtime token {errors.clip(token)!r} has another format")
    return atespace, name


# -- the public cursor ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cursor:
    """Where a public listing resumes: after the last returned identity, within the same scope."""

    kind: str  # "actors" | "workers"
    scope: str  # the request's atespace; "" = every watched atespace
    atespace: str  # last returned identity: the Actor's atespace ("" for workers)
    name: str  # last returned identity: the Actor's or the Worker's name


class CursorCodec:
    """Opaque, versioned, tamper-evident page tokens:
    ``i1.<base64url(JSON)>.<base64url(HMAC-SHA256(secret, "i1." + base64url(JSON)))>``."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the cursor secret must be at least 16 bytes")
        # a key of its own, derived from the server secret
        self._key = hmac.new(secret, b"sessionq inventory cursor", hashlib.sha256).digest()

    def _mac(self, signed: str) -> str:
        digest = hmac.new(self._key, signed.encode("ascii"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def encode(self, cursor: Cursor) -> str:
        payload = {"k": cursor.kind, "s": cursor.scope, "a": cursor.atespace, "n": cursor.name}
        raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        signed = f"{CURSOR_VERSION}.{base64.urlsafe_b64encode(raw).rstrip(b'=').decode('ascii')}"
        return f"{signed}.{self._mac(signed)}"

    def decode(self, token: str) -> Cursor:
        bad = errors.invalid("page_token is not valid")
        version, _, rest = token.partition(".")
        body, _, mac = rest.partition(".")
        if version != CURSOR_VERSION or not body or not mac:
            raise bad
        try:
            signed = f"{version}.{body}"
            if not hmac.compare_digest(self._mac(signed).encode("ascii"), mac.encode("ascii")):
                raise bad
            payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8"))
        except (UnicodeEncodeError, binascii.Error, ValueError, UnicodeDecodeError):
            raise bad from None
        if not isinstance(payload, dict) or set(payload) != {"k", "s", "a", "n"}:
            raise bad
        if not all(isinstance(v, str) for v in payload.values()):
            raise bad
        return Cursor(payload["k"], payload["s"], payload["a"], payload["n"])


# -- the engine ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InventoryPage(Generic[T]):
    items: list[T]
    next_page_token: str  # empty: last page


@dataclass
class _Scan(Generic[T]):
    """One public request: its budget, what it fetched and the authorized rows it kept."""

    limit: int
    max_rows: int
    max_pages: int
    what: str
    rows: int = 0
    pages: int = 0
    items: list[T] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return len(self.items) > self.limit  # the page plus one row of lookahead

    def batch_size(self) -> int:
        if self.pages >= self.max_pages:
            raise SessionqError(
                "SQ429",
                f"listing {self.what} needed more than {self.max_pages} runtime pages; "
                "narrow the request (an atespace or a smaller limit)",
            )
        left = self.max_rows - self.rows
        if left <= 0:
            raise SessionqError(
                "SQ429",
                f"listing {self.what} needed more than {self.max_rows} runtime rows; "
                "narrow the request (an atespace or a smaller limit)",
            )
        wanted = self.limit + 1 if self.pages == 0 else LATER_BATCH
        return min(wanted, left)


def _atespaces(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({v.strip() for v in values if v and v.strip()}))


class Inventory:
    """The listing engine over one runtime. `watched_atespaces` empty means every atespace.

    The budgets are parameters for tests; production uses the defaults."""

    def __init__(
        self,
        runtime: RuntimeReader,
        *,
        cursor_secret: bytes,
        watched_atespaces: Iterable[str] = (),
        max_rows: int = MAX_ROWS,
        max_pages: int = MAX_PAGES,
        timeout: float = TIMEOUT,
    ) -> None:
        self.runtime = runtime
        self.codec = CursorCodec(cursor_secret)
        self.watched = _atespaces(watched_atespaces)
        self.max_rows = max_rows
        self.max_pages = max_pages
        self.timeout = timeout

    # -- public listings ----------------------------------------------------------------------

    async def list_actors(
        self,
        *,
        authorize: ActorAuthorizer,
        atespace: str = "",
        limit: int = 50,
        page_token: str = "",
        time_remaining: float | None = None,
    ) -> InventoryPage[Actor]:
        """Actors in `atespace` ("" = every watched atespace) that `authorize` allows, ordered by
        (atespace, name). `time_remaining`: seconds left before the caller's deadline, if any."""
        self._check_limit(limit)
        boundary: ActorKey | None = None
        if page_token:
            cursor = self._cursor(page_token, "actors", atespace)
            if atespace and cursor.atespace != atespace:
                raise errors.invalid("page_token belongs to another listing")
            boundary = (cursor.atespace, cursor.name)
        scan: _Scan[Actor] = _Scan(limit, self.max_rows, self.max_pages, "actors")
        floor = boundary

        def in_scope(actor: Actor) -> bool:
            if atespace and actor.atespace != atespace:
                return False
            return not self.watched or actor.atespace in self.watched

        async def accept(rows: Sequence[Actor]) -> list[Actor]:
            nonlocal floor
            kept = []
            for row in rows:
                key = (row.atespace, row.name)
                if floor is not None and key <= floor:
                    continue  # at or before the boundary, or out of order: never repeated
                floor = key
                if in_scope(row):
                    kept.append(row)
            if not kept:
                return []
            allowed = await authorize(kept)
            return [r for r in kept if (r.atespace, r.name) in allowed]

        def in_atespace(name: str) -> Callable[[int, str], Awaitable[Page[Actor]]]:
            return functools.partial(self.runtime.list_actors, name)

        async def body() -> None:
            if atespace:
                if self.watched and atespace not in self.watched:
                    return  # not watched: nothing to list
                start = runtime_token(boundary[1]) if boundary else ""
                await self._walk(scan, in_atespace(atespace), start, accept)
            elif not self.watched:
                start = runtime_token(boundary[1], boundary[0]) if boundary else ""
                everywhere = functools.partial(self.runtime.list_actors, None)
                await self._walk(scan, everywhere, start, accept)
            else:
                for name in self.watched:  # sorted
                    if boundary is not None and name < boundary[0]:
                        continue
                    start = runtime_token(boundary[1]) if boundary is not None and name == boundary[0] else ""
                    if await self._walk(scan, in_atespace(name), start, accept):
                        break

        await self._bounded(body(), time_remaining, "actors")
        token = ""
        if scan.full:
            last = scan.items[limit - 1]
            token = self.codec.encode(Cursor("actors", atespace, last.atespace, last.name))
        return InventoryPage(scan.items[:limit], token)

    async def list_workers(
        self,
        *,
        authorize: WorkerAuthorizer,
        atespace: str = "",
        limit: int = 50,
        page_token: str = "",
        time_remaining: float | None = None,
    ) -> InventoryPage[Worker]:
        """Workers (globally unique names, in name order) whose own atespace is `atespace` ("" =
        any watched atespace) and that `authorize` allows."""
        self._check_limit(limit)
        boundary: str | None = None
        if page_token:
            boundary = self._cursor(page_token, "workers", atespace).name
        scan: _Scan[Worker] = _Scan(limit, self.max_rows, self.max_pages, "workers")
        floor = boundary

        def in_scope(worker: Worker) -> bool:
            if atespace and worker.atespace != atespace:
                return False
            return not self.watched or worker.atespace in self.watched

        async def accept(rows: Sequence[Worker]) -> list[Worker]:
            nonlocal floor
            kept = []
            for row in rows:
                if floor is not None and row.name <= floor:
                    continue
                floor = row.name
                if in_scope(row):
                    kept.append(row)
            if not kept:
                return []
            allowed = await authorize(kept)
            return [r for r in kept if r.name in allowed]

        async def body() -> None:
            if atespace and self.watched and atespace not in self.watched:
                return
            start = runtime_token(boundary) if boundary is not None else ""
            await self._walk(scan, self.runtime.list_workers, start, accept)

        await self._bounded(body(), time_remaining, "workers")
        token = ""
        if scan.full:
            token = self.codec.encode(Cursor("workers", atespace, "", scan.items[limit - 1].name))
        return InventoryPage(scan.items[:limit], token)

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _check_limit(limit: int) -> None:
        if not 1 <= limit < LATER_BATCH:
            raise errors.invalid(f"limit must be between 1 and {LATER_BATCH - 1} (got {limit})")

    def _cursor(self, page_token: str, kind: str, scope: str) -> Cursor:
        cursor = self.codec.decode(page_token)
        if cursor.kind != kind or cursor.scope != scope:
            raise errors.invalid("page_token belongs to another listing")
        return cursor

    async def _bounded(self, work: Awaitable[None], time_remaining: float | None, what: str) -> None:
        """Run one request's scan under its deadline: ours, or the caller's earlier one."""
        seconds = self.timeout if time_remaining is None else max(0.0, min(self.timeout, time_remaining))
        deadline = asyncio.timeout(seconds)
        try:
            async with deadline:
                await work
        except TimeoutError:
            if deadline.expired():
                raise SessionqError(
                    "SQ504", f"listing {what} did not finish within {seconds:g}s; narrow the request"
                ) from None
            raise

    async def _walk(
        self,
        scan: _Scan[T],
        fetch: Callable[[int, str], Awaitable[Page[T]]],
        token: str,
        accept: Callable[[Sequence[T]], Awaitable[list[T]]],
    ) -> bool:
        """Read one runtime listing from `token` until the page plus lookahead is full (True) or
        the listing ends (False)."""
        seen = {token} if token else set()
        while True:
            size = scan.batch_size()
            try:
                page = await fetch(size, token)
            except Exception as e:  # SubstrateError or a transport failure: details stay here
                log.warning(
                    "inventory: listing %s from the runtime failed (page token %r): %s", scan.what, token, e
                )
                raise errors.unavailable(UNAVAILABLE_MESSAGE) from None
            scan.pages += 1
            scan.rows += len(page.items)
            if page.items:
                scan.items.extend(await accept(page.items))
                if scan.full:
                    return True
            following = page.next_page_token
            if not following:
                return False
            if following in seen:
                log.error(
                    "inventory: the runtime's %s page token did not advance (%r after %r with %d rows);"
                    " scan failed",
                    scan.what, following, token, len(page.items),
                )
                raise errors.unavailable(UNAVAILABLE_MESSAGE)
            seen.add(following)
            token = following


__all__ = [
    "LATER_BATCH",
    "MAX_PAGES",
    "MAX_ROWS",
    "TIMEOUT",
    "UNAVAILABLE_MESSAGE",
    "ActorAuthorizer",
    "ActorKey",
    "Cursor",
    "CursorCodec",
    "Inventory",
    "InventoryPage",
    "WorkerAuthorizer",
    "parse_runtime_token",
    "runtime_token",
]
