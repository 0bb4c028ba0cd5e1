"""Whose data the web console shows: a user who is not an admin sees what the API shows them (their
own Sessions with their turns, checkpoints and jobs; never another user's, and no operator page),
an admin and `sessionq up`'s local user see everything. A real console over HTTP, logged in with
the real tokens of two users and an admin; one user's page in Debian's Chromium too."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import httpx
import pytest
from lifecycle import ready_session, turn_by_store
from ophelpers import db_fixture, defer, live_worker, make_doing, q  # noqa: F401 (fixtures)
from test_console import CHROMIUM, HAVE_CHROMIUM

from sessionq import config
from sessionq.console.server import ConsoleServer
from sessionq.domain.checkpoints import run_checkpoint
from sessionq.domain.quiescence import QuiescencePool, claim_and_quiesce
from sessionq.models import OperationKind

ADMIN, ALICE, BOB = "admin-token-1a2b", "alice-token-3c4d", "bob-token-5e6f"
OPERATOR_PAGES = ("/jobs", "/workers", "/queues", "/actions")


@pytest.fixture
async def console(store: Any) -> AsyncIterator[str]:
    settings = config.defaults().with_overrides(**{"auth.tokens": {ADMIN: "ada", ALICE: "alice", BOB: "bob"},
                                                   "auth.admins": ["ada"]})
    server = ConsoleServer(settings, store.pool)
    await server.start("127.0.0.1:0")
    yield f"http://127.0.0.1:{server.port}"
    await server.stop()


async def users_data(store: Any, sim: Any, db: Any, user: str) -> dict[str, Any]:
    """A READY Session of `user` with a turn, a READY checkpoint, and a failed job of that Session
    whose error names the user's own secret."""
    s = await ready_session(store, sim, f"req-{user}", user=user)
    turn = await turn_by_store(store, sim, s, task_id=f"turn-of-{user}-{uuid4().hex[:8]}")
    pool = QuiescencePool(store, sim, "", listen=False)
    while await claim_and_quiesce(pool):
        pass
    cp = await store.admit_checkpoint(s.id, user, f"checkpoint-of-{user}", turn)
    assert (await run_checkpoint(store, sim, cp.id, 30)).status == "ready"
    worker = await live_worker(db, name=f"host-{user}")
    jid = await defer(db, "optest_sleep", {"session_id": str(s.id), "seconds": 0})
    await make_doing(db, jid, worker)
    await q(db, "SELECT sessionq.end_job_attempt(%s, 'failed', false, 'ValueError', %s, NULL)", jid,
            f"secret-error-of-{user}")
    return {"session": str(s.id), "turn": turn, "checkpoint": str(cp.id), "job": jid,
            "error": f"secret-error-of-{user}"}


