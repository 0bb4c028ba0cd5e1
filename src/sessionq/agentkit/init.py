"""The first process of an Actor's gVisor sandbox (``python -I -S .../agentkit/init.py COMMAND...``, a
script: it imports only the standard library, and nothing of the agent kit's package):
it runs the Actor's command as its child, passes on the signals the runtime sends (SIGTERM, SIGINT,
SIGHUP), reaps every process orphaned inside the sandbox (a command a bash call left behind would
otherwise stay a zombie of the Actor's own process, counting against its process limit), and exits
with the command's status (128 + the signal's number when a signal ended it)."""

from __future__ import annotations

import os
import signal
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m sessionq.agentkit.init COMMAND [ARGS...]", file=sys.stderr)
        return 2
    child = os.fork()
    if child == 0:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"{argv[0]}: {exc.strerror}", file=sys.stderr)
            os._exit(127)
    for sig in FORWARDED:
        signal.signal(sig, lambda number, _frame: os.kill(child, number))
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == child:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
