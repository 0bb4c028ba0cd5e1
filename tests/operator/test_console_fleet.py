"""The console's fleet pages over HTTP: a label search with its count, a bulk action started by an
admin and followed on its page, a Session's labels, TTL and usage; a reader sees their own only."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lifecycle import ready_session

from sessionq import config
from sessionq.console.server import ConsoleServer
from sessionq.models import BulkActionState

ADMIN, READER = "admin-token-123", "reader-token-456"


@pytest.fixture
async def console(store: Any) -> AsyncIterator[str]:
    settings = config.defaults().with_overrides(**{"auth.tokens": {ADMIN: "ada", READER: "rita"},
                                                   "auth.admins": ["ada"]})
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
