"""The console's fleet pages over HTTP: a label search with its count, a bulk action started by an
admin and followed on its page, a Session's labels, TTL and usage; a reader sees their own only.
In a real headless Chromium (Debian's, driven by Playwright): an admin edits a Session's labels and
its idle TTL, bad input is refused with nothing changed, a reader has no form."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lifecycle import ready_session

from sessionq import config
from sessionq.console.server import ConsoleServer
from sessionq.models import BulkActionState

ADMIN, READER = "admin-token-123", "reader-token-456"
CHROMIUM = "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()


@pytest.fixture
async def console(store: Any) -> AsyncIterator[str]:
    settings = config.defaults().with_overrides(**{"auth.tokens": {ADMIN: "ada", READER: "rita"},
                                                   "auth.admins": ["ada"], "sessions.maxIdleTtl": 7 * 86400.0})
    server = ConsoleServer(settings, store.pool)
    await server.start("127.0.0.1:0")
    yield f"http://127.0.0.1:{server.port}"
    await server.stop()


@pytest.mark.clause("FLEET-4")
async def test_label_search_bulk_action_and_usage_pages(console, store, sim):
    mine = await ready_session(store, sim, "r1", user="rita")
    other = await ready_session(store, sim, "r2", user="bob")
    for s in (mine, other):
        await store.set_session_labels(s.id, s.creator, None, {"team": "billing"}, [])
    await store.set_session_idle_ttl(mine.id, "rita", None, 3600)
    async with httpx.AsyncClient(base_url=console, cookies={"sessionq_console": READER}) as reader:
        page = await reader.get("/sessions", params={"selector": "team=billing"})
        assert page.status_code == 200 and "1 session(s) match" in page.text  # their own only
        assert str(mine.id) in page.text and str(other.id) not in page.text and "/sessions/bulk" not in page.text
        detail = await reader.get(f"/sessions/{mine.id}")
        assert "team=billing" in detail.text and "3600.0s" in detail.text and "Resumes" in detail.text
        bad = await reader.get("/sessions", params={"selector": "team in (a"})
        assert bad.status_code == 400 and "parentheses" in bad.text
        r = await reader.post("/sessions/bulk", data={"kind": "SUSPEND", "selector": "team=billing", "csrf": "x"})
        assert r.status_code == 403  # actions need an admin
    async with httpx.AsyncClient(base_url=console, cookies={"sessionq_console": ADMIN}) as admin:
        page = await admin.get("/sessions", params={"selector": "team=billing"})
        assert "2 session(s) match" in page.text and "Suspend all 2" in page.text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)
        request_id = re.search(r'name="request_id" value="([^"]+)"', page.text).group(1)
        r = await admin.post("/sessions/bulk", data={"kind": "SUSPEND", "selector": "team=billing", "state": "",
                                                     "csrf": csrf, "request_id": request_id})
        assert r.status_code == 303 and r.headers["location"].startswith("/bulk/"), r.text
        bulk_id = r.headers["location"].split("?")[0].rsplit("/", 1)[1]
        action = await store.bulk_step(__import__("uuid").UUID(bulk_id), 50)  # what the worker's job does
        assert action.state == BulkActionState.DONE and action.processed == 2
        shown = await admin.get(f"/bulk/{bulk_id}")
        assert shown.status_code == 200 and "Bulk suspend" in shown.text and "ada" in shown.text
        assert bulk_id in (await admin.get("/bulk")).text
    async with httpx.AsyncClient(base_url=console, cookies={"sessionq_console": READER}) as reader:
        assert (await reader.get(f"/bulk/{bulk_id}")).status_code == 404  # another user's action


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    if not HAVE_CHROMIUM:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        await b.close()


async def login(page: Any, base: str, token: str) -> None:
    await page.goto(f"{base}/")
    await page.fill("input[name=token]", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base}/")


@pytest.mark.clause("FLEET-1")
@pytest.mark.clause("FLEET-3")
async def test_an_admin_edits_labels_and_the_idle_ttl_in_a_browser(browser, console, store, sim, tmp_path):
    s = await ready_session(store, sim, "r-edit", user="rita")
    await store.set_session_labels(s.id, "rita", None, {"team": "billing", "tier": "gold"}, [])
    admin = await browser.new_page()
    await login(admin, console, ADMIN)
    await admin.goto(f"{console}/sessions/{s.id}")

    async def submit(form: str, value: str) -> str:
        await admin.fill(f"#{form} input[type=text]", value)
        await admin.click(f"#{form} button[type=submit]")
        await admin.wait_for_selector(".flash")
        return await admin.inner_text(".flash")

    async def row() -> Any:
        return await store.session_by_id(s.id)

    # labels: set one, remove one, as the owner would (the Session stays rita's)
    said = await submit("edit-labels", "env=prod tier-")
    assert "set by ada: env=prod, team=billing" in said, said
    assert (await row()).labels == {"team": "billing", "env": "prod"}
    assert "env=prod" in await admin.inner_text("table >> nth=1")
    # bad input: refused with a short message, nothing written
    for bad, words in (("Bad_/x=1", "is not valid"), ("justakey", "expected KEY=VALUE"), ("k=" + "v" * 64, "value")):
        said = await submit("edit-labels", bad)
        assert words in said and len(said) < 300, said
        assert (await row()).labels == {"team": "billing", "env": "prod"}
    # the idle TTL: within sessions.maxIdleTtl (7d here), then back to the default
    said = await submit("edit-ttl", "3d")
    assert "idle TTL of session" in said and "259200s" in said, said
    assert (await row()).idle_ttl == 3 * 86400
    assert await admin.input_value("#edit-ttl input[type=text]") == "259200s"
    for bad, words in (("8d", "sessions.maxIdleTtl"), ("0s", "sessions.allowNoIdleTtl"), ("soon", "not a duration")):
        said = await submit("edit-ttl", bad)
        assert words in said and len(said) < 300, said
        assert (await row()).idle_ttl == 3 * 86400
    said = await submit("edit-ttl", "")
    assert "the default" in said and (await row()).idle_ttl is None
    await admin.screenshot(path=str(tmp_path / "session-fleet.png"), full_page=True)

    # a reader (the owner, not an admin) sees the labels and no form; a forged POST is refused
    reader = await (await browser.new_context()).new_page()
    await login(reader, console, READER)
    await reader.goto(f"{console}/sessions/{s.id}")
    assert "env=prod" in await reader.content()
    assert await reader.locator("#edit-labels").count() == 0 and await reader.locator("#edit-ttl").count() == 0
    async with httpx.AsyncClient(base_url=console, cookies={"sessionq_console": READER}) as http:
        r = await http.post(f"/sessions/{s.id}/labels", data={"labels": "team=x", "csrf": "x"})
        assert r.status_code == 403
    async with httpx.AsyncClient(base_url=console, cookies={"sessionq_console": ADMIN}) as http:
        r = await http.post(f"/sessions/{s.id}/ttl", data={"idle_ttl": "1d", "csrf": "stale"})
        assert r.status_code == 403  # not this console's form
        page = await http.get(f"/sessions/{s.id}")
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text).group(1)
        r = await http.post("/sessions/0190a4b6-0000-7000-8000-000000000000/labels",
                            data={"labels": "team=x", "csrf": csrf})
        assert r.status_code == 303 and "not%20found" in r.headers["location"].replace("+", "%20"), r.headers
    assert (await row()).labels == {"team": "billing", "env": "prod"} and (await row()).idle_ttl is None


async def snapshot_recorded(store: Any, sim: Any, session: Any, size: int | None) -> None:
    """A turn, and its quiescence outcome recorded with a snapshot of `size` bytes (None: unknown)."""
    import uuid

    from lifecycle import turn_by_store

    await turn_by_store(store, sim, session)
    executor = uuid.uuid4()
    claimed = (await store.claim_idle_work(executor, 0.0, 1)).claimed
    assert [c.id for c in claimed] == [session.id]
    snap = {"generation": 1, "uri": "sim://snapshots/x/1", "status": "COMPLETED", "bytes": size}
    await store.finish_idle(session.id, claimed[0].idle_boundary_id, executor, snap)


@pytest.mark.clause("FLEET-5")
async def test_the_session_page_shows_snapshot_bytes_and_says_when_unknown(console, store, sim):
    sized = await ready_session(store, sim, "sz1", user="rita")
    unsized = await ready_session(store, sim, "sz2", user="rita")
    await snapshot_recorded(store, sim, sized, 4096)
    await snapshot_recorded(store, sim, unsized, None)
    async with httpx.AsyncClient(base_url=console, cookies={"sessionq_console": READER}) as reader:
        shown = (await reader.get(f"/sessions/{sized.id}")).text
        assert re.search(r'class="snapshot-bytes">4096 bytes</td>', shown), shown
        shown = (await reader.get(f"/sessions/{unsized.id}")).text
        assert re.search(r'class="snapshot-bytes">unknown <span class="muted">\(the runtime reports no sizes\)', shown)
