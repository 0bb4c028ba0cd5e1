"""What the metrics' gauges read: queue depths, workers and Sessions by state (the operator views,
schema/80_operator_views.sql)."""

from __future__ import annotations

from typing import Any

from sessionq.db.stores.base import StoreBase


class GaugeStore(StoreBase):
    async def gauge_stats(self) -> dict[str, Any]:
        """The counts behind the overview gauges (sessionq.metrics.set_overview): jobs per (queue,
        status) without the succeeded history, paused queues, stalled jobs, workers per state,
        Sessions per state, usage per Agent."""
        jobs = await self._rows("SELECT queue_name, status, jobs FROM sessionq.queue_depth")
        paused = await self._rows("SELECT queue_name FROM sessionq.paused_queues")
        stalled = await self._rows("SELECT count(*) AS n FROM sessionq.find_stalled_jobs()")
        workers = await self._rows("SELECT state, count(*) AS n FROM sessionq.workers GROUP BY state")
        sessions = await self._rows(
            "SELECT state, count(*) AS n FROM sessionq.sessions WHERE kind = 'session' GROUP BY state"  # not Sandboxes
        )
        usage = await self._rows(  # 45_usage.sql
            "SELECT a.*, b.snapshot_bytes, b.snapshots_sized FROM sessionq.agent_usage() a"
            " LEFT JOIN sessionq.agent_snapshot_usage() b USING (agent_namespace, agent_name)"
        )
        return {
            "agent_usage": {f"{r['agent_namespace']}/{r['agent_name']}": r for r in usage},
            "jobs": {(r["queue_name"], r["status"]): int(r["jobs"]) for r in jobs},
            "paused": [r["queue_name"] for r in paused],
            "stalled": int(stalled[0]["n"]) if stalled else 0,
            "workers": {r["state"]: int(r["n"]) for r in workers},
            "sessions": {r["state"]: int(r["n"]) for r in sessions},
        }

    async def queue_stats(self) -> list[tuple[str, int, float]]:
        """(queue, waiting jobs, age in seconds of the oldest runnable one) per queue."""
        rows = await self._rows(
            "SELECT queue_name, jobs, extract(epoch FROM coalesce(oldest_due_age, interval '0')) AS age"
            " FROM sessionq.queue_depth WHERE status = 'todo'"
        )
        return [(r["queue_name"], int(r["jobs"]), float(r["age"])) for r in rows]
