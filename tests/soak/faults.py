"""The fault schedule (a pure function of the seed and the duration) and its execution.

Kinds:
- ``kill``: kill -9 of one API or worker process, restarted after a pause (never the last
  running process of its kind);
- ``pg_restart``: PostgreSQL stopped and started again (one per 10 minutes of run, at least one);
- ``sim``: a runtime fault through the simulator's `inject` (delay, fail_before = an error before
  the effect, lose_after = the effect happens but the response is lost), on a Substrate method.

No faults in the first seconds (warm-up: the baseline) nor in the last ones (cool-down: the
system settles before the checks), and no kills around a PostgreSQL restart so that the
recovery measured is PostgreSQL's.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field
from typing import Any

from sessionq.runtime.base import Code

from .cluster import CLAIM_LIFETIME

SIM_METHODS = {  # method -> weight
    "create_actor": 4, "suspend_actor": 4, "resume_actor": 4, "delete_actor": 3, "invoke": 3,
    "create_tag": 2, "get_actor": 2, "create_egress_policy": 1, "get_egress_policy": 1, "get_tag": 1,
}
MUTATIONS = {"create_actor", "suspend_actor", "resume_actor", "delete_actor", "create_tag", "create_egress_policy"}
CODES = [Code.UNAVAILABLE, Code.UNAVAILABLE, Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.INTERNAL, Code.ABORTED]


@dataclass
class Fault:
    at: float  # seconds after the start of the load
    kind: str  # kill | pg_restart | sim
    target: str = ""  # process name or Substrate method
    params: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        if self.kind == "kill":
            return f"kill -9 {self.target} (restart after {self.params['pause']:.1f}s)"
        if self.kind == "pg_restart":
            return f"PostgreSQL restart (down {self.params['pause']:.1f}s)"
        p = self.params
        extra = f" {p['delay']:.1f}s" if p["fault"] == "delay" else f" {p['code']}"
        return f"sim {p['fault']} {self.target}{extra} x{p['times']}"


def plan(seed: int, duration: float, processes: list[str], pg_faults: int | None = None,
         kills: bool = True) -> list[Fault]:
    """pg_faults: how many PostgreSQL faults (restarts, or failovers on a formation); default one per
    10 minutes, at least one. kills: whether sessionq processes are killed too."""
    rng = random.Random(f"faults:{seed}")
    warm = min(8.0, max(4.0, 0.1 * duration))
    cool = max(6.0, 0.1 * duration)
    end = duration - cool
    faults: list[Fault] = []

    # PostgreSQL restarts: one per 10 minutes, at least one, each with 8 s before and 15 s after it
    n_pg = pg_faults or max(1, int(duration // 600))
    pg_times = []
    for i in range(n_pg):
        center = duration * (i + 0.45) / n_pg + rng.uniform(-0.03, 0.03) * duration / n_pg
        at = min(max(center, warm + 8.0), max(warm + 8.0, end - 12.0))
        pg_times.append(at)
        faults.append(Fault(at, "pg_restart", "postgresql", {"pause": rng.uniform(1.0, 3.0)}))

    def quiet(t: float, before: float, after: float) -> bool:
        return all(not (p - before <= t <= p + after) for p in pg_times)

    # kill -9 of a process every 7-14 s
    t = warm + rng.uniform(0.0, 3.0)
    while kills and t < end - 2:
        pause = rng.uniform(1.0, 4.0)
        if quiet(t, 10.0, 15.0) and quiet(t + pause, 10.0, 15.0):
            faults.append(Fault(t, "kill", rng.choice(processes), {"pause": pause}))
        t += rng.uniform(7.0, 14.0)

    # runtime faults every 0.4-1.5 s
    methods, weights = list(SIM_METHODS), list(SIM_METHODS.values())
    t = warm + rng.uniform(0.0, 1.0)
    while t < end:
        method = rng.choices(methods, weights=weights)[0]
        kinds = ["delay", "fail_before", "lose_after"] if method in MUTATIONS or method == "invoke" \
            else ["delay", "fail_before"]
        fault = rng.choice(kinds)
        delay = 0.0
        if fault == "delay":
            # mostly short; now and then longer than a claim lifetime (the attempt's deadline cuts it)
            long = method in MUTATIONS and rng.random() < 0.1
            delay = CLAIM_LIFETIME + 1.0 if long else rng.uniform(0.1, 2.0)
        faults.append(Fault(t, "sim", method, {
            "fault": fault, "delay": delay, "code": rng.choice(CODES).name, "times": rng.choice([1, 1, 1, 2, 3]),
        }))
        t += rng.uniform(0.4, 1.5)
    faults.sort(key=lambda f: f.at)
    return faults


class FaultRunner:
    """Executes a plan against the cluster; records every fault (and whether it took) in the history."""

    def __init__(self, harness: Any, faults: list[Fault]) -> None:
        self.h = harness
        self.faults = faults
        self.pg_events: list[dict[str, Any]] = []  # {"down": t, "up": t} relative to the run start
        self._tasks: set[asyncio.Task[None]] = set()
        self.down: set[str] = set()

    async def run(self, t_start: float) -> None:
        """t_start: the harness clock (history.now()) when the load started."""
        history = self.h.history
        for f in self.faults:
            delay = t_start + f.at - history.now()
            if delay > 0:
                await asyncio.sleep(delay)
            if f.kind == "sim":
                await self._sim(f)
            else:
                task = asyncio.create_task(self._kill(f) if f.kind == "kill" else self._pg(f))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        """Let running kills and restarts finish (processes come back)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _sim(self, f: Fault) -> None:
        p = f.params
        record = {"kind": "sim", "fault": p["fault"], "method": f.target, "times": p["times"],
                  "delay": round(p["delay"], 2), "code": p["code"]}
        try:
            record["id"] = await asyncio.wait_for(self.h.sim.inject(
                f.target, p["fault"], code=Code[p["code"]], delay=p["delay"], times=p["times"]), 5)
            record["ok"] = True
        except Exception as e:  # PostgreSQL may be down right now
            record["ok"] = False
            record["error"] = f"{type(e).__name__}: {e}"[:200]
        self.h.history.fault(record)

    async def _kill(self, f: Fault) -> None:
        proc = self.h.cluster.by_name(f.target)
        same_kind = [p for p in self.h.cluster.procs if p.kind == proc.kind and p is not proc]
        if f.target in self.down or not proc.alive() or all(p.name in self.down for p in same_kind):
            self.h.history.fault({"kind": "kill", "target": f.target, "ok": False, "error": "skipped: keep one up"})
            return
        self.down.add(f.target)
        pid = proc.pid
        try:
            await asyncio.to_thread(proc.kill9)
            self.h.history.fault({"kind": "kill", "target": f.target, "pid": pid, "ok": True,
                                  "pause": round(f.params["pause"], 2)})
            await asyncio.sleep(f.params["pause"])
            await self.h.start_process(proc)
            self.h.history.fault({"kind": "restart", "target": f.target, "pid": proc.pid, "ok": True})
        finally:
            self.down.discard(f.target)

    async def _pg(self, f: Fault) -> None:
        history = self.h.history
        history.fault({"kind": "pg_restart", "phase": "stopping", "ok": True})
        try:
            down, up, how = await asyncio.to_thread(self.h.cluster.db.restart, f.params["pause"])
        except Exception as e:
            history.fault({"kind": "pg_restart", "phase": "failed", "ok": False, "error": str(e)[:300]})
            raise
        event = {"down": down - history.t0, "up": up - history.t0, "how": how}
        self.pg_events.append(event)
        history.fault({"kind": "pg_restart", "phase": "up", "ok": True, "how": how,
                       "down_for": round(up - down, 2)})
        with contextlib.suppress(Exception):
            await self.h.ensure_running()
