"""The inventory engine (sessionq.domain.inventory) over the simulated runtime: INV-1..INV-7."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

from sessionq.domain.inventory import (
    LATER_BATCH,
    MAX_PAGES,
    MAX_ROWS,
    Cursor,
    CursorCodec,
    Inventory,
    parse_runtime_token,
    runtime_token,
)
from sessionq.errors import SessionqError
from sessionq.runtime.base import Actor, Code, Page, Worker
from sessionq.runtime.simulator import decode_actor_token

SECRET = b"inventory-test-secret-0123456789"


# -- helpers --------------------------------------------------------------------------------------


async def seed(database_url: str, counts: dict[str, int]) -> None:
    """Insert counts[atespace] suspended Actors named actor-00001.. straight into the simulator."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for atespace, n in counts.items():
            await conn.execute(
                "INSERT INTO substrate_sim.actors (atespace, name, uid, template, state)"
                " SELECT %s, 'actor-' || lpad(g::text, 5, '0'), gen_random_uuid()::text, %s,"
                " 'ACTOR_STATE_SUSPENDED' FROM generate_series(1, %s) g",
                (atespace, f"{atespace}/tpl", n),
            )


async def delete_actors(database_url: str, keys: Sequence[tuple[str, str]]) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for atespace, name in keys:
            await conn.execute(
                "DELETE FROM substrate_sim.actors WHERE atespace = %s AND name = %s", (atespace, name)
            )


