"""The console's Events page: the newest lifecycle events, an admin's of every Session, a user's of
their own only."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lifecycle import ready_session
from playwright.async_api import async_playwright

from sessionq import config
from sessionq.console.app import EVENTS_LIVE_EVERY
from sessionq.console.server import ConsoleServer

# events are readable once no older transaction runs on the server (schema/45_events.sql)
pytestmark = pytest.mark.quiet_horizon

ADMIN, ALICE, BOB = "admin-token-1a2b", "alice-token-3c4d", "bob-token-5e6f"


@pytest.fixture
async def console(store: Any) -> AsyncIterator[str]:
    settings = config.defaults().with_overrides(**{"auth.tokens": {ADMIN: "ada", ALICE: "alice", BOB: "bob"},
                                                   "auth.admins": ["ada"]})
    server = ConsoleServer(settings, store.pool)
    await server.start("127.0.0.1:0")
    yield f"http://127.0.0.1:{server.port}"
    await server.stop()


async def page(base: str, token: str, path: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, cookies={"sessionq_console": token}) as client:
        return await client.get(path)


async def test_events_page_shows_each_user_their_own(console, store, sim):
    a = await ready_session(store, sim, "a")
    b = await ready_session(store, sim, "b", user="bob")
    alice = await page(console, ALICE, "/events")
    assert alice.status_code == 200 and str(a.id) in alice.text and str(b.id) not in alice.text
    assert "ready" in alice.text and "created" in alice.text
    admin = await page(console, ADMIN, "/events")
    assert str(a.id) in admin.text and str(b.id) in admin.text
    one = await page(console, ADMIN, f"/events?session={b.id}")
    assert str(b.id) in one.text and str(a.id) not in one.text
    assert (await page(console, BOB, f"/events?session={a.id}")).text.count(str(a.id)) <= 1  # only the form echo
    bad = await page(console, ALICE, "/events?session=nope")
    assert bad.status_code == 400 and "UUID" in bad.text


CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    if not shutil.which(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        await b.close()


async def test_a_live_events_page_shows_new_events_by_itself(browser, console, store, sim):
    """`/events?live=1` (the Live box) reads itself again every EVENTS_LIVE_EVERY seconds: an event
    recorded after the page opened appears in the browser with no action of the user's."""
    context = await browser.new_context()
    await context.add_cookies([{"name": "sessionq_console", "value": ALICE, "url": console}])
    tab = await context.new_page()
    first = await ready_session(store, sim, "before")
    await tab.goto(f"{console}/events?live=1")
    assert str(first.id) in await tab.content()
    assert await tab.is_checked("input[name=live]")
    later = await ready_session(store, sim, "after")
    # no user action: the page's own refresh brings the new Session's events
    await tab.wait_for_selector(f"a[href='/sessions/{later.id}']", timeout=EVENTS_LIVE_EVERY * 3 * 1000)
    assert "live (every" in await tab.inner_text("main form")
    plain = await page(console, ALICE, "/events")
    assert 'http-equiv="refresh"' not in plain.text and 'http-equiv="refresh"' in (
        await page(console, ALICE, "/events?live=1")).text
    await context.close()
