"""The console's Events page: the newest lifecycle events, an admin's of every Session, a user's of
their own only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lifecycle import ready_session

from sessionq import config
from sessionq.console.server import ConsoleServer

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