@contextlib.asynccontextmanager
async def logged_in(base: str, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client with the console's cookie, as the login form sets it."""
    async with httpx.AsyncClient(base_url=base, follow_redirects=False) as http:
        r = await http.post("/login", data={"token": token, "next": "/"})
        assert r.status_code == 303, r.text
        yield http


def shows_none_of(text: str, data: dict[str, Any], *, searched: bool = False) -> None:
    """Nothing of another user's in a page (a search echoes its term, the Session's id: no link then)."""
    for key in ("turn", "checkpoint", "error") if searched else ("session", "turn", "checkpoint", "error"):
        assert data[key] not in text, key
    assert f"/sessions/{data['session']}" not in text


async def test_each_user_sees_their_own_sessions_and_admins_see_all(console, store, sim, db):
    data = {u: await users_data(store, sim, db, u) for u in ("alice", "bob")}
    for user, token, other in (("alice", ALICE, "bob"), ("bob", BOB, "alice")):
        mine, theirs = data[user], data[other]
        async with logged_in(console, token) as http:
            overview = await http.get("/")
            shows_none_of(overview.text, theirs)
            assert overview.status_code == 200 and "Your Sessions by state" in overview.text
            assert "Recent failures" not in overview.text and 'href="/jobs"' not in overview.text
            # the Sessions: only their own, whatever the search
            for params in ({}, {"state": "READY"}, {"q": user}):
                listing = await http.get("/sessions", params=params)
                assert listing.status_code == 200 and f"/sessions/{mine['session']}" in listing.text
                shows_none_of(listing.text, theirs, searched=True)
            for params in ({"q": other}, {"q": theirs["session"]}):
                listing = await http.get("/sessions", params=params)
                assert listing.status_code == 200 and "No Sessions match" in listing.text
                shows_none_of(listing.text, theirs, searched=True)
            # their own Session with its turn, checkpoint and jobs
            page = await http.get(f"/sessions/{mine['session']}")
            assert page.status_code == 200
            for key in ("turn", "checkpoint"):
                assert mine[key] in page.text, key
            assert f">{mine['job']}<" in page.text and f'href="/jobs/{mine["job"]}"' not in page.text
            # another user's Session answers like a missing one
            absent = str(uuid4())
            missing = await http.get(f"/sessions/{absent}")
            other_page = await http.get(f"/sessions/{theirs['session']}")
            assert other_page.status_code == missing.status_code == 404
            assert other_page.text.replace(theirs["session"], "ID") == missing.text.replace(absent, "ID")
            # the operator pages are refused, another user's job above all
            for path in (*OPERATOR_PAGES, f"/jobs/{theirs['job']}", f"/jobs/{mine['job']}"):
                r = await http.get(path)
                assert r.status_code == 403 and "need an admin" in r.text, path
                shows_none_of(r.text, theirs)

    # an admin sees everything: both users' Sessions, turns, checkpoints, jobs and errors
    async with logged_in(console, ADMIN) as admin:
        assert "Recent failures" in (await admin.get("/")).text
        listing = (await admin.get("/sessions")).text
        jobs = (await admin.get("/jobs", params={"status": "failed"})).text
        for d in data.values():
            assert d["session"] in listing and d["error"] in jobs
            page = await admin.get(f"/sessions/{d['session']}")
            assert page.status_code == 200 and d["turn"] in page.text and d["checkpoint"] in page.text
            assert (await admin.get(f"/jobs/{d['job']}")).status_code == 200
        for path in OPERATOR_PAGES:
            assert (await admin.get(path)).status_code == 200, path


async def test_a_deleted_session_is_gone_for_its_user_but_kept_for_admins(console, store, sim, db):
    from sessionq.domain.operations import OperationExecutor

    s = await ready_session(store, sim, "req-deleted", user="alice")
    await store.admit_operation(s.id, "alice", None, OperationKind.DELETE)
    assert (await OperationExecutor(store, sim, 120).run(s.id)).status == "completed"
    assert (await q(db, "SELECT state FROM sessionq.sessions WHERE id = %s", s.id))[0]["state"] == "DELETED"
    async with logged_in(console, ALICE) as alice:
        assert (await alice.get(f"/sessions/{s.id}")).status_code == 404
        assert str(s.id) not in (await alice.get("/sessions", params={"state": "DELETED"})).text
    async with logged_in(console, ADMIN) as admin:
        assert (await admin.get(f"/sessions/{s.id}")).status_code == 200


async def test_the_local_user_of_up_is_an_admin(store, sim, db):
    data = await users_data(store, sim, db, "bob")
    server = ConsoleServer(config.defaults(), store.pool, local_user="me")
    await server.start("127.0.0.1:0")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            assert data["session"] in (await http.get("/sessions")).text
            assert data["error"] in (await http.get("/jobs", params={"status": "failed"})).text
    finally:
        await server.stop()


async def test_a_users_console_in_chromium(console, store, sim, db, tmp_path):
    if not HAVE_CHROMIUM:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    from playwright.async_api import async_playwright

    data = {u: await users_data(store, sim, db, u) for u in ("alice", "bob")}
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = await browser.new_page()
            await page.goto(f"{console}/login")
            await page.fill("input[name=token]", ALICE)
            await page.click("button[type=submit]")
            await page.wait_for_url(f"{console}/")
            nav = await page.inner_text("header")
            assert "Sessions" in nav and "Jobs" not in nav and "Workers" not in nav and "(read-only" in nav
            await page.click("a[href='/sessions']")
            await page.wait_for_url(f"{console}/sessions")
            await page.click(f"a[href='/sessions/{data['alice']['session']}']")
            await page.wait_for_url(f"{console}/sessions/{data['alice']['session']}")
            assert data["alice"]["checkpoint"] in await page.content()
            shows_none_of(await page.content(), data["bob"])
            await page.screenshot(path=str(tmp_path / "alice-session.png"), full_page=True)
            response = await page.goto(f"{console}/sessions/{data['bob']['session']}")
            assert response is not None and response.status == 404
        finally:
            await browser.close()
