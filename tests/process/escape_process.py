"""An Actor's program that tries to leave its sandbox (tests/process/test_isolation.py): each attempt
named in ESCAPE_TARGETS (a JSON object in its environment) is made, and what it reached is written
to ``escape.json`` in its durable directory (an attempt's value: what it got, or the error's name)."""

import json
import os
import pathlib
import socket
import time
import urllib.request

targets = json.loads(os.environ["ESCAPE_TARGETS"])
data = pathlib.Path(os.environ["SESSIONQ_DATA_DIR"])
report: dict[str, object] = {}


def attempt(name: str, fn) -> None:  # type: ignore[no-untyped-def]
    try:
        report[name] = {"reached": True, "value": fn()}
    except Exception as exc:
        report[name] = {"reached": False, "error": f"{type(exc).__name__}: {exc}"[:300]}


def read_any(path: str) -> str:
    p = pathlib.Path(path)
    if p.is_dir():
        return ",".join(sorted(os.listdir(p)))[:200]
    return p.read_text()[:200]


def connect_tcp(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=3):
        return "connected"


def connect_unix(path: str) -> str:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(3)
        s.connect(path)
        return "connected"


def write(path: str) -> str:
    pathlib.Path(path).write_text("escaped")
    return "written"


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return f"{r.status} {r.read(300).decode(errors='replace')}"
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{e.code} {e.read(300).decode(errors='replace')}") from None


attempt("other_actor", lambda: read_any(targets["other_actor"]))
attempt("runtime_root", lambda: read_any(targets["runtime_root"]))
attempt("config", lambda: read_any(targets["config"]))
attempt("database_tcp", lambda: connect_tcp(targets["database_host"], int(targets["database_port"])))
if targets.get("database_socket"):
    attempt("database_socket", lambda: connect_unix(targets["database_socket"]))
attempt("host_process", lambda: read_any(f"/proc/{targets['runtime_pid']}/cmdline"))
attempt("processes", lambda: len([p for p in os.listdir("/proc") if p.isdigit()]))
for i, path in enumerate(targets["writes"]):
    attempt(f"write_{i}", lambda path=path: write(path))
attempt("write_data", lambda: write(str(data / "inside.txt")))
attempt("write_tmp", lambda: write("/tmp/inside.txt"))
attempt("resolve", lambda: socket.getaddrinfo(targets["unmatched_name"], 80)[0][4][0])
attempt("fetch_refused", lambda: fetch(f"http://{targets['unmatched_name']}/"))
if targets.get("allowed_url"):
    attempt("fetch_allowed", lambda: fetch(targets["allowed_url"]))
attempt("environment", lambda: dict(os.environ))
attempt("uid", lambda: os.getuid())
(data / "escape.tmp").write_text(json.dumps(report))
(data / "escape.tmp").rename(data / "escape.json")  # whole when the test sees it
(data / "ready").write_text(str(os.getpid()))
# then fetch what the test asks for, one URL at a time (`fetch` in, `fetch.out` back)
request, answer = data / "fetch", data / "fetch.out"
while True:
    if request.exists():
        url = request.read_text()
        request.unlink()
        try:
            result = {"reached": True, "value": fetch(url)}
        except Exception as exc:
            result = {"reached": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        tmp = data / "fetch.tmp"
        tmp.write_text(json.dumps(result))
        tmp.rename(answer)
    time.sleep(0.05)
