"""Fault injection: what a test (in any process) asks the simulated runtime to do to its calls.

Faults are rows of ``substrate_sim.faults``, so they work across processes. A call consumes, under
a row lock, at most one *wait* fault (``delay``, ``block``) and at most one *outcome* fault
(``fail_before``, ``lose_after``, ``empty_page``, ``stuck_token``), the oldest matching of each.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import tzinfo
from typing import Any, NoReturn, TypeVar

from sessionq.runtime.base import (
    Code,
    Substrate,
    SubstrateError,
)
from sessionq.runtime.simulator.database import POLL_INTERVAL, SimulatorDatabase

T = TypeVar("T")

PROTOCOL_METHODS: frozenset[str] = frozenset(
    name
    for klass in Substrate.__mro__
    if klass is not object
    for name, value in vars(klass).items()
    if not name.startswith("_") and inspect.iscoroutinefunction(value)
)
LIST_METHODS = frozenset({"list_actors", "list_workers"})

_WAIT_KINDS = frozenset({"delay", "block"})  # also spelled out in substrate_sim.take_faults
_LIST_KINDS = frozenset({"empty_page", "stuck_token"})
FAULT_KINDS = frozenset({"delay", "fail_before", "lose_after", "block"}) | _LIST_KINDS


@dataclass(frozen=True)
class _Fault:
    id: int
    kind: str
    code: Code
    delay: float


# One statement: take the call's faults, and apply the call only when none matched.
_GATED = (
    "SELECT CASE WHEN t.faults IS NULL THEN {call} ELSE jsonb_build_object('faults', t.faults) END"
    " FROM substrate_sim.take_faults(%(fault_method)s, %(fault_target)s) AS t(faults)"
)


def _faults_from_json(data: list[dict[str, Any]] | None) -> list[_Fault]:
    """The faults substrate_sim.take_faults returned (NULL: none)."""
    return [_Fault(id=int(d["id"]), kind=d["kind"], code=Code(d["code"]), delay=float(d["delay"])) for d in data or ()]


class FaultInjection(SimulatorDatabase):
    """The calls' gate (every runtime call takes its faults first) and the test hooks that inject,
    release and count faults."""

    async def _take_faults(self, method: str, target: str | None) -> list[_Fault]:
        """Atomically consume the oldest matching wait fault and the oldest matching outcome fault
        (substrate_sim.take_faults).

        One statement on an autocommit connection (its own transaction): with no faults injected,
        which is the common case, a call pays one round trip for this. A name with a NUL (which the
        call then refuses) is named by no fault, PostgreSQL text cannot hold it: only the method's
        unnamed faults match."""
        if target is not None and "\x00" in target:
            target = None
        result, _ = await self.execute("SELECT substrate_sim.take_faults(%s, %s)", (method, target))
        return _faults_from_json(result)

    async def _block_on(self, fault_id: int) -> None:
        """Wait until the block fault is released. Each step is one autocommit statement, so a
        blocked call never sits idle in a transaction (what the control plane must never do during
        runtime I/O stays observable in pg_stat_activity)."""
        await self.execute(
            "UPDATE substrate_sim.faults SET blocked = blocked + 1, blocked_total = blocked_total + 1"
            " WHERE id = %s RETURNING id",
            (fault_id,),
        )
        try:
            while True:
                released, _ = await self.execute(
                    "SELECT coalesce((SELECT released FROM substrate_sim.faults WHERE id = %s), true)", (fault_id,)
                )
                if released:
                    return
                await asyncio.sleep(POLL_INTERVAL)
        finally:
            with contextlib.suppress(Exception):
                await self.execute(
                    "UPDATE substrate_sim.faults SET blocked = greatest(blocked - 1, 0) WHERE id = %s RETURNING id",
                    (fault_id,),
                )

    async def _call(
        self,
        method: str,
        target: str | None,
        op: Callable[[], Awaitable[T]],
        fake_page: Callable[[str], T] | None = None,
    ) -> T:
        """Take the call's faults, then run `op` under them (`_under_faults`)."""
        faults = await self._take_faults(method, target)
        return await self._under_faults(method, target, faults, op, fake_page)

    async def _under_faults(
        self,
        method: str,
        target: str | None,
        faults: list[_Fault],
        op: Callable[[], Awaitable[T]],
        fake_page: Callable[[str], T] | None = None,
    ) -> T:
        """Honour the faults a call took: waits first; then fail_before raises before `op`, a list
        fault answers with `fake_page`, lose_after runs `op` and raises; without an outcome fault
        the result of `op`."""
        for fault in faults:
            if fault.kind == "delay":
                await asyncio.sleep(fault.delay)
            elif fault.kind == "block":
                await self._block_on(fault.id)
        outcome = next((f for f in faults if f.kind not in _WAIT_KINDS), None)
        where = f"{method}({target})" if target is not None else method
        if outcome is not None and outcome.kind == "fail_before":
            raise SubstrateError(outcome.code, f"injected failure before {where}")
        if outcome is not None and outcome.kind in _LIST_KINDS and fake_page is not None:
            return fake_page(outcome.kind)
        result = await op()
        if outcome is not None and outcome.kind == "lose_after":
            raise SubstrateError(outcome.code, f"response lost: {where} took effect")
        return result

    async def _call_fn(
        self,
        method: str,
        target: str | None,
        call: str,
        params: dict[str, Any],
        parse: Callable[[dict[str, Any], tzinfo], T],
    ) -> T:
        """A hot call: `call` is the SQL function of `method` (see schema.sql). One statement
        takes the call's faults and, when none matched, applies it. When faults matched (and
        nothing else happened), they are honoured as by `_call`, the effect being the function
        called on its own."""
        gated = _GATED.format(call=call)
        result, tz = await self.execute(gated, {**params, "fault_method": method, "fault_target": target})
        if "faults" not in result:
            return parse(result, tz)

        async def effect() -> T:
            again, tz = await self.execute("SELECT " + call, params)
            return parse(again, tz)

        return await self._under_faults(method, target, _faults_from_json(result["faults"]), effect)

    async def _rejected(self, method: str, target: str | None, exc: Exception) -> NoReturn:
        """A hot call whose arguments failed validation in Python: it still takes and honours its
        faults (waits, fail_before) first, exactly as if the validation had run inside `op`."""

        async def op() -> None:
            raise exc

        await self._call(method, target, op)
        raise exc  # not reached: op raised

    async def inject(
        self,
        method: str,
        kind: str,
        *,
        actor: str | None = None,
        code: Code = Code.UNAVAILABLE,
        delay: float = 0.0,
        times: int | None = 1,
    ) -> int:
        """Inject a fault for `method` (a Protocol method name), optionally only for calls naming
        `actor`; it affects `times` calls (None: until cleared). Returns the fault id."""
        if method not in PROTOCOL_METHODS:
            raise ValueError(f"unknown Substrate method {method!r}")
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        if kind in _LIST_KINDS and method not in LIST_METHODS:
            raise ValueError(f"fault kind {kind!r} applies only to list methods")
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        if delay < 0:
            raise ValueError("delay must be >= 0")
        async with self.tx() as cur:
            await cur.execute(
                "INSERT INTO substrate_sim.faults (method, kind, actor, code, delay, remaining)"
                " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
                (method, kind, actor, Code(code).value, float(delay), times),
            )
            row = await cur.fetchone()
        assert row is not None
        return int(row["id"])

    async def release(self, fault_id: int) -> None:
        """Let every call blocked (now or later) on this block fault proceed."""
        async with self.tx() as cur:
            await cur.execute("UPDATE substrate_sim.faults SET released = true WHERE id = %s", (fault_id,))

    async def clear_faults(self) -> None:
        """Remove every fault; calls blocked on one proceed."""
        async with self.tx() as cur:
            await cur.execute("DELETE FROM substrate_sim.faults")

    async def wait_blocked(self, fault_id: int, timeout: float = 5.0, *, count: int = 1) -> None:
        """Return once at least `count` calls are blocked on the fault; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            async with self.tx() as cur:
                await cur.execute("SELECT blocked FROM substrate_sim.faults WHERE id = %s", (fault_id,))
                row = await cur.fetchone()
            if row is None:
                raise SubstrateError(Code.NOT_FOUND, f"fault {fault_id} not found")
            if row["blocked"] >= count:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no call blocked on fault {fault_id} within {timeout}s")
            await asyncio.sleep(POLL_INTERVAL)

    async def fault_hits(self, fault_id: int) -> int:
        """How many calls consumed the fault so far."""
        async with self.tx() as cur:
            await cur.execute("SELECT hits FROM substrate_sim.faults WHERE id = %s", (fault_id,))
            row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"fault {fault_id} not found")
        return int(row["hits"])
