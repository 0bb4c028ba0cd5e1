"""A process for the warm interpreter tests: it writes what it sees as it starts (its environment,
working directory, argv, sys.path, descriptors, process group, standard streams, __main__) to
``probe.json`` in its working directory before importing anything else, then does what its first
argument says:

- ``sleep`` (default): writes ``ready`` (its pid) and sleeps until signalled;
- ``plant``: copies itself into the working directory as ``probe_mod.py`` (for ``-m probe_mod``),
  then sleeps;
- ``raise``: prints a line to stdout and stderr, then raises an uncaught exception;
- ``exit``: exits with the status its second argument gives.
"""

import json
import os
import sys

import __main__

_fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
_seen = {
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "executable": sys.executable,
    "path": sys.path,
    "file": __file__,
    "main": sorted(k for k in vars(__main__) if k.startswith("__")),
    "loader": type(__main__.__loader__).__name__,
    "spec": None if __main__.__spec__ is None else __main__.__spec__.name,
    "fds": _fds,
    "own_group": os.getpgid(0) == os.getpid() and os.getsid(0) == os.getpid(),
    "parent": os.getppid(),
    "stdin": os.readlink("/proc/self/fd/0"),
    "stdout": os.readlink("/proc/self/fd/1"),
    "stderr": os.readlink("/proc/self/fd/2"),
    # (in a sandbox the agent binds its own: no descriptor is inherited)
    "a2a_inheritable": "SESSIONQ_A2A_FD" in os.environ and os.get_inheritable(int(os.environ["SESSIONQ_A2A_FD"])),
    "ready_inheritable": "SESSIONQ_READY_FD" in os.environ and os.get_inheritable(int(os.environ["SESSIONQ_READY_FD"])),
    "flags": list(sys.flags),
    "stdio": [sys.stdout.encoding, sys.stderr.encoding, sys.stdout.line_buffering],
}
with open("probe.json", "w") as f:
    json.dump(_seen, f)

import pathlib  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402

mode = sys.argv[1] if len(sys.argv) > 1 else "sleep"
if mode == "raise":
    print("to stdout")
    print("to stderr", file=sys.stderr)

    def fail() -> None:
        raise ValueError("the probe failed on purpose")

    fail()
if mode == "exit":
    sys.exit(int(sys.argv[2]))
if mode == "plant":
    shutil.copy(__file__, "probe_mod.py")
pathlib.Path("ready").write_text(str(os.getpid()))
while True:
    time.sleep(1)
