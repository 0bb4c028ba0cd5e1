"""A warm sandbox's interpreter: a Python process started inside a sandbox before its Actor is known
(sessionq.runtime.process.spare), which has imported the agent kit (and so a2a-sdk's server) and
waits for the runtime to hand it an Actor.

The runtime starts it as ``python -c "<import this module and call main>"`` inside the sandbox (its
own user, ``/data`` an empty directory of the runtime's, its own network namespace), stdin a pipe
from the runtime, stdout and stderr the sandbox's log files. The protocol, with no descriptor
passed (gVisor's sandbox takes none but its standard streams):

- once its imports are done it listens on 127.0.0.1:SPARE_PORT of its network namespace (what the
  runtime connects to, to know it is ready) and reads one line from stdin;
- the line is the assignment, JSON (``env``, ``cwd``, ``program``, ``mode`` "script" or "module",
  ``target``, ``args``): it closes that listener, takes /dev/null as stdin, the durable directory as
  working directory and exactly the Actor's environment, then runs the script or module as the
  process runtime's warm interpreter does (`sessionq.agentkit.warm.run_assigned`);
- an empty stdin (the runtime let it go) ends it.
"""

import json
import os
import socket
import sys

__all__ = ["SPARE_PORT", "main"]

SPARE_PORT = 8079  # on the loopback of the sandbox's network namespace, until an Actor is handed over


def main() -> None:
    import importlib

    from sessionq.agentkit import warm

    for name in warm.SERVING_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", SPARE_PORT))
    listener.listen(8)
    line = sys.stdin.buffer.readline()
    listener.close()
    if not line.strip():
        return  # the runtime let this warm sandbox go
    task = json.loads(line)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(task["cwd"])
    os.environ.clear()
    os.environ.update(task["env"])
    warm.run_assigned(task)
