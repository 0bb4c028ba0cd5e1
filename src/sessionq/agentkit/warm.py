"""A warm interpreter: a Python process that has imported `sessionq.agentkit` (and so a2a-sdk's
server) and waits for the process runtime to hand it an Actor (sessionq.runtime.process.warm). It
runs plain (`main`, under isolation none) or inside a warm sandbox (`sandbox_main`).

The runtime starts it as ``python -c "<import this module and call main>" FD ROOT`` in its own
process group (setpriv --pdeathsig KILL, like an Actor's process), with the runtime's base
environment, stdin from /dev/null. FD is its end of a unix socket pair. The protocol:

- the warm interpreter writes ``R`` once its imports are done;
- the runtime sends one assignment: 8 bytes (big-endian length) then that many bytes of JSON
  (``env``, ``cwd``, ``program``, ``mode`` "script" or "module", ``target``, ``args``, ``a2a_fd``,
  ``ready_fd``), with four descriptors attached (SCM_RIGHTS): the Actor's listening socket, its
  readiness socket (GET /readyz, agentkit/readiness.py), its stdout and its stderr log files;
- the warm interpreter makes itself what the interpreter would have been had it been exec'd for
  the Actor: stdout and stderr on the log files, the durable directory as working directory,
  `os.environ` replaced by exactly the Actor's environment, the listening sockets at the descriptor
  numbers the environment names (SESSIONQ_A2A_FD, SESSIONQ_READY_FD, inheritable), no other
  descriptor of its own; then it writes
  ``A`` and closes the socket pair (``E`` and a reason instead when it cannot, and exits);
- it sets `sys.argv`, `sys.orig_argv`, `sys.executable` and `sys.path[0]` as ``PROGRAM script.py
  ARGS`` or ``PROGRAM -m module ARGS`` would, and runs the script in `__main__` (compiled as the
  interpreter compiles it) or the module as `python -m` does (`runpy._run_module_as_main`). An
  uncaught exception is reported by `sys.excepthook` without this module's frames and exits with
  status 1, a missing script with the interpreter's message and status 2, SystemExit as always.

Inside a warm sandbox (`sandbox_main`) the runtime starts it as ``python -c "<import this module and
call sandbox_main>"`` (its own user, ``/data`` an empty directory of the runtime's, its own network
namespace), stdin a pipe from the runtime, stdout and stderr the sandbox's log files; no descriptor
is passed (gVisor's sandbox takes none but its standard streams):

- once its imports are done it listens on the readiness port its environment names
  (SESSIONQ_READY_PORT, the Actor's /readyz) and on 127.0.0.1:SANDBOX_PORT of its network namespace
  (what the runtime connects to, to know it is ready), and reads one line from stdin;
- the line is the assignment, JSON (``env``, ``cwd``, ``program``, ``mode``, ``target``, ``args``):
  it closes the SANDBOX_PORT listener, takes /dev/null as stdin, the durable directory as working
  directory and exactly the Actor's environment plus SESSIONQ_READY_FD, the readiness listener
  (inheritable; closed instead when the Actor's SESSIONQ_READY_PORT is another port), then runs the
  script or module as above (`run_assigned`);
- an empty stdin (the runtime let it go) ends it.

Besides the agent kit it imports the standard library and the uvicorn modules an agent kit agent
loads when it starts serving (`SERVING_MODULES`): what an Actor would load anyway.
"""

import json
import os
import signal
import socket
import struct
import sys
from types import TracebackType
from typing import Any

from sessionq.agentkit.readiness import READY_FD_ENV, READY_PORT_ENV

__all__ = ["SANDBOX_PORT", "main", "run_assigned", "sandbox_main"]

# what an agent kit agent imports when it starts serving (uvicorn's Config.load), imported here too
# (lifespan "off", the event loop asyncio.run's: server.serve does not load uvicorn.loops)
SERVING_MODULES = ("uvicorn.protocols.http.auto", "uvicorn.protocols.websockets.auto", "uvicorn.lifespan.off")
READY = b"R"
ACCEPTED = b"A"
REFUSED = b"E"
HEADER = struct.Struct(">Q")
FDS = 4  # the A2A socket, the readiness socket, stdout, stderr
SANDBOX_PORT = 8079  # on the loopback of a warm sandbox's network namespace, until an Actor is handed over


