"""A small process for the process runtime's tests (not an agent): it counts its starts in its
durable directory, then behaves as its first argument says.

- ``sleep`` (default): writes ``ready`` (its pid) and sleeps until signalled;
- ``crash``: prints a line to stderr and exits with status 3;
- ``leak``: prints its environment's values (its workload token, the Agent's env) to stderr, among
  much other output, and exits with status 4 (a crash message must quote none of them);
- ``ignore-term``: like sleep, but ignores SIGTERM (the runtime must SIGKILL it);
- ``grandchild``: like sleep, after starting a ``sleep`` child whose pid it writes to ``grandchild``;
- ``environ``: like sleep, after writing what it can read of its parent's (the runtime's)
  /proc/PID/environ to ``runtime-environ`` and its own environment to ``own-environ``.
"""

import os
import pathlib
import signal
import subprocess
import sys
import time

data = pathlib.Path(os.environ["SESSIONQ_DATA_DIR"])
assert pathlib.Path.cwd().resolve() == data.resolve(), "the working directory is the durable directory"
starts = data / "starts"
starts.write_text(str(int(starts.read_text()) + 1 if starts.exists() else 1))
(data / "env-actor").write_text(os.environ.get("SESSIONQ_ACTOR", ""))
mode = sys.argv[1] if len(sys.argv) > 1 else "sleep"
if mode == "crash":
    print("boom: the fixture process failed on purpose", file=sys.stderr, flush=True)
    sys.exit(3)
if mode == "leak":
    token = os.environ.get("SESSIONQ_WORKLOAD_TOKEN", "")
    print(f"starting with token {token}", file=sys.stderr)
    print("x" * 5000, file=sys.stderr)  # far more than a crash message quotes
    print(f"env: API_KEY={os.environ.get('API_KEY')} GREETING={os.environ.get('GREETING')}", file=sys.stderr)
    print(f"another session's credential: sqw.0190b2c4-8f5e-7a10-9b2d-3c4d5e6f7a8b.{'ab' * 32}", file=sys.stderr)
    print(f"Authorization: Bearer {token}", file=sys.stderr)
    print("fatal: leaked on purpose", file=sys.stderr, flush=True)
    sys.exit(4)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "environ":
    try:
        seen = pathlib.Path(f"/proc/{os.getppid()}/environ").read_bytes()
    except OSError as exc:
        seen = f"unreadable: {exc.strerror}".encode()
    (data / "runtime-environ").write_bytes(seen)
    own = pathlib.Path("/proc/self/environ").read_bytes() + b"\0" + repr(dict(os.environ)).encode()
    (data / "own-environ").write_bytes(own)
if mode == "grandchild":
    child = subprocess.Popen(["sleep", "1000"])
    (data / "grandchild").write_text(str(child.pid))
(data / "ready").write_text(str(os.getpid()))
while True:
    time.sleep(1)
