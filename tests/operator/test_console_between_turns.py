"""The console's "Between turns" page in a real headless Chromium: queued turns in order, warm
Actors (inside the server-wide keep-warm window the workers report) and turns failed as stalled."""

from __future__ import annotations

import asyncio

from lifecycle import ready_session, turn_by_store
from ophelpers import ops_fixture  # noqa: F401 (fixtures)
from test_console import ADMIN, READER, browser, console, login  # noqa: F401 (fixtures)

from sessionq.domain.expiry import fail_stalled_turns
from sessionq.models import BusyPolicy

MSG = {"role": "ROLE_USER", "parts": [{"text": "hi"}]}


async def test_queued_warm_and_stalled_turns_on_their_page(browser, console, ops, store, sim, tmp_path):  # noqa: F811
    busy = await ready_session(store, sim, "req-busy")
    admitted = await store.admit_turn(busy.id, "alice", None, MSG, None, 600)  # dispatched; no worker runs it
    queued = [await store.send_turn(busy.id, "alice", None, MSG, None, 600, BusyPolicy.ENQUEUE) for _ in range(2)]
    warm = await ready_session(store, sim, "req-warm")
    await turn_by_store(store, sim, warm)  # settled: its idle boundary waits
    await ops.register_worker(9101, "w-warm", "host", 1, None, 4, 600.0)  # sessions.keepWarm 600s
    stalled = await ready_session(store, sim, "req-stalled")
    reserved = await store.admit_turn(stalled.id, "alice", None, MSG, None, 600)
    await store.task_create(stalled.id, "t-stalled", {"id": "t-stalled", "contextId": str(stalled.id),
                                                      "status": {"state": "TASK_STATE_WORKING"}},
                            reserved.dispatch_id)
    await asyncio.sleep(0.3)
    assert await fail_stalled_turns(store, 0.2) >= 1
    assert admitted.dispatch_id is not None

    page = await browser.new_page()
    await login(page, console, ADMIN)
    await page.click("header a:has-text('Between turns')")
    await page.wait_for_url(f"{console}/between-turns")
    rows = page.locator("table.queued tr[data-task]")
    assert [await rows.nth(i).get_attribute("data-task") for i in range(await rows.count())] == [
        q.queued_task_id for q in queued]  # in the order they will run
    assert "enqueue" in await rows.nth(0).inner_text()
    idle = await page.inner_text(f"table.idle tr[data-session='{warm.id}']")
    assert "warm" in idle and "600" in idle
    row = await page.inner_text(f"table.stalled tr[data-session='{stalled.id}']")
    assert "t-stalled" in row and "the turn stalled" in row
    await page.screenshot(path=str(tmp_path / "between-turns.png"), full_page=True)
    assert (tmp_path / "between-turns.png").stat().st_size > 1000

    # operators only: a reader has no such page
    reader = await browser.new_page()
    await login(reader, console, READER)
    assert await reader.locator("header a:has-text('Between turns')").count() == 0
    response = await reader.goto(f"{console}/between-turns")
    assert response is not None and response.status == 403