def number(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


class Authz:
    """A sparse authorization: Actors whose number is a multiple of `every` (per atespace
    restriction optional). Records the batch sizes it was asked about."""

    def __init__(self, every: int = 1, atespaces: set[str] | None = None, deny_all: bool = False) -> None:
        self.every = every
        self.atespaces = atespaces
        self.deny_all = deny_all
        self.batches: list[int] = []

    def allows(self, atespace: str, name: str) -> bool:
        if self.deny_all or (self.atespaces is not None and atespace not in self.atespaces):
            return False
        return number(name) % self.every == 0

    async def __call__(self, rows: Sequence[Actor]) -> set[tuple[str, str]]:
        self.batches.append(len(rows))
        return {(r.atespace, r.name) for r in rows if self.allows(r.atespace, r.name)}


class Recording:
    """The runtime, recording every list call (atespace, page_size, page_token)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[str | None, int, str]] = []

    async def list_actors(self, atespace: str | None, page_size: int, page_token: str) -> Page[Actor]:
        self.calls.append((atespace, page_size, page_token))
        return await self.inner.list_actors(atespace, page_size, page_token)

    async def list_workers(self, page_size: int, page_token: str) -> Page[Worker]:
        self.calls.append((None, page_size, page_token))
        return await self.inner.list_workers(page_size, page_token)

    @property
    def sizes(self) -> list[int]:
        return [c[1] for c in self.calls]


class EmptyEveryOther(Recording):
    """A runtime that answers every other list call with an empty page whose token still advances
    (to a position between the boundary and the next real name: names never contain U+0001)."""

    async def list_actors(self, atespace: str | None, page_size: int, page_token: str) -> Page[Actor]:
        self.calls.append((atespace, page_size, page_token))
        if len(self.calls) % 2 == 1:
            b_atespace, b_name = ("", "") if atespace is None else (None, "")
            if page_token:
                b_atespace, b_name = parse_runtime_token(page_token, with_atespace=atespace is None)
            return Page([], runtime_token(b_name + "\x01", b_atespace))
        return await self.inner.list_actors(atespace, page_size, page_token)


class Cycling(Recording):
    """A runtime whose tokens cycle A -> B -> A with no rows."""

    async def list_actors(self, atespace: str | None, page_size: int, page_token: str) -> Page[Actor]:
        self.calls.append((atespace, page_size, page_token))
        a, b = runtime_token("a", "x"), runtime_token("b", "x")
        return Page([], b if page_token == a else a)


class IgnoresScope(Recording):
    """A misbehaving runtime that slips rows of another atespace into a scoped listing."""

    async def list_actors(self, atespace: str | None, page_size: int, page_token: str) -> Page[Actor]:
        self.calls.append((atespace, page_size, page_token))
        page = await self.inner.list_actors(atespace, page_size, page_token)
        other = await self.inner.list_actors("team-a", 3, "")
        return Page(other.items + page.items, page.next_page_token)


class EndlessEmpty(Recording):
    """A runtime that only ever answers empty pages, with tokens that do advance."""

    async def list_actors(self, atespace: str | None, page_size: int, page_token: str) -> Page[Actor]:
        self.calls.append((atespace, page_size, page_token))
        return Page([], runtime_token(f"pos-{len(self.calls):06d}", None if atespace else ""))


def engine(runtime: Any, **kw: Any) -> Inventory:
    return Inventory(runtime, cursor_secret=SECRET, **kw)


async def all_pages(inv: Inventory, authz: Any, limit: int, atespace: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    token = ""
    for _ in range(1000):
        page = await inv.list_actors(authorize=authz, atespace=atespace, limit=limit, page_token=token)
        assert len(page.items) <= limit
        out += [(a.atespace, a.name) for a in page.items]
        token = page.next_page_token
        if not token:
            return out
        assert len(page.items) == limit  # a continuation only after a full page
    raise AssertionError("listing never ended")


def expected(
    counts: dict[str, int], authz: Authz, atespaces: set[str] | None = None
) -> list[tuple[str, str]]:
    keys = [(ns, f"actor-{i:05d}") for ns, n in counts.items() for i in range(1, n + 1)]
    return sorted(k for k in keys if authz.allows(*k) and (atespaces is None or k[0] in atespaces))


def cursor_payload(token: str) -> dict[str, Any]:
    version, body, _mac = token.split(".")
    assert version == "i1"
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


COUNTS = {"team-c": 120, "team-a": 150, "team-b": 90}


# -- the runtime token: the one place translating an identity (contract tests) ------------------------


@pytest.mark.clause("INV-4")
def test_runtime_token_contract_v0_7_0_alpha1():
    # golden values of the pinned runtime's keyset format: check these when upgrading Substrate
    golden = "eyJ2IjoxLCJhdGVzcGFjZSI6InRlYW0tYSIsIm5hbWUiOiJzZXNzaW9uLTEifQ"
    assert runtime_token("session-1", "team-a") == golden
    assert runtime_token("session-1") == "eyJ2IjoxLCJuYW1lIjoic2Vzc2lvbi0xIn0"
    raw = base64.urlsafe_b64decode(runtime_token("session-1", "team-a") + "==")
    assert raw == b'{"v":1,"atespace":"team-a","name":"session-1"}'
    assert "=" not in runtime_token("ab", "c")  # no padding
    # the runtime (simulator) reads our tokens as the identities they name
    assert decode_actor_token(runtime_token("n1", "ns"), global_listing=True) == ("ns", "n1")
    assert decode_actor_token(runtime_token("n1"), global_listing=False) == (None, "n1")
    assert decode_actor_token(runtime_token("\u00e9-x"), global_listing=False) == (None, "\u00e9-x")
    assert parse_runtime_token(runtime_token("n1", "ns"), with_atespace=True) == ("ns", "n1")
    with pytest.raises(ValueError):
        parse_runtime_token(runtime_token("n1"), with_atespace=True)


@pytest.mark.clause("INV-4")
async def test_runtime_resumes_strictly_after_our_token(sim, database_url):
    await seed(database_url, {"a": 5, "b": 5})
    page = await sim.list_actors(None, 3, runtime_token("actor-00004", "a"))
    assert [(x.atespace, x.name) for x in page.items] == [
        ("a", "actor-00005"), ("b", "actor-00001"), ("b", "actor-00002")
    ]
    page = await sim.list_actors("b", 10, runtime_token("actor-00003"))
    assert [x.name for x in page.items] == ["actor-00004", "actor-00005"]
    # the boundary need not exist
    page = await sim.list_actors("b", 10, runtime_token("actor-00003x"))
    assert [x.name for x in page.items] == ["actor-00004", "actor-00005"]


# -- INV-1: filter by authorization, watched atespaces and scope before filling a page -------------


@pytest.mark.clause("INV-1")
async def test_sparse_authorization_still_fills_the_page(sim, database_url):
    await seed(database_url, COUNTS)
    authz = Authz(every=23)  # about 4% of the rows
    inv = engine(sim)
    page = await inv.list_actors(authorize=authz, limit=5)
    want = expected(COUNTS, authz)
    assert [(a.atespace, a.name) for a in page.items] == want[:5]
    assert page.next_page_token
    assert await all_pages(inv, authz, 5) == want


@pytest.mark.clause("INV-1")
async def test_scope_and_watched_atespaces_filter(sim, database_url):
    await seed(database_url, COUNTS)
    authz = Authz(every=7)
    rec = Recording(sim)
    inv = engine(rec, watched_atespaces=["team-b", "team-c"])
    got = await all_pages(inv, authz, 6)
    assert got == expected(COUNTS, authz, {"team-b", "team-c"})
    assert {c[0] for c in rec.calls} == {"team-b", "team-c"}  # the unwatched atespace is never read
    # a request scope: one atespace
    assert await all_pages(inv, authz, 6, atespace="team-c") == expected(COUNTS, authz, {"team-c"})
    # an atespace outside the watched ones lists nothing and asks the runtime nothing
    rec.calls.clear()
    page = await inv.list_actors(authorize=authz, atespace="team-a", limit=5)
    assert page.items == [] and page.next_page_token == "" and rec.calls == []


@pytest.mark.clause("INV-1")
async def test_rows_out_of_scope_are_dropped_even_if_the_runtime_returns_them(sim, database_url):
    await seed(database_url, COUNTS)
    inv = engine(IgnoresScope(sim))
    page = await inv.list_actors(authorize=Authz(every=1), atespace="team-b", limit=10)
    assert page.items and {a.atespace for a in page.items} == {"team-b"}


@pytest.mark.clause("INV-1")
async def test_authorization_is_one_call_per_runtime_batch(sim, database_url):
    await seed(database_url, {"a": 2500})
    authz = Authz(every=1000)
    rec = Recording(sim)
    page = await engine(rec).list_actors(authorize=authz, limit=2)
    assert [a.name for a in page.items] == ["actor-01000", "actor-02000"]
    assert page.next_page_token == ""
    assert len(authz.batches) == len(rec.calls) == 4
    assert authz.batches == [3, 1000, 1000, 497]


# -- INV-2: lookahead; a continuation only when another authorized row exists ----------------------


@pytest.mark.clause("INV-2")
async def test_continuation_only_when_another_authorized_row_exists(sim, database_url):
    await seed(database_url, {"a": 300})
    inv = engine(sim)
    exactly = Authz(every=60)  # 5 authorized rows among 300
    page = await inv.list_actors(authorize=exactly, limit=5)
    assert len(page.items) == 5 and page.next_page_token == ""  # more rows, none authorized: last page
    page = await inv.list_actors(authorize=exactly, limit=4)
    assert len(page.items) == 4 and page.next_page_token
    last = await inv.list_actors(authorize=exactly, limit=4, page_token=page.next_page_token)
    assert [a.name for a in last.items] == ["actor-00300"] and last.next_page_token == ""


# -- INV-3: the cursor: last identity + scope, signed, never a runtime token; grants nothing ---------


@pytest.mark.clause("INV-3")
async def test_cursor_holds_identity_and_scope_not_a_runtime_token(sim, database_url):
    await seed(database_url, COUNTS)
    rec = Recording(sim)
    inv = engine(rec)
    page = await inv.list_actors(authorize=Authz(every=9), atespace="team-a", limit=3)
    token = page.next_page_token
    assert cursor_payload(token) == {"k": "actors", "s": "team-a", "a": "team-a", "n": page.items[-1].name}
    runtime_tokens = {c[2] for c in rec.calls} | {runtime_token(page.items[-1].name)}
    assert not any(t and t in token for t in runtime_tokens)


@pytest.mark.clause("INV-3")
async def test_tampered_foreign_or_misused_cursor_is_invalid_argument(sim, database_url):
    await seed(database_url, COUNTS)
    inv = engine(sim)
    authz = Authz(every=3)
    token = (await inv.list_actors(authorize=authz, atespace="team-a", limit=2)).next_page_token
    version, body, mac = token.split(".")
    forged_body = base64.urlsafe_b64encode(
        json.dumps({"k": "actors", "s": "team-a", "a": "team-a", "n": "actor-00100"}, separators=(",", ":"))
        .encode()
    ).rstrip(b"=").decode()
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    for bad in (flipped, f"{version}.{forged_body}.{mac}", f"i2.{body}.{mac}", "garbage", token + "x", body):
        with pytest.raises(SessionqError) as e:
            await inv.list_actors(authorize=authz, atespace="team-a", limit=2, page_token=bad)
        assert e.value.sqlstate == "SQ400"
    # another server secret
    with pytest.raises(SessionqError) as e:
        await Inventory(sim, cursor_secret=b"x" * 32).list_actors(
            authorize=authz, atespace="team-a", limit=2, page_token=token
        )
    assert e.value.sqlstate == "SQ400"
    # the request scope is part of the cursor: another atespace, all atespaces, or workers
    for scope in ("team-b", ""):
        with pytest.raises(SessionqError) as e:
            await inv.list_actors(authorize=authz, atespace=scope, limit=2, page_token=token)
        assert e.value.sqlstate == "SQ400"
    with pytest.raises(SessionqError) as e:
        await inv.list_workers(authorize=lambda rows: _all_workers(rows), limit=2, page_token=token)
    assert e.value.sqlstate == "SQ400"
    # the genuine cursor still works
    page = await inv.list_actors(authorize=authz, atespace="team-a", limit=2, page_token=token)
    assert [a.name for a in page.items] == ["actor-00009", "actor-00012"]


async def _all_workers(rows: Sequence[Worker]) -> set[str]:
    return {r.name for r in rows}


@pytest.mark.clause("INV-3")
async def test_cursor_grants_nothing_authorization_is_evaluated_anew(sim, database_url):
    await seed(database_url, {"a": 100})
    inv = engine(sim)
    first = await inv.list_actors(authorize=Authz(every=10), limit=2)
    assert [a.name for a in first.items] == ["actor-00010", "actor-00020"]
    # the same cursor with another caller's (or a revoked) authorization
    other = await inv.list_actors(authorize=Authz(deny_all=True), limit=2, page_token=first.next_page_token)
    assert other.items == [] and other.next_page_token == ""
    narrower = await inv.list_actors(authorize=Authz(every=25), limit=5, page_token=first.next_page_token)
    assert [a.name for a in narrower.items] == ["actor-00025", "actor-00050", "actor-00075", "actor-00100"]


def test_cursor_codec_round_trip_and_secret_length():
    codec = CursorCodec(SECRET)
    c = Cursor("workers", "kagent", "", "w-1")
    assert codec.decode(codec.encode(c)) == c
    with pytest.raises(ValueError):
        CursorCodec(b"short")


# -- INV-4: resume right after the boundary even if it is gone; sorted atespaces -----------------------


@pytest.mark.clause("INV-4")
async def test_continuation_resumes_after_a_deleted_boundary(sim, database_url):
    await seed(database_url, {"a": 100, "b": 100})
    authz = Authz(every=10)
    inv = engine(sim)
    page = await inv.list_actors(authorize=authz, limit=3)
    assert [a.name for a in page.items] == ["actor-00010", "actor-00020", "actor-00030"]
    # the boundary and the row looked ahead at are deleted between the pages
    await delete_actors(database_url, [("a", "actor-00030"), ("a", "actor-00040")])
    page = await inv.list_actors(authorize=authz, limit=3, page_token=page.next_page_token)
    assert [(a.atespace, a.name) for a in page.items] == [
        ("a", "actor-00050"), ("a", "actor-00060"), ("a", "actor-00070")
    ]


@pytest.mark.clause("INV-4")
async def test_watched_atespaces_in_sorted_order_and_a_vanished_boundary_atespace(sim, database_url):
    await seed(database_url, COUNTS)
    authz = Authz(every=11)
    rec = Recording(sim)
    inv = engine(rec, watched_atespaces=["team-c", "team-a", "team-b"])
    got = await all_pages(inv, authz, 4)
    assert got == expected(COUNTS, authz)
    order = [c[0] for c in rec.calls]
    assert order == sorted(order)  # a, then b, then c: never back
    # the boundary's atespace disappears entirely between pages: continue in the next one
    page = await inv.list_actors(authorize=authz, limit=3)
    assert {a.atespace for a in page.items} == {"team-a"}
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("DELETE FROM substrate_sim.actors WHERE atespace = 'team-a'")
    page = await inv.list_actors(authorize=authz, limit=3, page_token=page.next_page_token)
    assert [(a.atespace, a.name) for a in page.items] == expected(COUNTS, authz, {"team-b"})[:3]


# -- INV-5: budgets -----------------------------------------------------------------------------------


@pytest.mark.clause("INV-5")
async def test_first_batch_limit_plus_one_later_batches_up_to_1000(sim, database_url):
    await seed(database_url, {"a": 1500, "b": 1500})
    rec = Recording(sim)
    authz = Authz(every=700, atespaces={"b"})
    page = await engine(rec, watched_atespaces=["a", "b"]).list_actors(authorize=authz, limit=2)
    assert [(a.atespace, a.name) for a in page.items] == [("b", "actor-00700"), ("b", "actor-01400")]
    assert page.next_page_token == ""
    # once per request, across atespaces: 3, then 1000s (a: 3 + 1000 + 497; b: 1000 + 500)
    assert rec.sizes == [3, 1000, 1000, 1000, 1000]
    assert [c[0] for c in rec.calls] == ["a", "a", "a", "b", "b"]
    assert LATER_BATCH == 1000


@pytest.mark.clause("INV-5")
@pytest.mark.clause("INV-6")
async def test_row_budget_counts_every_fetched_row_and_caps_the_last_batch(sim, database_url):
    await seed(database_url, {"a": 3000})
    rec = Recording(sim)
    # denied rows count: nothing is authorized, so every row read is "wasted"
    with pytest.raises(SessionqError) as e:
        await engine(rec, max_rows=1500).list_actors(authorize=Authz(deny_all=True), limit=10)
    assert e.value.sqlstate == "SQ429" and e.value.code.name == "RESOURCE_EXHAUSTED"
    assert rec.sizes == [11, 1000, 489]
    # found rows do not make a partial page: exhaustion returns no page at all
    rec.calls.clear()
    with pytest.raises(SessionqError) as e:
        await engine(rec, max_rows=1200).list_actors(authorize=Authz(every=500), limit=5)
    assert e.value.sqlstate == "SQ429"
    assert rec.sizes == [6, 1000, 194]


@pytest.mark.clause("INV-5")
async def test_default_budget_is_10000_rows(sim, database_url):
    await seed(database_url, {"a": 10_000})
    rec = Recording(sim)
    # exactly 10,000 rows: the last batch (capped to 949) reaches the end of the listing
    page = await engine(rec).list_actors(authorize=Authz(every=10_000), limit=50)
    assert [a.name for a in page.items] == ["actor-10000"] and page.next_page_token == ""
    assert rec.sizes == [51] + [1000] * 9 + [949]
    assert MAX_ROWS == 10_000 and sum(rec.sizes) == 10_000
    # one more row: the listing would need an 10,001st row
    await seed(database_url, {"b": 1})
    with pytest.raises(SessionqError) as e:
        await engine(sim).list_actors(authorize=Authz(every=10_000), limit=50)
    assert e.value.sqlstate == "SQ429"


@pytest.mark.clause("INV-5")
async def test_page_budget_counts_runtime_calls_across_atespaces(sim, database_url):
    await seed(database_url, {"a": 30, "b": 30, "c": 30})
    rec = Recording(sim)
    with pytest.raises(SessionqError) as e:
        # first batch 6 rows of "a", then the rest of "a", then "b": 3 pages, and "c" needs a 4th
        await engine(rec, watched_atespaces=["a", "b", "c"], max_pages=3).list_actors(
            authorize=Authz(deny_all=True), limit=5
        )
    assert e.value.sqlstate == "SQ429"
    assert len(rec.calls) == 3
    # the default: 100 runtime pages, even when every page is empty (but advancing)
    runtime = EndlessEmpty(None)
    with pytest.raises(SessionqError) as e:
        await engine(runtime).list_actors(authorize=Authz(deny_all=True), atespace="d", limit=1)
    assert e.value.sqlstate == "SQ429" and len(runtime.calls) == MAX_PAGES == 100


@pytest.mark.clause("INV-5")
@pytest.mark.clause("INV-6")
async def test_slow_runtime_hits_the_callers_earlier_deadline(sim, database_url):
    await seed(database_url, {"a": 20})
    await sim.inject("list_actors", "delay", delay=2.0)
    started = time.monotonic()
    with pytest.raises(SessionqError) as e:
        await engine(sim).list_actors(authorize=Authz(), limit=5, time_remaining=0.2)
    assert e.value.sqlstate == "SQ504" and e.value.code.name == "DEADLINE_EXCEEDED"
    assert time.monotonic() - started < 1.5


@pytest.mark.clause("INV-5")
async def test_own_deadline_applies_when_the_caller_allows_more(sim, database_url):
    await seed(database_url, {"a": 20})
    await sim.inject("list_actors", "delay", delay=2.0, times=None)
    started = time.monotonic()
    with pytest.raises(SessionqError) as e:
        await engine(sim, timeout=0.2).list_actors(authorize=Authz(), limit=5, time_remaining=30)
    assert e.value.sqlstate == "SQ504"
    assert time.monotonic() - started < 1.5
    await sim.clear_faults()


# -- INV-6: failures return no partial page; details stay in the server log ----------------------------


@pytest.mark.clause("INV-6")
async def test_runtime_error_details_stay_in_the_log(sim, database_url, caplog):
    await seed(database_url, {"a": 50})
    inv = engine(sim)
    fault = await sim.inject("list_actors", "fail_before", code=Code.INTERNAL)
    with caplog.at_level(logging.WARNING, logger="sessionq.domain.inventory"):
        with pytest.raises(SessionqError) as e:
            await inv.list_actors(authorize=Authz(), limit=5)
    assert e.value.sqlstate == "SQ503" and e.value.code.name == "UNAVAILABLE"
    assert "injected" not in e.value.message and "INTERNAL" not in e.value.message
    assert "injected failure before list_actors" in caplog.text
    assert await sim.fault_hits(fault) == 1


@pytest.mark.clause("INV-6")
async def test_failure_after_some_rows_returns_no_partial_page(sim, database_url):
    await seed(database_url, {"a": 3000})

    class FailsSecond(Recording):
        async def list_actors(self, atespace, page_size, page_token):
            if self.calls:
                self.calls.append((atespace, page_size, page_token))
                raise RuntimeError("connection reset by peer at 10.0.0.7")
            return await super().list_actors(atespace, page_size, page_token)

    runtime = FailsSecond(sim)
    with pytest.raises(SessionqError) as e:
        await engine(runtime).list_actors(authorize=Authz(every=5), limit=5)  # first batch: 1 of 6
    assert e.value.sqlstate == "SQ503" and "10.0.0.7" not in e.value.message
    assert len(runtime.calls) == 2


# -- INV-7: a token that does not advance ends the scan; empty pages do not -------------------------


@pytest.mark.clause("INV-7")
async def test_stuck_token_fails_the_scan(sim, database_url, caplog):
    await seed(database_url, {"a": 50})
    inv = engine(sim)
    # 1st call: an empty page with a token; 2nd call: the same token again, no rows
    await sim.inject("list_actors", "stuck_token", times=2)
    with caplog.at_level(logging.ERROR, logger="sessionq.domain.inventory"):
        with pytest.raises(SessionqError) as e:
            await inv.list_actors(authorize=Authz(), limit=5)
    assert e.value.sqlstate == "SQ503"
    assert "did not advance" in caplog.text
    # on a continuation: the very first runtime call repeats our own token
    page = await inv.list_actors(authorize=Authz(), limit=5)
    await sim.inject("list_actors", "stuck_token")
    with pytest.raises(SessionqError) as e:
        await inv.list_actors(authorize=Authz(), limit=5, page_token=page.next_page_token)
    assert e.value.sqlstate == "SQ503"


@pytest.mark.clause("INV-7")
async def test_repeating_token_cycle_fails_the_scan():
    runtime = Cycling(None)
    with pytest.raises(SessionqError) as e:
        await engine(runtime).list_actors(authorize=Authz(), limit=5)
    assert e.value.sqlstate == "SQ503"
    assert len(runtime.calls) == 3  # "" -> A, A -> B, B -> A again


@pytest.mark.clause("INV-7")
async def test_empty_pages_while_more_remain_are_not_the_end(sim, database_url):
    await seed(database_url, {"a": 40, "b": 40})
    authz = Authz(every=4)
    # the simulator's empty page at the start of each atespace's listing
    await sim.inject("list_actors", "empty_page")
    page = await engine(sim).list_actors(authorize=authz, limit=3)
    assert [(a.atespace, a.name) for a in page.items] == expected({"a": 40}, authz)[:3]
    inv = engine(sim, watched_atespaces=["a", "b"])
    await sim.inject("list_actors", "empty_page")
    page = await inv.list_actors(authorize=authz, limit=3, atespace="b")
    assert [a.name for a in page.items] == ["actor-00004", "actor-00008", "actor-00012"]
    # a runtime whose every other page is empty (tokens advancing): the full listing is intact
    runtime = EmptyEveryOther(sim)
    assert await all_pages(engine(runtime), authz, 7) == expected({"a": 40, "b": 40}, authz)
    assert await all_pages(engine(EmptyEveryOther(sim), watched_atespaces=["b", "a"]), authz, 5) == expected(
        {"a": 40, "b": 40}, authz
    )


# -- workers --------------------------------------------------------------------------------------------


@pytest.mark.clause("INV-1")
@pytest.mark.clause("INV-2")
async def test_workers_paged_and_filtered(sim):
    every_third = set()

    async def authorize(rows: Sequence[Worker]) -> set[str]:
        allowed = {r.name for i, r in enumerate(sorted(rows, key=lambda w: w.name)) if i % 3 == 0}
        every_third.update(allowed)
        return allowed

    rec = Recording(sim)
    inv = engine(rec)
    names: list[str] = []
    token = ""
    while True:
        page = await inv.list_workers(authorize=_all_workers, limit=40, page_token=token)
        names += [w.name for w in page.items]
        token = page.next_page_token
        if not token:
            break
    assert len(names) == sim.worker_pool_size and names == sorted(names)
    assert rec.sizes[0] == 41
    # the request scope is the worker's own atespace
    page = await inv.list_workers(authorize=_all_workers, atespace="elsewhere", limit=10)
    assert page.items == [] and page.next_page_token == ""
    page = await inv.list_workers(authorize=_all_workers, atespace="kagent", limit=10)
    assert len(page.items) == 10 and page.next_page_token
    # unwatched worker atespace
    page = await engine(sim, watched_atespaces=["team-a"]).list_workers(authorize=_all_workers, limit=10)
    assert page.items == []
    # sparse authorization, cursor continuation
    page = await inv.list_workers(authorize=authorize, limit=5)
    assert len(page.items) == 5 and all(w.name in every_third for w in page.items)
    nxt = await inv.list_workers(authorize=authorize, limit=5, page_token=page.next_page_token)
    assert nxt.items[0].name > page.items[-1].name
    with pytest.raises(SessionqError) as e:
        await inv.list_workers(
            authorize=authorize, atespace="kagent", limit=5, page_token=page.next_page_token
        )
    assert e.value.sqlstate == "SQ400"


async def test_limit_bounds(sim):
    inv = engine(sim)
    for bad in (0, -1, 1000):
        with pytest.raises(SessionqError):
            await inv.list_actors(authorize=Authz(), limit=bad)
