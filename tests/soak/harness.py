"""The soak run: set up, load with faults, settle, check, summarize, tear down (always)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sessionq._pb.kagent.api.v1alpha1 import agents_pb2, checkpoints_pb2, common_pb2, sessions_pb2
from sessionq.runtime.simulator import SimulatedSubstrate

from . import checks
from .client import AGENT, Client, Gateway, Shared
from .cluster import CLAIM_LIFETIME, SIM_WORKERS, Cluster, Proc
from .faults import FaultRunner, plan
from .history import History


@dataclass
class Options:
    duration: float = 60.0
    seed: int = 1
    clients: int = 16
    database_url: str | None = None
    out: Path | None = None
    settle: float = 120.0
    report: Path | None = None
    quiet: bool = False
    pooler: str | None = None  # "pgbouncer": the processes' database.url goes through PgBouncer (transaction mode)
    failover: bool = False  # a pg_auto_failover formation (formation.py); its PostgreSQL faults are failovers


def parse_duration(text: str) -> float:
    """'60s', '30m', '1h', '1h30m', '90' (seconds)."""
    text = text.strip().lower()
    if text.replace(".", "", 1).isdigit():
        return float(text)
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    for ch in text:
        if ch.isdigit() or ch == ".":
            number += ch
        elif ch in units and number:
            total += float(number) * units[ch]
            number = ""
        else:
            raise ValueError(f"not a duration: {text!r} (use e.g. 60s, 30m, 1h)")
    if number:
        raise ValueError(f"not a duration: {text!r} (a unit is missing after {number})")
    return total


class Harness:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.work = Path(tempfile.mkdtemp(prefix="sqsoak-"))  # PostgreSQL data: short path (unix socket)
        self.out = opts.out or Path(tempfile.mkdtemp(prefix=f"sessionq-soak-{time.strftime('%Y%m%d-%H%M%S')}-"))
        self.out.mkdir(parents=True, exist_ok=True)
        self.history = History(self.out)
        db = None
        if opts.failover:
            import os

            from .formation import Formation

            db = Formation(self.work)
            # this process's simulator (fault injection) too: see formation.Formation.fails_over
            os.environ["SESSIONQ_SIMULATOR_SYNCHRONOUS_COMMIT"] = "1"
        self.cluster = Cluster(self.work, self.out, opts.database_url, pooler=opts.pooler, db=db)
        self.sim: SimulatedSubstrate | None = None
        self.gateway: Gateway | None = None
        self.runner: FaultRunner | None = None
        self.exits: list[dict[str, Any]] = []

    def log(self, message: str) -> None:
        if not self.opts.quiet:
            print(f"[soak +{self.history.now():6.1f}s] {message}", flush=True)

    # -- processes ------------------------------------------------------------------------------

    async def start_process(self, proc: Proc, timeout: float = 60.0) -> None:
        await asyncio.to_thread(proc.start)
        deadline = time.monotonic() + timeout
        if proc.kind == "worker":
            await asyncio.sleep(1.0)
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited at start; see {proc.log}")
            return
        async with grpc.aio.insecure_channel(proc.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    r = await stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                    if r.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                if not proc.alive():
                    raise RuntimeError(f"{proc.name} exited at start; see {proc.log}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{proc.name} not serving after {timeout:.0f}s; see {proc.log}")
                await asyncio.sleep(0.2)

    async def ensure_running(self) -> None:
        """Restart any process that is down and not being restarted by a kill fault."""
        down = self.runner.down if self.runner else set()
        for p in self.cluster.procs:
            if not p.alive() and p.name not in down:
                await self.start_process(p)

    async def watchdog(self) -> None:
        """A process that exits on its own (e.g. it gave up on PostgreSQL) is a finding: record
        it, restart it."""
        while True:
            await asyncio.sleep(1.0)
            down = self.runner.down if self.runner else set()
            for p in self.cluster.procs:
                if p.popen is not None and not p.alive() and p.name not in down:
                    code = p.popen.returncode
                    tail = ""
                    with contextlib.suppress(OSError):
                        tail = p.log.read_text(errors="replace")[-1500:]
                    self.exits.append({"t": self.history.now(), "process": p.name, "code": code})
                    self.history.violation("process-exited", f"{p.name} (pid {p.pid}) exited by itself with code"
                                           f" {code}; log tail: {tail[-600:]!r}", key=f"exit:{p.pid}")
                    self.log(f"{p.name} exited by itself (code {code}); restarting it")
                    with contextlib.suppress(Exception):
                        await self.start_process(p)

    async def checker(self) -> None:
        """The cheap invariants every 5 s while the load runs."""
        while True:
            await asyncio.sleep(5.0)
            with contextlib.suppress(Exception):
                await checks.quick_check(self.cluster.db.url, self.history)

    # -- setup ------------------------------------------------------------------------------------

    async def apply_agent(self) -> None:
        assert self.gateway is not None
        value = struct_pb2.Struct()
        value.update({"apiVersion": "api.kagent.dev/v1alpha3", "kind": "Agent", "spec": {}})
        resource = common_pb2.StructuredObject(api_version="api.kagent.dev/v1alpha3", kind="Agent", value=value)
        r = await self.gateway.call("harness", "create-agent", "agents", "CreateAgent",
                                    agents_pb2.CreateAgentRequest(ref=AGENT, resource=resource),
                                    user="admin", max_attempts=10, budget=60)
        if not r.ok and r.code != "ALREADY_EXISTS":
            raise RuntimeError(f"CreateAgent failed: {r.code} {r.details}")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            g = await self.gateway.call("harness", "get-agent", "agents", "GetAgent",
                                        agents_pb2.GetAgentRequest(ref=AGENT), user="admin", max_attempts=3)
            if g.ok:
                status = json_format.MessageToDict(g.resp.agent.resource.value).get("status", {})
                desired = next((x for x in status.get("revisions", []) if x["id"] == status.get("desiredRevision")), None)
                if desired is not None and desired["state"] == "READY":
                    return
                if desired is not None and desired["state"] == "FAILED":
                    raise RuntimeError(f"the agent revision failed: {desired.get('failure') or desired}")
            await asyncio.sleep(0.3)
        raise RuntimeError("the agent revision was not prepared within 90 s (is a worker running?)")

    # -- settling ---------------------------------------------------------------------------------

    async def pending(self) -> dict[str, Any]:
        import psycopg
        from psycopg.rows import dict_row

        async with await psycopg.AsyncConnection.connect(self.cluster.db.url, autocommit=True, connect_timeout=5,
                                                         row_factory=dict_row) as conn:
            ops = await (await conn.execute(
                "SELECT id, creator, request_kind, request_id, request_fingerprint, source_checkpoint_id, operation,"
                " state FROM sessionq.sessions WHERE operation <> 'NONE'")).fetchall()
            counts = await (await conn.execute(
                "SELECT (SELECT count(*) FROM sessionq.checkpoints WHERE state IN ('CREATING', 'DELETING')) AS checkpoints,"
                " (SELECT count(*) FROM sessionq.sessions WHERE dispatch_id IS NOT NULL) AS dispatches,"
                " (SELECT count(*) FROM sessionq.sessions WHERE state = 'READY' AND operation = 'NONE'"
                "   AND idle_boundary_id IS NOT NULL AND idle_executor IS NULL) AS idle,"
                " (SELECT count(*) FROM sessionq.sessions WHERE idle_executor IS NOT NULL) AS idle_claims")).fetchone()
        assert counts is not None
        return {"operations": ops, **counts}

    async def drive(self, rows: list[dict[str, Any]]) -> None:
        """Retry the same call of every pending operation, as its client would (OP-16)."""
        assert self.gateway is not None
        calls = []
        for s in rows[:64]:
            sid = str(s["id"])
            if s["operation"] in ("SUSPEND", "RESUME", "DELETE"):
                rpc = {"SUSPEND": "SuspendSession", "RESUME": "ResumeSession", "DELETE": "DeleteSession"}[s["operation"]]
                calls.append(("sessions", rpc, getattr(sessions_pb2, f"{rpc}Request")(session_id=sid), sid))
            elif s["request_kind"] == "create":
                name = s["request_fingerprint"].split("|", 1)[1] if "|" in s["request_fingerprint"] else ""
                calls.append(("sessions", "CreateSession", sessions_pb2.CreateSessionRequest(
                    request_id=s["request_id"], agent=AGENT, name=name), sid))
            elif s["source_checkpoint_id"] is not None:
                calls.append(("checkpoints", "ForkSession", checkpoints_pb2.ForkSessionRequest(
                    checkpoint_id=str(s["source_checkpoint_id"]), request_id=s["request_id"]), sid))
        creators = {str(s["id"]): s["creator"] for s in rows}
        await asyncio.gather(*(
            self.gateway.call("settle", "settle-retry", service, rpc, req, user=creators[sid], session=sid,
                              max_attempts=1, attempt_timeout=8)
            for service, rpc, req, sid in calls), return_exceptions=True)

    async def settle(self, budget: float, patience: float = 50.0) -> dict[str, Any]:
        """Wait until no operation, checkpoint, dispatch, idle work or idle claim is pending, retrying
        pending operations as their clients would. Gives up after `budget`, or when nothing has
        changed for `patience` seconds (longer than a stalled job takes to be requeued)."""
        started = time.monotonic()
        last_drive = started
        last_change, last_key = started, None
        state: dict[str, Any] = {}
        while True:
            try:
                state = await self.pending()
            except Exception as e:
                state = {"error": str(e)}
                await asyncio.sleep(1.0)
                if time.monotonic() - started > budget:
                    break
                continue
            key = (tuple(sorted((str(r["id"]), r["operation"]) for r in state["operations"])),
                   state["checkpoints"], state["dispatches"], state["idle"], state["idle_claims"])
            if key != last_key:
                last_key, last_change = key, time.monotonic()
            busy = (len(state["operations"]) + state["checkpoints"] + state["dispatches"] + state["idle"]
                    + state["idle_claims"])
            now = time.monotonic()
            if busy == 0 or now - started > budget or now - last_change > patience:
                break
            if state["operations"] and now - last_drive > 5.0:
                await self.drive(state["operations"])
                last_drive = time.monotonic()
            await asyncio.sleep(0.5)
        return {"seconds": round(time.monotonic() - started, 1),
                "settled": "error" not in state and not state.get("operations") and not state.get("checkpoints")
                and not state.get("dispatches") and not state.get("idle") and not state.get("idle_claims"),
                "left": {k: (len(v) if isinstance(v, list) else v) for k, v in state.items()}}

    # -- the run ----------------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        opts = self.opts
        background: list[asyncio.Task[Any]] = []
        clients: list[asyncio.Task[None]] = []
        try:
            where = "a pg_auto_failover formation" if opts.failover else "given URL" if opts.database_url else "embedded"
            self.log(f"PostgreSQL ({where}), migrations ...")
            await asyncio.to_thread(self.cluster.setup)
            self.sim = SimulatedSubstrate(self.cluster.db.url, worker_pool_size=SIM_WORKERS)
            await self.sim.open()
            await asyncio.gather(*(self.start_process(p) for p in self.cluster.procs))
            self.log("processes: " + ", ".join(f"{p.name} pid {p.pid}" + (f" {p.address}" if p.port else "")
                                                for p in self.cluster.procs))
            self.gateway = Gateway([p.address for p in self.cluster.apis], self.history)
            await self.apply_agent()
            self.log("agent ready; load starts")

            stop = asyncio.Event()
            shared = Shared(self.gateway, self.history, stop)
            if opts.failover:  # fail over, the old primary rejoins, fail over again (back to it); no kills
                faults = plan(opts.seed, opts.duration, [p.name for p in self.cluster.procs], pg_faults=2, kills=False)
            else:
                faults = plan(opts.seed, opts.duration, [p.name for p in self.cluster.procs])
            self.runner = FaultRunner(self, faults)
            load_start = self.history.now()
            clients = [asyncio.create_task(Client(i, opts.seed, shared).run(), name=f"client-{i}")
                       for i in range(opts.clients)]
            background = [asyncio.create_task(self.runner.run(load_start), name="faults"),
                          asyncio.create_task(self.watchdog(), name="watchdog"),
                          asyncio.create_task(self.checker(), name="checker")]
            progress = asyncio.create_task(self.progress(load_start))
            background.append(progress)
            await asyncio.sleep(opts.duration)
            load_end = self.history.now()
            stop.set()
            self.gateway.hard_deadline = time.monotonic() + 15.0
            background[0].cancel()  # the faults still planned (none: cool-down)
            progress.cancel()
            self.log("load stops; waiting for the clients' last calls")
            await self.runner.wait()
            _, still = await asyncio.wait(clients, timeout=60)
            for t in still:
                t.cancel()
            await asyncio.gather(*clients, return_exceptions=True)

            hits = await checks.sim_fault_hits(self.cluster.db.url)
            with contextlib.suppress(Exception):
                await self.sim.clear_faults()
            await self.ensure_running()
            self.log("settling (pending operations, dispatches, idle work) ...")
            settle = await self.settle(opts.settle)
            self.log(f"settled in {settle['seconds']}s" if settle["settled"] else
                     f"not settled after {settle['seconds']}s: {settle['left']}")
            for t in background:
                t.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            background = []
            with contextlib.suppress(Exception):
                await checks.quick_check(self.cluster.db.url, self.history)
            failover = await self.failover_checks() if opts.failover else None
            task_ids = sorted({a["resp"]["task"] for a in self.history.attempts
                               if a["rpc"] == "SendMessage" and a["code"] == "OK" and a["resp"].get("task")})
            data = await checks.fetch(self.cluster.db.url, task_ids)
            stats = checks.final_checks(data, self.history)
            with open(self.out / "calls.json", "w", encoding="utf-8") as f:  # noqa: ASYNC230
                json.dump(data["calls"], f, default=str)
            with open(self.out / "audit.json", "w", encoding="utf-8") as f:  # noqa: ASYNC230
                json.dump(data["audit"], f, default=str)
            return self.summary(load_start, load_end, hits, settle, stats, failover)
        finally:
            for t in [*background, *clients]:
                t.cancel()
            await asyncio.gather(*background, *clients, return_exceptions=True)
            if self.gateway is not None:
                with contextlib.suppress(Exception):
                    await self.gateway.close()
            if self.sim is not None:
                with contextlib.suppress(Exception):
                    await self.sim.close()
            await asyncio.to_thread(self.cluster.stop)
            self.history.close()
            shutil.rmtree(self.work, ignore_errors=True)

    async def progress(self, load_start: float) -> None:
        last = 0
        while True:
            await asyncio.sleep(10.0)
            ok = sum(1 for o in self.history.ops if o["code"] == "OK")
            self.log(f"load +{self.history.now() - load_start:5.1f}s: {ok} ok ops ({(ok - last) / 10:.1f}/s),"
                     f" {len(self.history.faults)} fault events, {len(self.history.violations)} violations")
            last = ok

    # -- summary ----------------------------------------------------------------------------------

    # -- failover ---------------------------------------------------------------------------------

    LISTENERS = {  # application_name of each LISTEN connection -> which processes hold one
        "sessionq-listen": "api", "sessionq-listen-idle": "worker", "sessionq-listen-drain": "worker",
        "sessionq-listen-jobs": "worker",
    }

    async def failover_checks(self, budget: float = 90.0) -> dict[str, Any]:
        """After the last failover, on the primary now: every process's LISTEN connections are back
        (by application_name), and the leader-only periodic work (expiry, revision GC: every minute)
        ran again, on a live process. Waits up to `budget` s for both."""
        import psycopg

        db: Any = self.cluster.db
        last_up = max((f["up"] for f in db.failovers), default=time.time())
        expected: Counter[str] = Counter()
        for name, kind in self.LISTENERS.items():
            expected[name] = sum(1 for p in self.cluster.procs if p.kind == kind and p.alive())
        deadline = time.monotonic() + budget
        listeners: dict[str, int] = {}
        leaders: dict[str, Any] = {}
        while True:
            with contextlib.suppress(psycopg.Error):
                async with await psycopg.AsyncConnection.connect(db.url, autocommit=True, connect_timeout=5) as conn:
                    cur = await conn.execute(
                        "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND application_name LIKE 'sessionq-listen%' GROUP BY 1")
                    listeners = {r[0]: int(r[1]) for r in await cur.fetchall()}
                    cur = await conn.execute(
                        "SELECT role, holder, extract(epoch FROM last_run)::float8 FROM sessionq.leaders")
                    leaders = {r[0]: {"holder": r[1], "ran_after_failover_s": round(float(r[2]) - last_up, 1)}
                               for r in await cur.fetchall()}
            listen_ok = all(listeners.get(k, 0) >= n for k, n in expected.items())
            lead_ok = bool(leaders) and all(v["ran_after_failover_s"] > 0 for v in leaders.values())
            if (listen_ok and lead_ok) or time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
        if not listen_ok:
            self.history.violation("listen-not-back", f"LISTEN connections on the primary after the last failover:"
                                   f" {listeners}, expected at least {dict(expected)}")
        if not lead_ok:
            self.history.violation("leadership-not-moved", f"leader-only work after the last failover: {leaders}"
                                   " (each role must run again after the promotion)")
        return {"failovers": [{"killed": f["killed"], "promoted": f["promoted"],
                               "promoted_after_s": round(f["up"] - f["down"], 2)} for f in db.failovers],
                "listeners": listeners, "listeners_expected": dict(expected), "leaders": leaders}

    def summary(self, load_start: float, load_end: float, hits: dict[int, int], settle: dict[str, Any],
                stats: dict[str, Any], failover: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.runner is not None
        h = self.history
        outcomes: dict[str, Counter[str]] = {}
        for o in h.ops:
            if o["who"] in ("harness",):
                continue
            outcomes.setdefault(o["op"], Counter())[o["code"] + (f" {o['reason']}" if o.get("reason") else "")] += 1
        faults: Counter[str] = Counter()
        sim_faults: Counter[str] = Counter()
        sim_hits: Counter[str] = Counter()
        for f in h.faults:
            if f["kind"] == "sim":
                if f.get("ok"):
                    faults["sim " + f["fault"]] += 1
                    sim_faults[f"{f['fault']} {f['method']}"] += 1
                    sim_hits[f["fault"]] += hits.get(f.get("id", -1), 0)
                else:
                    faults["sim (not injected: PostgreSQL down)"] += 1
            elif f["kind"] == "kill":
                faults["kill -9 " + f["target"] if f.get("ok") else "kill skipped"] += 1
            elif f["kind"] == "pg_restart" and f.get("phase") == "up":
                faults["postgresql restart"] += 1
        tp = checks.throughput(h, load_start, load_end, self.runner.pg_events)
        result = {
            "seed": self.opts.seed, "duration_s": self.opts.duration, "clients": self.opts.clients,
            "database": self.cluster.db.kind + (f" via {self.opts.pooler}" if self.opts.pooler else ""),
            "postgres_version": self.cluster.db.version(),
            "claim_lifetime_s": CLAIM_LIFETIME, "out": str(self.out),
            "operations": {k: dict(v) for k, v in sorted(outcomes.items())},
            "attempts": len(h.attempts),
            "faults": dict(faults), "sim_faults": dict(sim_faults), "sim_fault_hits_by_kind": dict(sim_hits),
            "runtime_mutations": dict(stats.get("mutations", {})),
            "generations": stats.get("generations"),
            "generations_retried_by_another_executor": stats.get("generations_retried_by_another_executor"),
            "session_states": dict(stats.get("session_states", {})),
            "turns_returned": stats.get("turns_returned"),
            "fork_checks": dict(h.fork_checks),
            "races": race_summary(h.race_settles),
            "settle": settle,
            "throughput": tp,
            "process_exits": self.exits,
            "failover": failover,
            "violations": h.violations,
            "reports": h.reports,
        }
        with open(self.out / "summary.json", "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2, default=str)
        if self.opts.report:
            self.opts.report.write_text(json.dumps(result, indent=2, default=str))
        print(render(result), flush=True)
        return result


def render(r: dict[str, Any]) -> str:
    lines = [
        "",
        f"=== sessionq soak: {r['duration_s']:.0f}s, seed {r['seed']}, {r['clients']} clients, 2 API + 2 workers,"
        f" PostgreSQL {r['postgres_version']} ({r['database']}), claim lifetime {r['claim_lifetime_s']:.0f}s ===",
        "",
        "operations by outcome (logical calls, after the client's retries):",
    ]
    for op, outcomes in r["operations"].items():
        total = sum(outcomes.values())
        parts = ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items(), key=lambda kv: -kv[1]))
        lines.append(f"  {op:<14} {total:>6}  {parts}")
    lines.append(f"  ({r['attempts']} RPC attempts in all)")
    lines.append("faults injected: " + (", ".join(f"{k} {n}" for k, n in sorted(r["faults"].items())) or "none"))
    if r["sim_fault_hits_by_kind"]:
        lines.append("  runtime faults consumed by calls: "
                     + ", ".join(f"{k} {n}" for k, n in sorted(r["sim_fault_hits_by_kind"].items())))
    lines.append("runtime mutations: " + ", ".join(f"{k} {n}" for k, n in sorted(r["runtime_mutations"].items())))
    lines.append(f"generations: {r['generations']} ({r['generations_retried_by_another_executor']} taken over by"
                 f" another executor); sessions at the end: "
                 + ", ".join(f"{k} {n}" for k, n in sorted(r["session_states"].items())))
    lines.append(f"turns returned: {r['turns_returned']}; fork checks: "
                 + (", ".join(f"{k} {n}" for k, n in sorted(r["fork_checks"].items())) or "none"))
    races = r["races"]
    lines.append(f"suspend/resume races: {races['rounds']} settled"
                 + (f", seconds from the last answer to no pending operation: p50 {races['p50']}, max {races['max']}"
                    if races["rounds"] else ""))
    s = r["settle"]
    lines.append(f"settle: {'done' if s['settled'] else 'NOT settled'} in {s['seconds']}s"
                 + ("" if s["settled"] else f" (left: {s['left']})"))
    tp = r["throughput"]
    lines.append(f"throughput (ok ops/s, mean {tp['mean_ops_per_s']}), 5-s buckets:")
    row = [f"{b['from']:>5.0f}-{b['to']:<4.0f} {b['ops_per_s']:>6.1f}" for b in tp["buckets"]]
    for i in range(0, len(row), 6):
        lines.append("  " + " | ".join(row[i:i + 6]))
    for ev in tp["restarts"]:
        rec = ev["recovered_after_s"]
        lines.append(f"  after +{ev['down_at']}s: first successful call begun after it"
                     f" {ev['first_ok_after_down_s']}s later; >= 90% throughput {ev['full_throughput_after_down_s']}s"
                     " later")
        lines.append(
            f"PostgreSQL restart at +{ev['down_at']}s ({ev['how']}), down {ev['down_for']}s: baseline"
            f" {ev['baseline_ops_per_s']} ops/s; back to >= 90% "
            + (f"{rec}s after it answered again" if rec is not None else "NOT within the run")
            + f" (target <= 10s: {'met' if ev['target_met'] else 'MISSED'})")
    if r.get("failover"):
        f = r["failover"]
        lines.append("failovers: " + "; ".join(f"{x['killed']} killed, {x['promoted']} promoted after"
                                               f" {x['promoted_after_s']}s" for x in f["failovers"]))
        lines.append(f"  after the last one: LISTEN connections {f['listeners']} (expected {f['listeners_expected']});"
                     f" leaders {f['leaders']}")
    if r["reports"]:
        kinds = Counter(x["kind"] for x in r["reports"])
        lines.append("reported (allowed): " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
        for x in r["reports"][:10]:
            lines.append(f"  - {x['kind']}: {x['detail'][:300]}")
    lines.append(f"invariant violations: {len(r['violations'])}")
    for x in r["violations"][:40]:
        lines.append(f"  - [+{x['t']}s] {x['kind']}: {x['detail'][:500]}")
    if len(r["violations"]) > 40:
        lines.append(f"  ... {len(r['violations']) - 40} more in summary.json")
    lines.append(f"history, logs and summary: {r['out']}")
    return "\n".join(lines)


def race_summary(settles: list[float]) -> dict[str, Any]:
    """The races of Suspend/Resume calls that settled, and how long after their last answer."""
    ordered = sorted(settles)
    if not ordered:
        return {"rounds": 0}
    return {"rounds": len(ordered), "p50": ordered[len(ordered) // 2], "max": ordered[-1]}