def _receive(control: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """The assignment and its descriptors; None when the runtime closed the socket instead."""
    data, fds, _flags, _addr = socket.recv_fds(control, HEADER.size, FDS)
    if not data:
        return None
    while len(data) < HEADER.size:
        more = control.recv(HEADER.size - len(data))
        if not more:
            return None
        data += more
    (size,) = HEADER.unpack(data)
    body = bytearray()
    while len(body) < size:
        more = control.recv(min(size - len(body), 1 << 20))
        if not more:
            return None
        body += more
    return json.loads(body), fds


def _become(task: dict[str, Any], fds: list[int]) -> None:
    """The process's descriptors, directory and environment as the Actor's (see the docstring)."""
    a2a, ready, out, err = fds
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    os.chdir(task["cwd"])
    os.environ.clear()
    os.environ.update(task["env"])
    fds[:] = [a2a, ready]


def _place_sockets(moves: list[tuple[int, int]]) -> None:
    """Each (received descriptor, number the environment names) to its number, inheritable; the
    received ones are moved out of the way first, so that no move closes another's descriptor."""
    import fcntl

    above = max([3, *(t for _, t in moves), *(f for f, _ in moves)]) + 1
    staged = []
    for fd, target in moves:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above)
        os.close(fd)
        staged.append((high, target))
    for high, target in staged:
        os.dup2(high, target, inheritable=True)
        os.close(high)


def _run(task: dict[str, Any]) -> None:
    program: str = task["program"]
    args: list[str] = list(task["args"])
    target: str = task["target"]
    sys.executable = program
    main = sys.modules["__main__"]
    if task["mode"] == "module":
        sys.argv = ["-m", *args]
        sys.orig_argv = [program, "-m", target, *args]
        if not sys.flags.safe_path:
            sys.path[0] = os.getcwd()
        import importlib
        import runpy

        importlib.invalidate_caches()
        run_as_main = runpy._run_module_as_main  # type: ignore[attr-defined]  # what `python -m` calls
        run_as_main(target, True)
        return
    sys.argv = [target, *args]
    sys.orig_argv = [program, target, *args]
    filename = target if os.path.isabs(target) else os.path.join(os.getcwd(), target)
    try:
        with open(filename, "rb") as f:
            source = f.read()
    except OSError as exc:
        sys.stderr.write(f"{program}: can't open file {filename!r}: [Errno {exc.errno}] {exc.strerror}\n")
        sys.stderr.flush()
        raise SystemExit(2) from None
    if not sys.flags.safe_path:
        sys.path[0] = os.path.dirname(os.path.realpath(filename))
    import importlib
    import importlib.machinery

    importlib.invalidate_caches()
    namespace = main.__dict__
    namespace["__file__"] = filename
    namespace["__cached__"] = None
    namespace["__loader__"] = importlib.machinery.SourceFileLoader("__main__", filename)
    code = compile(source, filename, "exec", dont_inherit=True)
    exec(code, namespace)


def _without_own_frames(tb: TracebackType | None) -> TracebackType | None:
    while tb is not None and tb.tb_frame.f_globals is globals():
        tb = tb.tb_next
    return tb


def _import_serving() -> None:
    import importlib

    for name in SERVING_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def main() -> None:
    """Wait for an assignment and run it (see the module docstring)."""
    control = socket.socket(family=socket.AF_UNIX, type=socket.SOCK_STREAM, fileno=int(sys.argv[1]))
    _import_serving()
    control.sendall(READY)
    got = _receive(control)
    if got is None:
        return  # the runtime let this warm interpreter go
    task, fds = got
    try:
        if len(fds) != FDS:
            raise OSError(f"expected {FDS} descriptors, got {len(fds)}")
        _become(task, fds)
    except Exception as exc:
        control.sendall(REFUSED + str(exc).encode(errors="replace"))
        raise SystemExit(1) from None
    control.sendall(ACCEPTED)
    control.close()
    _place_sockets([(fds[0], int(task["a2a_fd"])), (fds[1], int(task["ready_fd"]))])
    run_assigned(task)


def run_assigned(task: dict[str, Any]) -> None:
    """Run the assignment's script or module as the interpreter would have (module docstring); an
    uncaught exception is reported without this module's frames and exits with status 1."""
    try:
        _run(task)
    except SystemExit:
        raise
    except BaseException as exc:
        tb = _without_own_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        if isinstance(exc, KeyboardInterrupt):  # the interpreter then ends by SIGINT
            import atexit

            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(1) from None


def sandbox_main() -> None:
    """Inside a warm sandbox: listen to say ready, read the assignment from stdin and run it (see the
    module docstring)."""
    _import_serving()
    # the Actor's readiness endpoint listens from now on: the runtime's first GET /readyz after the
    # hand-over waits in its backlog until the agent serves it, as under isolation none, instead of
    # being refused and asked again
    ready = _listen(int(os.environ[READY_PORT_ENV]), 16) if os.environ.get(READY_PORT_ENV) else None
    listener = _listen(SANDBOX_PORT, 8)
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
    if ready is not None:
        if os.environ.get(READY_PORT_ENV) == str(ready.getsockname()[1]):
            ready.set_inheritable(True)  # what the agent kit serves /readyz on (readiness.env_listener)
            os.environ[READY_FD_ENV] = str(ready.detach())
        else:
            ready.close()
    run_assigned(task)


def _listen(port: int, backlog: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(backlog)
    return listener
