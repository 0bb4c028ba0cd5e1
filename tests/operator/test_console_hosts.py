"""The console answers only the Host names it serves (DNS rebinding): a page of another site whose
name resolves to the console's loopback address must not read a page (and its CSRF token) nor
act as `sessionq up`'s local user, who needs no login. Real HTTP on a real socket."""

from __future__ import annotations

import re
from typing import Any

import httpx

from sessionq import config
from sessionq.console.server import ConsoleServer

CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


async def paused(store: Any, queue: str) -> bool:
    rows = await store._rows("SELECT paused FROM sessionq.queues WHERE queue_name = %s", (queue,))
    return bool(rows and rows[0]["paused"])


async def test_a_foreign_host_gets_no_page_no_token_and_no_action(store: Any) -> None:
    server = ConsoleServer(config.defaults(), store.pool, local_user="me")  # as `sessionq up` serves it
    await server.start("127.0.0.1:0")
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with httpx.AsyncClient(base_url=base) as http:
            for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", "localhost", "LOCALHOST.",
                         f"[::1]:{server.port}"):
                r = await http.get("/queues", headers={"Host": host})
                assert r.status_code == 200 and CSRF.search(r.text), host
            token = CSRF.findall((await http.get("/queues")).text)[0]
            queue = (await store._rows("SELECT queue_name FROM sessionq.queues ORDER BY 1 LIMIT 1"))[0]["queue_name"]

            for host in ("evil.example", f"evil.example:{server.port}", "127.0.0.1.evil.example", "",
                         "localhost.evil.example", "[::2]"):
                r = await http.get("/queues", headers={"Host": host})
                assert r.status_code == 400, host
                assert "csrf" not in r.text and len(r.text) < 200 and "allowedHosts" in r.text
                # even with the token (which the page cannot read), an action is refused
                r = await http.post(f"/queues/{queue}/pause", headers={"Host": host},
                                    data={"csrf": token, "reason": "rebound"})
                assert r.status_code == 400, host
            assert not await paused(store, queue)
            r = await http.post(f"/queues/{queue}/pause", data={"csrf": token, "reason": "mine"})
            assert r.status_code == 303 and await paused(store, queue)  # the console's own name still acts
    finally:
        await server.stop()


async def test_configured_hosts_are_answered_and_only_they(store: Any) -> None:
    settings = config.defaults().with_overrides(**{"server.allowedHosts": ["console.example", "*.corp.example"]})
    server = ConsoleServer(settings, store.pool, local_user="me")
    await server.start("127.0.0.1:0")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            for host, status in (("console.example", 200), ("console.example:8085", 200), ("a.corp.example", 200),
                                 ("corp.example", 400), ("127.0.0.1", 400), ("evil.example", 400)):
                assert (await http.get("/", headers={"Host": host})).status_code == status, host
    finally:
        await server.stop()


async def test_a_wildcard_address_answers_any_host_unless_listed(store: Any) -> None:
    server = ConsoleServer(config.defaults(), store.pool, local_user="me")
    await server.start("0.0.0.0:0")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            assert (await http.get("/", headers={"Host": "sessionq.internal"})).status_code == 200
    finally:
        await server.stop()
