"""`ProcessSubstrate`: a `Substrate` whose Actors are OS processes on this machine.

- State (templates, actors, snapshots, tags, slots, egress policies) is in PostgreSQL, in the
  schema ``sessionq_process`` (schema.sql); each transition is one of its functions, and the process
  and file work happens between them with no transaction open.
- An Actor's process runs the template's argv (command then args) with the template's env, the
  Actor's env and SESSIONQ_DATA_DIR (its durable directory, also its working directory), in its own
  process group; it inherits a listening socket on 127.0.0.1 (SESSIONQ_A2A_FD / SESSIONQ_A2A_PORT),
  its private A2A endpoint, which `invoke` dials.
- Workers are a fixed number of process slots; an Actor with a process holds one.
- Suspend (VOLUMES): SIGTERM to the group, SIGKILL after the grace period, the durable directory
  written as a tar.gz snapshot (a new generation, IN_PROGRESS until the archive is renamed into
  place, then COMPLETED), the slot freed, the directory removed. Resume restores the latest
  COMPLETED snapshot into a fresh directory and starts the process. Pause is SIGSTOP (the slot
  kept), resuming a paused Actor SIGCONT.
- Tags hold their own copy of a snapshot; an Actor created from a tag starts from a further copy.
  Delete stops the process and removes the directory and the Actor's own snapshots, never a tag's.
- A process that exits on its own makes the Actor CRASHED with its exit status and the tail of its
  stderr. One runtime server owns the schema at a time (an advisory lock); at start it reconciles:
  an Actor recorded with a process of an earlier server is CRASHED and what is left of its process
  group is killed. `close` stops every child: no process outlives the runtime server.
- Isolation (`runtime.process.isolation`, sandbox.py): under ``gvisor`` or ``namespaces`` each
  Actor's process runs in its own sandbox (its durable directory at /data, its own user, pid and
  mount namespaces, its own network namespace whose only way out is the runtime: the egress proxy
  enforcing its persisted egress policy, the task store's forwarder, egress.py); under ``none`` it
  is a plain process of the runtime's user and its egress policy is stored, not enforced. Warm
  interpreters (warm.py) serve every level: plain processes under ``none``, each inside a warm
  sandbox of its own under ``gvisor`` and ``namespaces``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import ssl
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from sessionq.runtime.base import (
    RESTORE_FAILED,
    Actor,
    ActorState,
    ActorTemplate,
    Code,
    EgressPolicy,
    EgressRule,
    InvokeRequest,
    Page,
    Snapshot,
    SnapshotFidelity,
    SnapshotStatus,
    Substrate,
    SubstrateError,
    Tag,
    Worker,
)
from sessionq.runtime.process import archive, children, egress, readiness, sandbox, warm
from sessionq.runtime.process.children import Child
from sessionq.runtime.process.database import SERVER_LOCK_KEY, ProcessDatabase, install_schema
from sessionq.runtime.process.egress import ActorNetwork
from sessionq.runtime.process.invoke import EXIT_GRACE, cancel_actor_turn, invoke_actor
from sessionq.runtime.process.limits import (
    DEFAULT_CPUS,
    DEFAULT_MEMORY,
    DEFAULT_PROCESSES,
    ActorGroup,
    ControlGroups,
    Limits,
)
from sessionq.runtime.process.sandbox import Isolation, NetNamespace, Sandbox
from sessionq.runtime.stand_in.egress import canonical_rules, rule_collection
from sessionq.runtime.stand_in.names import require_name, require_ref, split_template
from sessionq.runtime.stand_in.pages import (
    clamp_page_size,
    decode_actor_token,
    worker_boundary,
    worker_page,
)
from sessionq.runtime.stand_in.reads import StandInReads, checked_actor
from sessionq.runtime.stand_in.rows import (
    policy_from_row,
    snapshot_from_row,
    tag_from_row,
    template_from_row,
    worker_from_row,
)

log = logging.getLogger(__name__)

__all__ = ["DATA_DIR_ENV", "Isolation", "ProcessConfig", "ProcessSubstrate"]

DATA_DIR_ENV = "SESSIONQ_DATA_DIR"
TASKSTORE_ENV = "SESSIONQ_TASKSTORE_ADDRESS"
ACTOR_ENV = "SESSIONQ_ACTOR"
# variables of the runtime's own environment an Actor's process inherits (nothing else leaks)
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
DEFAULT_MAX_DIRECTORY_BYTES = 1 << 30
ARGV_LIMIT = 64
ARG_LENGTH = 4096


@dataclass(frozen=True)
class ProcessConfig:
    root: Path  # durable directories, snapshots, tags, logs
    slots: int = 8  # process slots (workers)
    stop_grace: float = 5.0  # seconds between SIGTERM and SIGKILL
    # a durable directory above this (apparent size) is not snapshotted, nor an archive above it
    # restored; 0: no limit
    max_directory_bytes: int = DEFAULT_MAX_DIRECTORY_BYTES
    keep_snapshots: int = 2  # completed generations kept per Actor (the newest)
    compress_level: int = 6
    taskstore_address: str | None = None  # "host:port" of the TaskStoreService, given to every process
    turn_timeout: float = 600.0  # seconds an invoke waits for the Actor's answer
    cancel_timeout: float = 10.0  # seconds a cancel_turn waits for the Actor's answer (best effort)
    # what a template without a command runs: the runtime's default agent (the tutorial's
    # my-first-agent, sessionq.agentkit.first_agent, with this interpreter); () refuses such templates
    default_command: tuple[str, ...] = (sys.executable, "-m", "sessionq.agentkit.first_agent")
    # Python interpreters (this one, sys.executable) kept started with the agent kit imported, for the
    # Actors whose command runs a script or module with it (warm.py); 0: every process starts cold
    warm_interpreters: int = 1
    # paths no sandbox shows, besides the runtime's root (the configuration, the state directory)
    private_paths: tuple[Path, ...] = ()
    # the Actors' sandbox (sandbox.py): None or "auto": gvisor where runsc runs, else namespaces
    isolation: Isolation | str | None = None
    # read-only paths a sandbox shows besides what the runtime's own programs need
    sandbox_paths: tuple[str, ...] = ()
    # seconds a started Actor has to answer 200 at its private GET /readyz (readiness.py); a turn
    # sent to an Actor that is not ready by then fails (UNAVAILABLE)
    ready_timeout: float = 60.0
    # what one sandbox may take (limits.py; 0: no limit): memory in bytes, CPU in cores, processes
    memory_limit: int = DEFAULT_MEMORY
    cpu_limit: float = DEFAULT_CPUS
    max_processes: int = DEFAULT_PROCESSES
    # PEM file of CAs the egress proxy trusts, besides the system's, when it opens TLS to an https
    # origin for a request the agent sent it in the clear (egress.py); None: the system's only
    egress_ca_file: str | None = None


# row mappers: the stand-in core's, with where the process runtime keeps a snapshot (its archive's
# path) and what its workers are (process slots on this machine, always active)


def _snapshot(row: DictRow) -> Snapshot:
    return snapshot_from_row(row, f"file://{row['path']}" if row["path"] else "")


def _tag(row: DictRow) -> Tag:
    # the snapshot's identity; the tag keeps its own copy (path)
    return tag_from_row(row, f"file://{row['snapshot_path']}")


def _worker(row: DictRow) -> Worker:
    return worker_from_row(row, atespace="", state="WORKER_STATE_ACTIVE")


_READS = StandInReads(
    schema="sessionq_process", actor_columns="a.*, w.ip AS worker_ip", snapshot_columns="*", to_snapshot=_snapshot
)


def _check_argv(kind: str, values: list[str]) -> list[str]:
    if len(values) > ARGV_LIMIT:
        raise SubstrateError(Code.INVALID_ARGUMENT, f"{kind}: at most {ARGV_LIMIT} items")
    for v in values:
        if not isinstance(v, str) or len(v) > ARG_LENGTH or "\x00" in v:
            raise SubstrateError(
                Code.INVALID_ARGUMENT, f"{kind}: each item is a string of at most {ARG_LENGTH} characters without NUL"
            )
    return list(values)


def _check_env(env: dict[str, str]) -> dict[str, str]:
    for k, v in env.items():
        if not isinstance(k, str) or not k or "=" in k or "\x00" in k or not isinstance(v, str) or "\x00" in v:
            raise SubstrateError(Code.INVALID_ARGUMENT, f"invalid environment variable {str(k)[:64]!r}")
    return dict(env)


class ProcessSubstrate:
    """See the module docstring. ``async with ProcessSubstrate(url, config)`` or `open` / `close`."""

    def __init__(self, conninfo: str, config: ProcessConfig) -> None:
        self.config = config
        self.root = Path(config.root).resolve()
        self.taskstore_address = config.taskstore_address
        self.server_id = str(uuid.uuid4())
        self._conninfo = conninfo
        self._db = ProcessDatabase(conninfo)
        self.isolation = sandbox.resolve_isolation(config.isolation)
        self._read_only: list[str] = []
        self._networks: dict[str, ActorNetwork] = {}
        self._policies: dict[str, tuple[EgressRule, ...]] = {}
        self.limits = Limits(memory=max(config.memory_limit, 0), cpus=max(config.cpu_limit, 0.0),
                             processes=max(config.max_processes, 0))
        self.cgroups: ControlGroups | None = None  # where the sandboxes' control groups are made (open)
        self._groups: dict[str, ActorGroup] = {}  # a running sandboxed Actor's control group, by UID
        # a release in progress, by UID: the process's own end (_watch) and a stop (_stop) may both
        # release it; the second waits for the first, so a suspend returns only once the bundle is gone
        # (else the first's late removal could take the bundle of the Actor's next start)
        self._releasing: dict[str, asyncio.Event] = {}
        self.origination: ssl.SSLContext | None = None  # the egress proxy's TLS to https origins (open)
        # tests: DNS names the egress proxy dials at a fixed address instead of resolving them
        self.egress_hosts: dict[str, str] = {}
        self._lock_conn: psycopg.AsyncConnection[Any] | None = None
        self._children: dict[str, Child] = {}
        self._actor_locks: dict[str, asyncio.Lock] = {}
        self._warm = warm.WarmPool(
            size=max(config.warm_interpreters, 0) if self.isolation == Isolation.NONE else 0,
            interpreter=sys.executable,
            env=self._base_env(),
            cwd=self.root / "warm",
            logs=self.root / "logs",
            marker=str(self.root),
        )
        # warm sandboxes (warm.py): the warm interpreters of gvisor and namespaces
        self._warm_sandboxes = warm.WarmSandboxPool(
            size=max(config.warm_interpreters, 0) if self.isolation != Isolation.NONE else 0,
            level=self.isolation,
            root=self.root,
            read_only=lambda: self._read_only,
            env=self._warm_sandbox_env,
            rules=lambda uid: self._policies.get(uid, ()),
            taskstore=lambda: self.taskstore_address,
            hosts=self.egress_hosts,
            interpreter=sys.executable,
            limits=self.limits,
            cgroups=lambda: self.cgroups,
            origination=lambda: self.origination,
        )
        self._warm_bundles: dict[str, Path] = {}
        self._in_flight: dict[str, int] = {}  # invoke calls under way, by Actor UID (tests)
        # tests: runs between an archive's write and its rename
        self.before_rename: Callable[[Path], None] | None = None

    # lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        problem = sandbox.unavailable(self.isolation)
        if problem is not None:
            raise SubstrateError(
                Code.FAILED_PRECONDITION,
                f"{problem}; set runtime.process.isolation to a level this machine has (none: no sandbox)",
            )
        try:
            self.origination = egress.origination_context(self.config.egress_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise SubstrateError(
                Code.FAILED_PRECONDITION, f"runtime.process.egressCaFile cannot be read as PEM CA certificates ({exc})"
            ) from None
        # the runtime's alone: other users of the machine read no snapshot, tag, log or directory
        archive.private_dir(self.root)
        for sub in ("actors", "snapshots", "tags", "logs", "sandboxes"):
            archive.private_dir(self.root / sub)
        if self.isolation != Isolation.NONE:
            # what an earlier server's sandboxes left (their processes died with it)
            await asyncio.to_thread(archive.remove_tree, self.root / "runsc")
            await asyncio.to_thread(archive.remove_tree, self.root / "warm")
            self._read_only = sandbox.read_only_paths(
                [self.root, *self.config.private_paths], self.config.sandbox_paths
            )
        await install_schema(self._conninfo, slots=self.config.slots)
        # the lock's connection names the isolation level: `sessionq status` and the console read it
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, application_name=f"{sandbox.APPLICATION_NAME} {self.isolation.value}"
        )
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (SERVER_LOCK_KEY,))
        row = await cur.fetchone()
        if not (row and row[0]):
            await conn.close()
            raise SubstrateError(
                Code.FAILED_PRECONDITION,
                "another process runtime server already runs on this database (schema sessionq_process)",
            )
        self._lock_conn = conn
        if self.isolation != Isolation.NONE:
            # (once this server owns the runtime: a refused second server touches no group)
            self.cgroups, how = await asyncio.to_thread(ControlGroups.detect, str(self.root))
            if self.cgroups is not None:
                await asyncio.to_thread(self.cgroups.remove_stale)
            log.info("process runtime: isolation %s, each sandbox's limits by %s: memory %s bytes, %s CPUs, "
                     "%s processes (0: none)", self.isolation.value,
                     how if self.cgroups is not None else f"rlimits, no CPU limit ({how})",
                     self.limits.memory, self.limits.cpus, self.limits.processes)
        await self._db.open()
        await self.reconcile()
        self._warm.fill()
        self._warm_sandboxes.fill()

    async def close(self) -> None:
        """Stop every child process (no process outlives the runtime server); their Actors become
        CRASHED at the next start's reconciliation unless suspended first."""
        await self._warm.close()
        await self._warm_sandboxes.close()
        kids = list(self._children.values())
        await asyncio.gather(*(children.stop_child(c, 1.0) for c in kids), return_exceptions=True)
        for c in kids:
            if c.watcher is not None:
                c.watcher.cancel()
        self._children.clear()
        networks = list(self._networks.values())
        self._networks.clear()
        await asyncio.gather(*(n.close() for n in networks), return_exceptions=True)
        groups = list(self._groups.values())
        self._groups.clear()
        for group in groups:
            await asyncio.to_thread(group.remove)
        if self.cgroups is not None:
            await asyncio.to_thread(self.cgroups.close)
        await self._db.close()
        conn, self._lock_conn = self._lock_conn, None
        if conn is not None:
            await conn.close()

    def kill_children(self) -> None:
        """SIGKILL every child's process group at once, without waiting (a forced stop of its owner;
        any thread). Their Actors become CRASHED at the next start's reconciliation."""
        self._warm.kill_all()
        self._warm_sandboxes.kill_all()
        for child in list(self._children.values()):
            child.stopping = True
            children.kill_group(child.pid)

    async def __aenter__(self) -> ProcessSubstrate:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def reconcile(self) -> list[str]:
        """Actors recorded with a process of an earlier runtime server become CRASHED; what is left
        of their process groups is killed. Returns their UIDs."""
        lost = await self._db.call("SELECT sessionq_process.reconcile(%s)", (self.server_id,))
        uids = []
        for item in lost or []:
            uids.append(item["uid"])
            if item.get("pid"):
                children.kill_recorded(int(item["pid"]), item.get("pid_start"))
        if uids:
            log.warning("process runtime: %d actor(s) lost their process in a restart: CRASHED", len(uids))
        return uids

    def _lock(self, uid: str) -> asyncio.Lock:
        return self._actor_locks.setdefault(uid, asyncio.Lock())

    # paths ------------------------------------------------------------------------------------

    def data_dir(self, uid: str) -> Path:
        return self.root / "actors" / uid / "data"

    def _snapshot_path(self, uid: str, generation: int) -> Path:
        return self.root / "snapshots" / uid / f"{generation}.tar.gz"

    def _tag_path(self, atespace: str, uid: str) -> Path:
        return self.root / "tags" / atespace / f"{uid}.tar.gz"

    # reads ------------------------------------------------------------------------------------

    async def _load(self, atespace: str, name: str) -> Actor:
        require_ref("actor", atespace, name)
        async with self._db.tx() as cur:
            return await _READS.actor(cur, atespace, name)

    async def _row(self, atespace: str, name: str, uid: str | None) -> DictRow:
        require_ref("actor", atespace, name)
        async with self._db.tx() as cur:
            await cur.execute(
                "SELECT * FROM sessionq_process.actors WHERE atespace = %s AND name = %s", (atespace, name)
            )
            row = await cur.fetchone()
        return checked_actor(row, atespace, name, uid)

    async def _target(self, atespace: str, name: str, uid: str | None) -> str:
        """The UID a mutation acts on: the caller's precondition, or (None: a plain ateapi client
        served by the server frame) the current Actor's. NOT_FOUND when there is no such Actor,
        INVALID_ARGUMENT for a name the rule refuses."""
        require_ref("actor", atespace, name)
        return uid if uid is not None else str((await self._row(atespace, name, None))["uid"])

    # templates --------------------------------------------------------------------------------

    async def create_actor_template(
        self,
        atespace: str,
        name: str,
        image: str,
        *,
        command: list[str] | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> ActorTemplate:
        require_name("atespace", atespace)
        require_name("template name", name)
        cmd = _check_argv("command", list(command or []))
        arguments = _check_argv("args", list(args or []))
        variables = _check_env(dict(env or {}))
        if not cmd:
            if not self.config.default_command:
                raise SubstrateError(
                    Code.INVALID_ARGUMENT,
                    f"actor template {atespace}/{name}: the process runtime needs a command (the Agent spec's command)",
                )
            cmd = list(self.config.default_command)  # the runtime's default agent, as an empty template means
        async with self._db.tx() as cur:
            await cur.execute(
                "INSERT INTO sessionq_process.templates (atespace, name, uid, image, command, args, env)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (atespace, name) DO NOTHING RETURNING *",
                (atespace, name, str(uuid.uuid4()), image, Jsonb(cmd), Jsonb(arguments), Jsonb(variables)),
            )
            row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.ALREADY_EXISTS, f"actor template {atespace}/{name} already exists")
        return template_from_row(row)

    async def get_actor_template(self, atespace: str, name: str) -> ActorTemplate:
        require_ref("template", atespace, name)
        async with self._db.tx() as cur:
            return await _READS.template(cur, atespace, name)

    async def delete_actor_template(self, atespace: str, name: str, uid: str) -> None:
        require_ref("template", atespace, name)
        async with self._db.tx() as cur:
            await cur.execute(
                "DELETE FROM sessionq_process.templates WHERE atespace = %s AND name = %s AND uid = %s RETURNING uid",
                (atespace, name, uid),
            )
            if await cur.fetchone() is None:
                await cur.execute(
                    "SELECT uid FROM sessionq_process.templates WHERE atespace = %s AND name = %s", (atespace, name)
                )
                other = await cur.fetchone()
                if other is None:
                    raise SubstrateError(Code.NOT_FOUND, f"actor template {atespace}/{name} not found")
                raise SubstrateError(
                    Code.FAILED_PRECONDITION,
                    f"actor template uid mismatch for {atespace}/{name}: expected {uid}, found {other['uid']}",
                )

    # actors -----------------------------------------------------------------------------------

    async def create_actor(
        self,
        atespace: str,
        name: str,
        template: str,
        *,
        from_tag: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Actor:
        require_name("atespace", atespace)
        require_name("actor name", name)
        t_atespace, t_name = split_template(template)
        if from_tag is not None:
            require_name("tag name", from_tag)
        variables = _check_env(dict(env or {}))
        uid = str(uuid.uuid4())
        seeded: Path | None = None
        async with self._db.tx() as cur:
            await cur.execute(
                "SELECT 1 FROM sessionq_process.templates WHERE atespace = %s AND name = %s FOR KEY SHARE",
                (t_atespace, t_name),
            )
            if await cur.fetchone() is None:
                raise SubstrateError(
                    Code.NOT_FOUND, f"actor template {template} not found (creating actor {atespace}/{name})"
                )
            tag = None
            if from_tag is not None:
                await cur.execute(
                    "SELECT * FROM sessionq_process.tags WHERE atespace = %s AND name = %s FOR KEY SHARE",
                    (atespace, from_tag),
                )
                tag = await cur.fetchone()
                if tag is None:
                    raise SubstrateError(
                        Code.NOT_FOUND, f"tag {atespace}/{from_tag} not found (creating actor {atespace}/{name})"
                    )
            await cur.execute(
                "INSERT INTO sessionq_process.actors (atespace, name, uid, template, state, env, last_generation)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (atespace, name) DO NOTHING RETURNING uid",
                (atespace, name, uid, template, ActorState.SUSPENDED.value, Jsonb(variables), 1 if tag else 0),
            )
            if await cur.fetchone() is None:
                raise SubstrateError(Code.ALREADY_EXISTS, f"actor {atespace}/{name} already exists")
            if tag is not None:
                # the fork's first generation is its own copy of the tag's archive
                seeded = self._snapshot_path(uid, 1)
                await asyncio.to_thread(archive.link_or_copy, Path(tag["path"]), seeded)
                await cur.execute(
                    "INSERT INTO sessionq_process.snapshots (actor_uid, atespace, actor_name, generation, fidelity,"
                    " status, path, size_bytes, completed_at)"
                    " VALUES (%s, %s, %s, 1, %s, %s, %s, %s, clock_timestamp())",
                    (
                        uid,
                        atespace,
                        name,
                        tag["fidelity"],
                        SnapshotStatus.COMPLETED.value,
                        str(seeded),
                        seeded.stat().st_size,
                    ),
                )
        return await self._load(atespace, name)

    async def get_actor(self, atespace: str, name: str) -> Actor:
        return await self._load(atespace, name)

    async def resume_actor(self, atespace: str, name: str, uid: str) -> tuple[Actor, bool]:
        uid = await self._target(atespace, name, uid)
        async with self._lock(uid):
            step = await self._db.call(
                "SELECT sessionq_process.begin_resume(%s, %s, %s, %s)", (atespace, name, uid, self.server_id)
            )
            if step["action"] == "none":
                return await self._load(atespace, name), False
            if step["action"] == "continue":
                child = self._children.get(uid)
                if child is not None:
                    children.kill_group(child.pid, children.signal.SIGCONT)
                await self._db.call("SELECT sessionq_process.continue_paused(%s)", (uid,))
                return await self._load(atespace, name), True
            await self._start(atespace, name, uid, step)
            return await self._load(atespace, name), True

    @staticmethod
    def _base_env() -> dict[str, str]:
        """What of the runtime's own environment every process gets (and the warm interpreters)."""
        return {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}

    def _process_env(
        self, atespace: str, name: str, template_env: dict[str, str], actor_env: dict[str, str], data: Path
    ) -> dict[str, str]:
        env = self._base_env()
        env.update(template_env)
        env.update(actor_env)
        env[DATA_DIR_ENV] = str(data)
        env[ACTOR_ENV] = f"{atespace}/{name}"
        if self.taskstore_address:
            env.setdefault(TASKSTORE_ENV, self.taskstore_address)
        return env

    async def _start(self, atespace: str, name: str, uid: str, step: dict[str, Any]) -> None:
        """Restore the latest completed snapshot into a fresh directory and start the process (the
        Actor is RESUMING and holds a slot). A process that cannot start makes it CRASHED."""
        data = self.data_dir(uid)
        snapshot = Path(step["snapshot"]) if step.get("snapshot") else None
        template = step.get("template") or {}
        argv = [*template.get("command", []), *template.get("args", [])]
        try:
            await asyncio.to_thread(archive.restore_archive, snapshot, data, limit=self.config.max_directory_bytes)
        except archive.ArchiveError as exc:
            # the Actor's own files could not be brought back: DATA_LOSS, with why in words that name
            # no path of the runtime's (what the user is shown)
            message = f"{RESTORE_FAILED}: {exc}"
            await self._db.call("SELECT sessionq_process.crash(%s, NULL, NULL, %s)", (uid, message))
            raise SubstrateError(Code.DATA_LOSS, message) from exc
        try:
            env = self._process_env(atespace, name, dict(template.get("env") or {}), dict(step.get("env") or {}), data)
            if not argv:
                raise FileNotFoundError("the actor template has no command")
            # its crash message never quotes its environment (the Agent's env, the workload credential)
            secrets = tuple({*(template.get("env") or {}).values(), *(step.get("env") or {}).values()})
            logs = self.root / "logs"
            if self.isolation != Isolation.NONE:
                env = self._sandbox_env(atespace, name, dict(template.get("env") or {}), dict(step.get("env") or {}))
                from_warm = await self._start_warm_sandbox(uid, argv, env, data, logs, secrets)
                child = from_warm or await self._start_sandboxed(uid, argv, env, data, logs, secrets)
            else:
                warm_child = await self._warm.start(uid, argv, env, data, logs, secrets)
                child = warm_child or await children.start_child(uid, argv, env, data, logs, secrets)
        except OSError as exc:
            message = f"the process could not start: {exc}"
            await self._db.call("SELECT sessionq_process.crash(%s, NULL, NULL, %s)", (uid, message))
            raise SubstrateError(Code.FAILED_PRECONDITION, f"actor {atespace}/{name}: {message}") from exc
        self._children[uid] = child
        loop = asyncio.get_running_loop()
        child.watcher = loop.create_task(self._watch(child))
        child.prober = loop.create_task(readiness.probe(child))
        try:
            await self._db.call(
                "SELECT sessionq_process.finish_resume(%s, %s, %s, %s, %s)",
                (uid, self.server_id, child.pid, children.process_start_time(child.pid), child.port),
            )
        except BaseException:
            child.start_recorded.set()
            await children.stop_child(child, 0.0)
            raise
        child.start_recorded.set()

    def _sandbox_env(
        self, atespace: str, name: str, template_env: dict[str, str], actor_env: dict[str, str]
    ) -> dict[str, str]:
        """A sandboxed process's environment, exactly: a PATH of the runtime's directories the sandbox
        shows, HOME (/tmp), the template's (Agent spec's) and the Actor's variables (the workload
        credential), then what the agent kit needs: SESSIONQ_DATA_DIR, SESSIONQ_ACTOR, its A2A port,
        its readiness port (SESSIONQ_READY_PORT), the task store's address inside, and the egress
        proxy (HTTP_PROXY, HTTPS_PROXY; NO_PROXY for the loopback)."""
        path = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep)
                if p and sandbox.visible(p, self._read_only)]
        env = {"PATH": os.pathsep.join(path) or "/usr/bin:/bin", "HOME": "/tmp"}
        env.update(template_env)
        env.update(actor_env)
        env[DATA_DIR_ENV] = sandbox.DATA
        env[ACTOR_ENV] = f"{atespace}/{name}"
        env[children.A2A_PORT_ENV] = str(sandbox.A2A_PORT)
        env[children.READY_PORT_ENV] = str(readiness.READY_PORT)
        env.pop(children.A2A_FD_ENV, None)
        env.pop(children.READY_FD_ENV, None)
        if self.taskstore_address:
            env[TASKSTORE_ENV] = f"127.0.0.1:{sandbox.TASKSTORE_PORT}"
        proxy = f"http://127.0.0.1:{sandbox.PROXY_PORT}"
        for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[key] = proxy
        for key in ("NO_PROXY", "no_proxy"):
            env[key] = "127.0.0.1,localhost"
        return env

    def _warm_sandbox_env(self) -> dict[str, str]:
        """A warm sandbox's environment before its Actor is known: the sandbox's own variables only."""
        env = self._sandbox_env("", "", {}, {})
        env.pop(ACTOR_ENV, None)
        return env

    async def _start_warm_sandbox(
        self, uid: str, argv: list[str], env: dict[str, str], data: Path, logs: Path, secrets: tuple[str, ...]
    ) -> Child | None:
        """The Actor's process from a warm sandbox (warm.py), or None: its command is not one a
        warm interpreter runs (`warm.plan`), no warm sandbox is ready, or the one taken is gone."""
        try:
            program = children.resolve(argv[0], env.get("PATH"))
        except OSError:
            return None  # the cold start reports it
        if not sandbox.visible(program, self._read_only):
            return None
        how = warm.plan(program, argv, env, data, sys.executable, self._warm_sandbox_env())
        if how is None:
            return None
        box = self._warm_sandboxes.take()
        if box is None:
            return None
        await self._load_policy(uid)
        task: dict[str, object] = {"env": env, "cwd": sandbox.DATA, "program": how.program, "mode": how.mode,
                                   "target": how.target, "args": list(how.args)}
        try:
            await self._warm_sandboxes.hand_over(box, uid, data, logs, task)
        except OSError as exc:
            log.warning("process runtime: a warm sandbox did not take actor %s (%s): starting it cold", uid, exc)
            box.taken = False
            await self._warm_sandboxes.discard(box)
            return None
        self._networks[uid] = box.network
        self._warm_bundles[uid] = box.bundle
        if box.group is not None:
            self._groups[uid] = box.group
        return Child(uid=uid, process=box.process, pid=box.process.pid, port=box.network.port,
                     stderr=logs / f"{uid}.stderr", secrets=secrets, warm=True, user=box.user,
                     ready_at=children.ReadyAddress(port=readiness.READY_PORT, netns=box.network.netns.socket,
                                                    poll=self._ready_poll()))

    def _ready_poll(self) -> float:
        return readiness.POLL_GVISOR if self.isolation == Isolation.GVISOR else readiness.POLL

    async def _start_sandboxed(
        self, uid: str, argv: list[str], env: dict[str, str], data: Path, logs: Path, secrets: tuple[str, ...]
    ) -> Child:
        """The Actor's process in its sandbox (sandbox.py) with its network (egress.py). OSError when
        its program is not found or not visible inside the sandbox."""
        program = children.resolve(argv[0], env.get("PATH"))
        if not sandbox.visible(program, self._read_only):
            raise FileNotFoundError(
                errno.ENOENT, "not visible inside the sandbox (runtime.process.sandboxPaths)", argv[0]
            )
        await self._load_policy(uid)
        network = ActorNetwork(
            NetNamespace.create(), lambda: self._policies.get(uid, ()), self.taskstore_address, self.egress_hosts,
            self.origination,
        )
        group: ActorGroup | None = None
        try:
            await network.start()
            user = sandbox.actor_uid(uid)
            await asyncio.to_thread(sandbox.chown_tree, data, user)
            if self.cgroups is not None:
                group = await asyncio.to_thread(self.cgroups.create, uuid.uuid4().hex, self.limits,
                                                gvisor=self.isolation == Isolation.GVISOR)
            box = Sandbox(
                level=self.isolation,
                uid=user,
                data=data,
                read_only=tuple(self._read_only),
                netns=network.netns.path,
                bundle=self.root / "sandboxes" / uid,
                runsc_root=self.root / "runsc",
                limits=self.limits,
                group=group,
            )
            command = box.command([program, *argv[1:]], env)
            # runsc reads the environment from the bundle: its own process gets none of the Actor's
            outer = env if self.isolation == Isolation.NAMESPACES else {"PATH": os.defpath}
            ready_at = children.ReadyAddress(port=readiness.READY_PORT, netns=network.netns.socket,
                                             poll=self._ready_poll())
            child = await children.start_sandboxed(uid, command, outer, data, logs, network.port, ready_at, secrets)
            child.user = user
        except BaseException:
            await network.close()
            if group is not None:
                await asyncio.to_thread(group.remove)
            raise
        self._networks[uid] = network
        if group is not None:
            self._groups[uid] = group
        return child

    async def _load_policy(self, uid: str) -> None:
        """The Actor's persisted egress policy, as the proxy enforces it (EGR-1: before it runs)."""
        async with self._db.tx() as cur:
            await cur.execute("SELECT rules FROM sessionq_process.egress_policies WHERE actor_uid = %s", (uid,))
            row = await cur.fetchone()
        self._policies[uid] = tuple(rule_collection(row["rules"])) if row else ()

    async def _release(self, uid: str) -> None:
        """Close what a sandboxed Actor's process had beside it (its network, its bundle)."""
        pending = self._releasing.get(uid)
        if pending is not None:
            await pending.wait()
            return
        done = self._releasing[uid] = asyncio.Event()
        try:
            network = self._networks.pop(uid, None)
            group = self._groups.pop(uid, None)
            warm_bundle = self._warm_bundles.pop(uid, None)
            sandbox.remove_bundle(self.root / "sandboxes" / uid)
            # at once: the group's removal waits for gVisor's own processes to be gone (~10 ms)
            steps: list[Awaitable[object]] = []
            if network is not None:
                steps.append(network.close())
            if group is not None:
                steps.append(asyncio.to_thread(group.remove))
            if warm_bundle is not None:
                steps.append(asyncio.to_thread(archive.remove_tree, warm_bundle))
            failed = [r for r in await asyncio.gather(*steps, return_exceptions=True) if isinstance(r, BaseException)]
            if failed:
                raise failed[0]
        finally:
            del self._releasing[uid]
            done.set()

    async def _watch(self, child: Child) -> None:
        """Wait for the process to end; an end the runtime did not ask for is a crash."""
        returncode = await child.process.wait()
        child.returncode = returncode
        group = self._groups.get(child.uid)
        if group is not None and not child.stopping and self._children.get(child.uid) is child and group.oom_kills():
            child.note = (f"the Actor's sandbox reached its memory limit of {self.limits.describe_memory()}"
                          " and the kernel ended its largest process")
        child.exited.set()
        if self._networks.get(child.uid) is not None and self._children.get(child.uid) in (child, None):
            await self._release(child.uid)
        if child.stopping:
            child.exit_recorded.set()
            return
        # a process that ended before its start was recorded: its crash is recorded after the start
        # (finish_resume would refuse an Actor already crashed, and the resume would fail instead)
        await child.start_recorded.wait()
        if child.stopping:
            child.exit_recorded.set()
            return
        children.kill_group(child.pid)  # what the process left behind in its group
        message = children.crash_message(child)
        try:
            await self._db.call(
                "SELECT sessionq_process.crash(%s, %s, %s, %s)", (child.uid, child.pid, returncode, message)
            )
        except Exception:  # the reconciliation at the next start records it
            log.exception("process runtime: recording the crash of actor %s failed", child.uid)
        finally:
            child.exit_recorded.set()
        if self._children.get(child.uid) is child:
            del self._children[child.uid]
        log.warning("process runtime: actor %s crashed: %s", child.uid, message)

    async def _stop(self, uid: str, *, paused: bool) -> None:
        child = self._children.pop(uid, None)
        if child is not None:
            await children.stop_child(child, self.config.stop_grace, paused=paused)
        await self._release(uid)

    async def suspend_actor(
        self, atespace: str, name: str, uid: str, fidelity: SnapshotFidelity = SnapshotFidelity.VOLUMES
    ) -> Actor:
        fid = SnapshotFidelity(fidelity)
        if fid != SnapshotFidelity.VOLUMES:
            raise SubstrateError(
                Code.INVALID_ARGUMENT,
                f"snapshot fidelity {fid.value} rejected (suspending {atespace}/{name}): the process runtime "
                "snapshots the durable directory only (VOLUMES)",
            )
        uid = await self._target(atespace, name, uid)
        async with self._lock(uid):
            step = await self._db.call(
                "SELECT sessionq_process.begin_suspend(%s, %s, %s, %s)", (atespace, name, uid, fid.value)
            )
            if step["action"] == "none":
                return await self._load(atespace, name)
            generation = int(step["generation"])
            child = self._children.pop(uid, None)
            if child is not None:
                await children.stop_child(child, self.config.stop_grace, paused=bool(step["paused"]))
            # the process is gone: its sandbox's network and control group are released while the
            # durable directory is archived, and before the snapshot is recorded
            release = asyncio.ensure_future(self._release(uid))
            try:
                archive_size, dest = await self._archive(atespace, name, uid, generation)
            finally:
                await release
            done = await self._db.call(
                "SELECT sessionq_process.finish_suspend(%s, %s, %s, %s, %s)",
                (uid, generation, str(dest), archive_size, max(self.config.keep_snapshots, 1)),
            )
            _unlink(done.get("dropped") or [])
            await asyncio.to_thread(archive.remove_tree, self.data_dir(uid))
            return await self._load(atespace, name)

    async def _archive(self, atespace: str, name: str, uid: str, generation: int) -> tuple[int, Path]:
        """Write the stopped Actor's durable directory as snapshot `generation`: (its size, its path).
        Over the size limit: refused (`_refuse_snapshot`); a write that fails: CRASHED, INTERNAL."""
        data = self.data_dir(uid)
        limit = self.config.max_directory_bytes
        size = await asyncio.to_thread(archive.directory_size, data) if data.exists() else 0
        if limit and size > limit:
            await self._refuse_snapshot(atespace, name, uid, generation, f"durable directory is {size} bytes")
        dest = self._snapshot_path(uid, generation)
        try:
            if not data.exists():
                data.mkdir(parents=True)
            archive_size = await asyncio.to_thread(
                archive.write_archive,
                data,
                dest,
                level=self.config.compress_level,
                limit=limit,
                before_rename=self.before_rename,
            )
        except archive.DirectoryTooLarge:  # it grew while it was being written
            await self._refuse_snapshot(atespace, name, uid, generation, f"durable directory is over {limit} bytes")
        except Exception as exc:
            message = f"snapshot generation {generation} could not be written: {exc}"
            await self._db.call("SELECT sessionq_process.crash(%s, NULL, NULL, %s)", (uid, message))
            raise SubstrateError(Code.INTERNAL, f"actor {atespace}/{name}: {message}") from exc
        return archive_size, dest

    async def _refuse_snapshot(self, atespace: str, name: str, uid: str, generation: int, size: str) -> NoReturn:
        """A durable directory over the limit: CRASHED with why, FAILED_PRECONDITION raised."""
        message = (
            f"{size}, over the limit of {self.config.max_directory_bytes} bytes "
            f"(runtime.process.maxDirectoryBytes): snapshot generation {generation} refused; "
            "the previous snapshot is kept and the next resume starts from it"
        )
        await self._db.call("SELECT sessionq_process.crash(%s, NULL, NULL, %s)", (uid, message))
        raise SubstrateError(Code.FAILED_PRECONDITION, f"actor {atespace}/{name}: {message}")

    async def pause_actor(self, atespace: str, name: str, uid: str) -> Actor:
        uid = await self._target(atespace, name, uid)
        async with self._lock(uid):
            step = await self._db.call("SELECT sessionq_process.pause(%s, %s, %s)", (atespace, name, uid))
            if step["action"] == "stop":
                child = self._children.get(uid)
                if child is not None:
                    children.kill_group(child.pid, children.signal.SIGSTOP)
            return await self._load(atespace, name)

    async def delete_actor(self, atespace: str, name: str, uid: str, *, any_state: bool = False) -> None:
        uid = await self._target(atespace, name, uid)
        async with self._lock(uid):
            step = await self._db.call(
                "SELECT sessionq_process.begin_delete(%s, %s, %s, %s)", (atespace, name, uid, bool(any_state))
            )
            await self._stop(uid, paused=True)
            _unlink(step.get("paths") or [])
            await asyncio.to_thread(archive.remove_tree, self.root / "actors" / uid)
            await asyncio.to_thread(archive.remove_tree, self.root / "snapshots" / uid)
            for suffix in ("stdout", "stderr"):
                (self.root / "logs" / f"{uid}.{suffix}").unlink(missing_ok=True)
        self._actor_locks.pop(uid, None)

    # egress (enforced by a sandboxed Actor's proxy, egress.py; stored only under isolation none) ----

    async def create_egress_policy(self, atespace: str, actor: str, uid: str, rules: list[EgressRule]) -> EgressPolicy:
        data = canonical_rules(rules, actor=f"{atespace}/{actor}")
        uid = await self._target(atespace, actor, uid)
        async with self._db.tx() as cur:
            await cur.execute("SELECT sessionq_process.lock_actor(%s, %s, %s)", (atespace, actor, uid))
            await cur.execute(
                "INSERT INTO sessionq_process.egress_policies (actor_uid, atespace, actor_name, rules)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (actor_uid) DO NOTHING RETURNING *",
                (uid, atespace, actor, Jsonb(data)),
            )
            row = await cur.fetchone()
        if row is None:
            raise SubstrateError(
                Code.ALREADY_EXISTS, f"egress policy default of actor {atespace}/{actor} already exists"
            )
        self._policies[uid] = tuple(rule_collection(row["rules"]))  # a running Actor's proxy: from now on
        return policy_from_row(row, uid)

    async def get_egress_policy(self, atespace: str, actor: str) -> EgressPolicy:
        require_ref("actor", atespace, actor)
        async with self._db.tx() as cur:
            return await _READS.egress_policy(cur, atespace, actor)

    async def update_egress_policy(self, atespace: str, actor: str, uid: str, rules: list[EgressRule]) -> EgressPolicy:
        data = canonical_rules(rules, actor=f"{atespace}/{actor}")
        uid = await self._target(atespace, actor, uid)
        async with self._db.tx() as cur:
            await cur.execute("SELECT sessionq_process.lock_actor(%s, %s, %s)", (atespace, actor, uid))
            await cur.execute(
                "UPDATE sessionq_process.egress_policies SET rules = %s, version = version + 1,"
                " updated_at = clock_timestamp() WHERE actor_uid = %s RETURNING *",
                (Jsonb(data), uid),
            )
            row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"egress policy default of actor {atespace}/{actor} not found")
        self._policies[uid] = tuple(rule_collection(row["rules"]))  # a running Actor's proxy: from now on
        return policy_from_row(row, uid)

    # tags -------------------------------------------------------------------------------------

    async def create_tag(self, atespace: str, name: str, actor: str, uid: str) -> Tag:
        require_name("tag name", name)
        uid = await self._target(atespace, actor, uid)
        async with self._lock(uid):
            async with self._db.tx() as cur:
                await cur.execute("SELECT (sessionq_process.lock_actor(%s, %s, %s)).*", (atespace, actor, uid))
                row = await cur.fetchone()
                assert row is not None
                if row["state"] != ActorState.SUSPENDED.value:
                    raise SubstrateError(
                        Code.FAILED_PRECONDITION,
                        f"actor {atespace}/{actor} is {row['state']}; only a SUSPENDED actor can be tagged",
                    )
                await cur.execute(
                    "SELECT * FROM sessionq_process.snapshots WHERE actor_uid = %s AND status = %s"
                    " ORDER BY generation DESC LIMIT 1",
                    (uid, SnapshotStatus.COMPLETED.value),
                )
                snap = await cur.fetchone()
                if snap is None:
                    raise SubstrateError(Code.FAILED_PRECONDITION, f"actor {atespace}/{actor} has no snapshot to tag")
                await cur.execute(
                    "SELECT 1 FROM sessionq_process.tags WHERE atespace = %s AND name = %s", (atespace, name)
                )
                if await cur.fetchone() is not None:
                    raise SubstrateError(Code.ALREADY_EXISTS, f"tag {atespace}/{name} already exists")
                tag_uid = str(uuid.uuid4())
                path = self._tag_path(atespace, tag_uid)
                await asyncio.to_thread(archive.link_or_copy, Path(snap["path"]), path)
                try:
                    await cur.execute(
                        "INSERT INTO sessionq_process.tags (atespace, name, uid, actor_name, actor_uid,"
                        " snapshot_generation, fidelity, snapshot_path, path)"
                        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING *",
                        (
                            atespace,
                            name,
                            tag_uid,
                            actor,
                            uid,
                            snap["generation"],
                            snap["fidelity"],
                            snap["path"],
                            str(path),
                        ),
                    )
                except psycopg.errors.UniqueViolation:
                    path.unlink(missing_ok=True)
                    raise SubstrateError(Code.ALREADY_EXISTS, f"tag {atespace}/{name} already exists") from None
                tag = await cur.fetchone()
                assert tag is not None
        return _tag(tag)

    async def get_tag(self, atespace: str, name: str) -> Tag:
        require_ref("tag", atespace, name)
        async with self._db.tx() as cur:
            return _tag(await _READS.tag_row(cur, atespace, name))

    async def delete_tag(self, atespace: str, name: str) -> None:
        require_ref("tag", atespace, name)
        async with self._db.tx() as cur:
            await cur.execute(
                "DELETE FROM sessionq_process.tags WHERE atespace = %s AND name = %s RETURNING path", (atespace, name)
            )
            row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"tag {atespace}/{name} not found")
        _unlink([row["path"]])

    # listings ---------------------------------------------------------------------------------

    async def list_actors(self, atespace: str | None, page_size: int, page_token: str) -> Page[Actor]:
        global_listing = atespace is None
        if atespace is not None:
            require_name("atespace", atespace)
        size = clamp_page_size(page_size)
        boundary = decode_actor_token(page_token, global_listing=global_listing) if page_token else None
        async with self._db.tx() as cur:
            return await _READS.actor_page(cur, atespace, boundary, size)

    async def list_tags(self, atespace: str | None, page_size: int, page_token: str) -> Page[Tag]:
        if atespace is not None:
            require_name("atespace", atespace)
        size = clamp_page_size(page_size)
        boundary = decode_actor_token(page_token, global_listing=atespace is None) if page_token else None
        async with self._db.tx() as cur:
            return await _READS.tag_page(cur, atespace, boundary, size, _tag)

    async def list_workers(self, page_size: int, page_token: str) -> Page[Worker]:
        size = clamp_page_size(page_size)
        boundary = worker_boundary(page_token)
        async with self._db.tx() as cur:
            return await worker_page(
                cur,
                "SELECT * FROM sessionq_process.workers WHERE name > %s ORDER BY name LIMIT %s",
                (boundary,),
                size,
                _worker,
            )

    # the Actor's private A2A endpoint -------------------------------------------------------

    async def _running(self, atespace: str, name: str, uid: str | None) -> tuple[str, str]:
        """(the UID, the URL of the private A2A endpoint) of a RUNNING Actor: the caller's UID, or
        (None: a plain client of the served runtime) the current Actor's. FAILED_PRECONDITION when
        it is not running."""
        row = await self._row(atespace, name, uid)
        if row["state"] != ActorState.RUNNING.value or row["port"] is None:
            raise SubstrateError(Code.FAILED_PRECONDITION, f"actor {atespace}/{name} is not running ({row['state']})")
        return str(row["uid"]), f"http://127.0.0.1:{row['port']}"

    async def endpoint(self, atespace: str, name: str, uid: str) -> str:
        """The URL of a RUNNING Actor's private A2A endpoint (FAILED_PRECONDITION otherwise)."""
        return (await self._running(atespace, name, uid))[1]

    async def invoke(self, atespace: str, name: str, uid: str, request: InvokeRequest) -> None:
        """Send the message to the Actor's A2A endpoint and wait for its answer; the Actor reports
        and settles the task through the task store itself. A process that ends during the turn
        fails the call (UNAVAILABLE, with the exit status), with or without the caller's UID."""
        # the Actor's UID finds its process, whose recorded exit ends the call
        uid, url = await self._running(atespace, name, uid)
        child = self._children.get(uid)
        self._in_flight[uid] = self._in_flight.get(uid, 0) + 1
        try:
            if child is not None:
                await self._until_ready(atespace, name, uid, child)
            # the call ends once the crash is recorded, so whoever reads the Actor next sees it CRASHED
            exited = child.exit_recorded if child is not None else None
            await invoke_actor(
                url,
                request,
                timeout=self.config.turn_timeout,
                exited=exited,
                describe=lambda: self._exit_message(uid, child),
            )
        finally:
            self._in_flight[uid] -= 1
            if not self._in_flight[uid]:
                del self._in_flight[uid]

    async def cancel_turn(
        self, atespace: str, name: str, uid: str, session_id: str, task_id: str, *, credential: str | None = None
    ) -> None:
        """A2A CancelTask to a RUNNING Actor's endpoint (best effort: the SDK cancels the executor's
        work); an Actor that is not running has no turn to stop. NOT_FOUND, or FAILED_PRECONDITION
        for another UID. `credential` is not needed: the process's environment has it."""
        row = await self._row(atespace, name, uid)
        if row["state"] != ActorState.RUNNING.value or row["port"] is None:
            return
        await cancel_actor_turn(
            f"http://127.0.0.1:{row['port']}", session_id, task_id, timeout=self.config.cancel_timeout
        )

    async def _until_ready(self, atespace: str, name: str, uid: str, child: Child) -> None:
        """Wait until the Actor's /readyz answered 200 (RT-3); UNAVAILABLE when it will not: its
        process ended (with its exit status, once recorded) or it was not ready in time."""
        why = await readiness.wait_ready(child, self.config.ready_timeout)
        if why is None:
            return
        if child.exited.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(child.exit_recorded.wait(), EXIT_GRACE)
            raise SubstrateError(Code.UNAVAILABLE, self._exit_message(uid, child))
        raise SubstrateError(Code.UNAVAILABLE, f"actor {atespace}/{name}: {why}")

    def actor_ready(self, uid: str) -> bool | None:
        """Whether the Actor's current process answered 200 at its /readyz (None: no process)."""
        child = self._children.get(uid)
        return child.ready.is_set() if child is not None else None

    def _exit_message(self, uid: str, child: Child | None) -> str:
        if child is None or child.returncode is None:
            return "the actor's process ended during the turn"
        return f"the actor's process ended during the turn: {children.crash_message(child)}"

    # test and operator hooks ----------------------------------------------------------------

    def pid_of(self, uid: str) -> int | None:
        """The pid of the Actor's process while this server runs it."""
        child = self._children.get(uid)
        return child.pid if child is not None else None

    def started_at(self, uid: str) -> float | None:
        """The wall-clock time the Actor's current process was started (None: no process)."""
        child = self._children.get(uid)
        return child.started_at if child is not None else None

    def started_warm(self, uid: str) -> bool | None:
        """Whether the Actor's current process came from a warm interpreter (None: no process)."""
        child = self._children.get(uid)
        return child.warm if child is not None else None

    def warm_pids(self) -> list[int]:
        """The pids of the warm interpreters (or warm sandboxes) waiting for an Actor."""
        return [*self._warm.pids(), *self._warm_sandboxes.pids()]

    async def warm_ready(self, timeout: float = 60.0) -> None:
        """Wait until every warm interpreter (or warm sandbox) the runtime keeps is started and has
        done its imports."""
        await self._warm.wait_ready(timeout)
        await self._warm_sandboxes.wait_ready(timeout)

    def turns_in_flight(self, uid: str) -> int:
        """The invoke calls to the Actor under way in this server (waiting for its readiness, or
        for its answer)."""
        return self._in_flight.get(uid, 0)

    def control_group(self, uid: str) -> ActorGroup | None:
        """The control group of the Actor's running sandbox (None: none, limits.py)."""
        return self._groups.get(uid)

    def sandbox_user(self, uid: str) -> int | None:
        """The unprivileged user the Actor's sandboxed process runs as (None: no such process)."""
        child = self._children.get(uid)
        return child.user if child is not None else None

    async def wait_exited(self, uid: str, timeout: float = 10.0) -> None:
        """Wait until the Actor's process has ended and the runtime has recorded how."""
        child = self._children.get(uid)
        if child is not None:
            await asyncio.wait_for(child.exit_recorded.wait(), timeout)


def _unlink(paths: list[str]) -> None:
    for path in paths:
        if path:
            Path(path).unlink(missing_ok=True)


def _conforms(runtime: ProcessSubstrate) -> Substrate:
    """Static check (mypy) that the process runtime implements the Protocol."""
    return runtime
