"""A real browser calls the API over gRPC-Web: a page of another origin (CORS: server.corsOrigins)
using the npm package grpc-web (Google's client, installed here with npm into a cache) in
Debian's Chromium through Playwright: GetSession (unary) and A2A SendStreamingMessage (server
streaming), with the user's bearer token."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import apply_agent
from test_one_port import create_session, public_port

pytestmark = pytest.mark.timeout(240)

CHROMIUM = "/usr/bin/chromium"
GRPC_WEB_VERSION = "2.1.1"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sessionq-grpcweb" / GRPC_WEB_VERSION

PAGE = """<!doctype html><meta charset="utf-8"><title>grpc-web</title>
<script type="module">
import {GrpcWebClientBase, MethodDescriptor, MethodType} from "./grpc-web.js";
// a few protobuf fields written by hand: strings and messages (wire type 2), varints (wire type 0)
const utf8 = (s) => new TextEncoder().encode(s);
const varint = (n) => { const out = []; while (n > 127) { out.push((n & 127) | 128); n >>>= 7; } out.push(n); return out; };
const field = (tag, bytes) => [...varint((tag << 3) | 2), ...varint(bytes.length), ...bytes];
const number = (tag, n) => [...varint(tag << 3), ...varint(n)];
class Raw { constructor(bytes) { this.bytes = new Uint8Array(bytes); } }
const descriptor = (path, type) => new MethodDescriptor(path, type, Raw, Uint8Array, (r) => r.bytes, (b) => b);
const text = (bytes) => new TextDecoder().decode(bytes);

window.getSession = (api, token, id) => new Promise((resolve) => {
  const client = new GrpcWebClientBase({format: "binary"});
  client.rpcCall(api + "/kagent.api.v1alpha1.SessionService/GetSession", new Raw(field(1, utf8(id))),
    {authorization: "Bearer " + token},
    descriptor("/kagent.api.v1alpha1.SessionService/GetSession", MethodType.UNARY),
    (err, answer) => resolve(err ? {code: err.code, message: err.message} : {code: 0, text: text(answer)}));
});

window.stream = (api, token, tenant, contextId, words) => new Promise((resolve) => {
  const client = new GrpcWebClientBase({format: "text"});
  const part = field(1, utf8(words));
  const message = [...field(1, utf8(crypto.randomUUID())), ...field(2, utf8(contextId)), ...number(4, 1),
                   ...field(5, part)];
  const request = new Raw([...field(1, utf8(tenant)), ...field(2, message)]);
  const events = [];
  const call = client.serverStreaming(api + "/lf.a2a.v1.A2AService/SendStreamingMessage", request,
    {authorization: "Bearer " + token},
    descriptor("/lf.a2a.v1.A2AService/SendStreamingMessage", MethodType.SERVER_STREAMING));
  call.on("data", (b) => events.push(text(b)));
  call.on("error", (e) => resolve({code: e.code, message: e.message, events}));
  call.on("end", () => resolve({code: 0, events}));
});
window.ready = true;
</script>
"""


def grpc_web_module() -> Path:
    """The ES module of the npm package grpc-web (installed with npm when missing)."""
    module = CACHE / "node_modules" / "grpc-web" / "index.esm.js"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not module.exists():
            npm = shutil.which("npm")
            if npm is None:
                pytest.skip("npm is not available: cannot install grpc-web")
            r = subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(CACHE),
                                f"grpc-web@{GRPC_WEB_VERSION}"], capture_output=True, text=True, timeout=300)
            assert r.returncode == 0 and module.exists(), r.stderr
    return module


@contextlib.contextmanager
def page_server(folder: Path) -> Iterator[int]:
    """The page's own origin: a static HTTP server of `folder` on loopback."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None  # type: ignore[method-assign]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (.ci/run installs it)")
async def test_a_browser_page_calls_getsession_and_an_a2a_stream_over_grpc_web(store, sim, database_url, tmp_path):
    module = await asyncio.to_thread(grpc_web_module)
    shutil.copy(module, tmp_path / "grpc-web.js")
    (tmp_path / "index.html").write_text(PAGE)
    await apply_agent(store, sim)
    from playwright.async_api import async_playwright

    with page_server(tmp_path) as page_port:
        origin = f"http://127.0.0.1:{page_port}"
        async with public_port(store, sim, database_url, **{"server.corsOrigins": [origin]}) as public:
            api = f"http://127.0.0.1:{public.port}"
            session = await create_session(f"127.0.0.1:{public.port}")
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
                try:
                    page = await browser.new_page()
                    await page.goto(f"{origin}/index.html")
                    await page.wait_for_function("window.ready === true")
                    got = await page.evaluate("([a, t, i]) => window.getSession(a, t, i)", [api, "alice-token", session.id])
                    assert got["code"] == 0 and session.id in got["text"], got
                    denied = await page.evaluate("([a, t, i]) => window.getSession(a, t, i)", [api, "bob-token", session.id])
                    assert denied["code"] == 5, denied  # another user's Session: NOT_FOUND
                    streamed = await page.evaluate("([a, t, n, c, w]) => window.stream(a, t, n, c, w)",
                                                   [api, "alice-token", "kagent/my-first-agent", session.id, "hello"])
                    assert streamed["code"] == 0 and len(streamed["events"]) >= 2, streamed
                finally:
                    await browser.close()
