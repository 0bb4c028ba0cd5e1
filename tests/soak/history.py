"""The run's record: every request attempt and response, every logical operation's outcome, the
faults injected, the violations found while running. Appended to JSON lines files as it goes."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any


class History:
    def __init__(self, out: Path) -> None:
        self.t0 = time.time()
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.attempts: list[dict[str, Any]] = []
        self.ops: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.violations: list[dict[str, Any]] = []
        self.reports: list[dict[str, Any]] = []  # noteworthy but allowed
        self.fork_checks: Counter[str] = Counter()
        self.race_settles: list[float] = []  # seconds from a race's last answer until no operation pending
        self._seen: set[str] = set()
        self._requests = open(out / "history.jsonl", "a", encoding="utf-8")
        self._faults = open(out / "faults.jsonl", "a", encoding="utf-8")

    def now(self) -> float:
        """Seconds since the start of the run."""
        return time.time() - self.t0

    def attempt(self, record: dict[str, Any]) -> None:
        self.attempts.append(record)
        self._requests.write(json.dumps(record, default=str) + "\n")

    def op(self, record: dict[str, Any]) -> None:
        self.ops.append(record)

    def fault(self, record: dict[str, Any]) -> None:
        record.setdefault("t", round(self.now(), 3))
        self.faults.append(record)
        self._faults.write(json.dumps(record, default=str) + "\n")
        self._faults.flush()

    def violation(self, kind: str, detail: str, key: str | None = None, **data: Any) -> None:
        """Record an invariant violation once per key (default: kind + detail)."""
        key = key or f"{kind}:{detail}"
        if key in self._seen:
            return
        self._seen.add(key)
        self.violations.append({"t": round(self.now(), 3), "kind": kind, "detail": detail, **data})

    def report(self, kind: str, detail: str, **data: Any) -> None:
        self.reports.append({"t": round(self.now(), 3), "kind": kind, "detail": detail, **data})

    def close(self) -> None:
        for f in (self._requests, self._faults):
            f.flush()
            f.close()
