"""The web console in a real headless Chromium (Debian's, driven by Playwright; no browser download):
log in, find a failed job, read its error, retry it, drain a worker; read-only users, stale actions,
bad input; screenshots of the pages go to the test's tmp_path. The HTTP-level checks (no browser)
cover authentication, CSRF and validation quickly."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lifecycle import ready_session
from ophelpers import (  # noqa: F401 (fixtures)
    db_fixture,
    defer,
    drainable_worker,
    eventually,
    job,
    live_worker,
    make_doing,
    ops_fixture,
    q,
)

from sessionq import config
from sessionq.console.server import ConsoleServer

CHROMIUM = "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()
ADMIN, READER = "admin-token-123", "reader-token-456"
TRACEBACK = ('Traceback (most recent call last):\n  File "jobs/operations.py", line 30, in execute_operation\n'
             '    outcome = await d.executor.run(UUID(session_id), job_id=job_id)\n'
             'ValueError: the actor template kagent/missing does not exist\n')


@pytest.fixture
async def console(store: Any) -> AsyncIterator[str]:
    settings = config.defaults().with_overrides(**{"auth.tokens": {ADMIN: "ada", READER: "rita"},
                                                   "auth.admins": ["ada"]})
    server = ConsoleServer(settings, store.pool)
    await server.start("127.0.0.1:0")
    yield f"http://127.0.0.1:{server.port}"
    await server.stop()


async def failed_job(db: Any) -> int:
    """A job whose last attempt failed, recorded as a worker records it (sessionq.end_job_attempt)."""
    worker = await live_worker(db, name="host-f-1")
    jid = await defer(db, "optest_sleep", {"key": "console", "seconds": 0})
    await make_doing(db, jid, worker)
    await q(db, "SELECT sessionq.end_job_attempt(%s, 'failed', false, 'ValueError', %s, %s)", jid,
            "the actor template kagent/missing does not exist", TRACEBACK)
    await q(db, "DELETE FROM procrastinate_workers WHERE id = %s", worker)
    return jid


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
    assert "/login" in page.url  # not logged in: the login form
    await page.fill("input[name=token]", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base}/")


async def test_log_in_find_a_failed_job_read_its_error_retry_it_and_drain_a_worker(
        browser, console, db, database_url, tmp_path):
    jid = await failed_job(db)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    async with drainable_worker(database_url, "host-w-1") as worker:
        page = await browser.new_page()
        await login(page, console, ADMIN)
        await page.screenshot(path=str(shots / "overview.png"), full_page=True)
        assert "Recent failures" in await page.content()
        # find the failed job from the overview and read its error
        await page.click(f"a[href='/jobs/{jid}']")
        await page.wait_for_url(f"{console}/jobs/{jid}")
        assert await page.inner_text(".error-type") == "ValueError"
        assert await page.inner_text(".error-message") == "the actor template kagent/missing does not exist"
        assert "in execute_operation" in await page.inner_text("pre.traceback")
        await page.screenshot(path=str(shots / "failed-job.png"), full_page=True)
        # retry it
        await page.click("button:has-text('Retry')")
        await page.wait_for_selector(".flash.ok")
        assert f"job {jid} is waiting to run again" in await page.inner_text(".flash.ok")
        async def ran() -> bool:  # the worker runs it again at once
            return (await job(db, jid))["status"] == "succeeded"

        await eventually(ran, what="the retried job ran")
        (action,) = await q(db, "SELECT action, actor FROM sessionq.job_actions WHERE job_id = %s", jid)
        assert (action["action"], action["actor"]) == ("requeued", "ada")
        await page.screenshot(path=str(shots / "retried-job.png"), full_page=True)
        # drain the worker
        await page.click("a[href='/workers']")
        row = page.locator("tr", has_text="host-w-1")
        await row.locator("button:has-text('Drain')").click()
        await page.wait_for_selector(".flash.ok")
        assert "requested for host-w-1" in await page.inner_text(".flash.ok")
        assert await worker.outcome() == "drained"
        await page.screenshot(path=str(shots / "drained.png"), full_page=True)
    for name in ("overview", "failed-job", "retried-job", "drained"):
        assert (shots / f"{name}.png").stat().st_size > 1000


@pytest.mark.slow
async def test_every_page_read_only_users_stale_actions_and_bad_input(browser, console, db, store, sim, ops,
                                                                     tmp_path):
    shots = tmp_path / "screenshots"
    shots.mkdir()
    s = await ready_session(store, sim, "req-console")
    jid = await failed_job(db)
    admin = await browser.new_page()
    await login(admin, console, ADMIN)
    for path, name in (("/sessions?q=" + s.creator, "sessions"), (f"/sessions/{s.id}", "session"),
                       ("/jobs?status=failed", "jobs"), ("/queues", "queues"), ("/workers", "workers"),
                       ("/actions", "actions")):
        response = await admin.goto(console + path)
        assert response.status == 200, path
        await admin.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    await admin.goto(f"{console}/sessions/{s.id}")
    assert "Nothing: a Delete would be admitted." in await admin.content()

    # a stale page: the job changed meanwhile, the action changes nothing and says so
    await admin.goto(f"{console}/jobs/{jid}")
    await ops.retry_job(jid, "someone-else")
    await admin.click("button:has-text('Retry')")
    await admin.wait_for_selector(".flash.bad")
    assert "is todo now, no longer failed; nothing was changed" in await admin.inner_text(".flash.bad")
    assert len(await q(db, "SELECT 1 FROM sessionq.job_actions WHERE job_id = %s", jid)) == 1

    # pause and resume a queue
    await admin.goto(f"{console}/queues")
    await admin.locator("tr", has_text="dispatch").locator("input[name=reason]").fill("maintenance")
    await admin.locator("tr", has_text="dispatch").locator("button:has-text('Pause')").click()
    await admin.wait_for_selector(".flash.ok")
    assert (await q(db, "SELECT paused_by, reason FROM sessionq.paused_queues"))[0] == {
        "paused_by": "ada", "reason": "maintenance"}
    await admin.screenshot(path=str(shots / "paused.png"), full_page=True)
    await admin.locator("tr", has_text="dispatch").locator("button:has-text('Resume')").click()
    await admin.wait_for_selector(".flash.ok")
    assert not await q(db, "SELECT 1 FROM sessionq.paused_queues")

    # bad input: a drain timeout that is no duration
    wid = await live_worker(db, name="host-bad-1")
    await admin.goto(f"{console}/workers")
    row = admin.locator("tr", has_text="host-bad-1")
    await row.locator("input[name=timeout]").fill("soon")
    await row.locator("button:has-text('Drain')").click()
    await admin.wait_for_selector(".flash.bad")
    assert "is not a duration" in await admin.inner_text(".flash.bad")
    assert not await q(db, "SELECT 1 FROM sessionq.worker_drains")
    assert wid

    # a read-only user sees no action, and no operator page (tests/operator/test_console_owners.py)
    reader = await (await browser.new_context()).new_page()
    await login(reader, console, READER)
    response = await reader.goto(f"{console}/jobs/{jid}")
    assert response is not None and response.status == 403
    assert "(read-only" in await reader.inner_text("header")
    assert await reader.locator("button:has-text('Retry')").count() == 0
    await reader.screenshot(path=str(shots / "read-only.png"), full_page=True)


async def test_authentication_csrf_and_validation_over_http(console, db):
    jid = await failed_job(db)
    async with httpx.AsyncClient(base_url=console, follow_redirects=False) as http:
        r = await http.get("/jobs")
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
        r = await http.post("/login", data={"token": "wrong", "next": "/"})
        assert r.status_code == 401 and "not known" in r.text
        r = await http.post("/login", data={"token": ADMIN, "next": "https://evil.example/"})
        assert r.status_code == 303 and r.headers["location"] == "/"  # never another site
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        page = await http.get(f"/jobs/{jid}")
        assert page.status_code == 200 and "ValueError" in page.text
        assert "default-src 'none'" in page.headers["content-security-policy"]
        # a form without the page's CSRF token changes nothing
        r = await http.post(f"/jobs/{jid}/retry", data={"expect": "failed", "csrf": "forged"})
        assert r.status_code == 403 and (await job(db, jid))["status"] == "failed"
        # bad input: one clear line, nothing changed
        for path, params in (("/jobs", {"status": "weird"}), ("/jobs", {"queue": "a b"}),
                             ("/sessions", {"q": "x" * 300}), ("/sessions/not-a-uuid", {})):
            r = await http.get(path, params=params)
            assert r.status_code in (400, 404) and "Refused" in r.text, (path, r.status_code)
        assert (await http.get("/jobs/999999")).status_code == 404
        assert (await http.get("/no/such/page")).status_code == 404
    async with httpx.AsyncClient(base_url=console, cookies={"sessionq_console": READER}) as reader:
        r = await reader.post(f"/jobs/{jid}/retry", data={"expect": "failed", "csrf": "x"})
        assert r.status_code == 403 and "may only read" in r.text
        assert (await job(db, jid))["status"] == "failed"


async def test_the_local_user_of_up_needs_no_login(store):
    server = ConsoleServer(config.defaults(), store.pool, local_user="me")
    await server.start("127.0.0.1:0")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            r = await http.get("/")
            assert r.status_code == 200 and "Sessions by state" in r.text and ">me<" in r.text.replace(" ", "")
        with pytest.raises(OSError):
            await ConsoleServer(config.defaults(), store.pool).start(f"127.0.0.1:{server.port}")  # in use
    finally:
        await server.stop()


def test_chromium_is_the_debian_package() -> None:
    # the tests never download a browser: Playwright drives the system's chromium
    assert shutil.which("chromium") in (None, CHROMIUM)
