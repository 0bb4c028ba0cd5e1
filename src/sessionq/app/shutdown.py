"""Stopping a long-running command (`up`, `serve`, `worker`, `runtime serve`): `Shutdown`.

The first SIGINT or SIGTERM starts a graceful stop - the API stops
admitting (in-flight calls get up to 5 s), the workers drain (running jobs get
workers.shutdownTimeout) - and the process exits 0. A second signal, or a graceful stop still
running FORCE_AFTER seconds past workers.shutdownTimeout (e.g. because PostgreSQL is gone and
nothing can be recorded), forces it: one ERROR line says why and what is cut short, running jobs
and calls are cancelled, connections close without waiting, the embedded PostgreSQL of `up` is
told to stop, and the process exits with status 1 within FORCE_BUDGET seconds whatever is still
running. A third signal exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("sessionq")

API_GRACE = 5.0  # how long in-flight calls may finish when the API stops (at most workers.shutdownTimeout)
FORCE_AFTER = 2.0  # a graceful stop still running this long past workers.shutdownTimeout is forced
FORCE_BUDGET = 2.0  # a forced stop ends the process within this many seconds, whatever still runs
EXIT_FORCED = 1


class Shutdown:
    """SIGINT/SIGTERM handling of a long-running command; `stop` is the graceful stop's event.

    See the module's docstring. `on_force` registers what a forced stop must do at once; such an
    action must not wait (it runs on the event loop, or from the last-resort exit's thread when the
    loop is stuck) and runs once.
    """

    def __init__(self, timeout: float) -> None:
        self.stop = asyncio.Event()
        self.timeout = timeout
        self.forced: str | None = None  # why, once forced
        self.signals = 0
        self._loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        self._timer: asyncio.TimerHandle | None = None
        self._actions: list[tuple[str, Callable[[], None]]] = []
        self._lock = threading.Lock()

    @property
    def limit(self) -> float:
        """How long a graceful stop may run before it is forced."""
        return self.timeout + FORCE_AFTER

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self._loop.add_signal_handler(sig, self.signalled, sig)

    def on_force(self, what: str, action: Callable[[], None]) -> None:
        """Have a forced stop do `action` (named `what` in its line); at once if the stop was
        forced already. Any thread may call it."""
        with self._lock:
            self._actions.append((what, action))
            now = self.forced is not None
        if now:
            self._run_actions()

    def signalled(self, sig: int) -> None:
        self.signals += 1
        name = signal.Signals(sig).name
        if self.signals == 1:
            log.warning("%s: stopping gracefully (at most %gs; %s again forces the stop)", name, self.limit, name)
            self.begin()
        elif self.forced is None:
            self.force(f"a second signal ({name}) during the graceful stop")
        else:
            log.error("%s: a third signal; exiting now", name)
            self.exit_now()

    def begin(self) -> None:
        """Start the graceful stop; it is forced if still running after `limit` seconds."""
        self.stop.set()
        if self._timer is None:
            why = f"the graceful stop was still running after {self.limit:g}s"
            self._timer = self._loop.call_later(self.limit, self.force, why)
            self._exit_later(self.limit + FORCE_BUDGET, why)  # even if the event loop is stuck

    def force(self, why: str) -> None:
        """Cut the stop short: one line, the actions, the main task cancelled, and an exit within
        FORCE_BUDGET seconds whatever is still running."""
        if not self._announce(why):
            return
        self.stop.set()
        self._run_actions()
        self._exit_later(FORCE_BUDGET, why)
        if self._main is not None and not self._main.done():
            self._main.cancel()

    def _announce(self, why: str) -> bool:
        with self._lock:
            if self.forced is not None:
                return False
            self.forced = why
        what = ["running jobs and calls cancelled", "database connections closed without waiting",
                *(w for w, _ in self._actions)]
        log.error("forced stop (%s): %s; exit status %d", why, ", ".join(what), EXIT_FORCED)
        return True

    def _run_actions(self) -> None:
        with self._lock:
            actions, self._actions = self._actions, []
        for what, action in actions:
            try:
                action()
            except Exception as e:  # the others must still run
                log.error("forced stop: %s failed: %s", what, e)

    def _exit_later(self, delay: float, why: str) -> None:
        timer = threading.Timer(delay, self.exit_now, kwargs={"why": why})
        timer.daemon = True
        timer.start()

    def hand_over(self) -> None:
        """The command is done and its event loop about to close: closing resets the loop's signal
        handlers to the default action, and a signal that arrives while the process then waits for
        its threads would kill it without a word. The handlers leave the loop now, and from here a
        signal forces the exit at once, with the forced stop's line."""

        def late(signum: int, _frame: object) -> None:
            self.exit_now(f"a {signal.Signals(signum).name} while exiting")

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self._loop.remove_signal_handler(sig)
                signal.signal(sig, late)

    def exit_now(self, why: str = "a third signal") -> None:
        """The last resort (any thread): the forced stop's actions if not done yet, then exit."""
        self._announce(why)
        self._run_actions()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(EXIT_FORCED)
