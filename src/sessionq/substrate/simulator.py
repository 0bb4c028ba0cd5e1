"""A simulated Substrate runtime backed by PostgreSQL.

`SimulatedSubstrate` implements the `Substrate` Protocol (base.py). Its state lives in the schema
``substrate_sim`` (sim_schema.sql) of the same database as the control plane but OUTSIDE the
control plane's transactions: the simulator has its own small connection pool and every call is a
short transaction of its own that locks (``SELECT ... FOR UPDATE``) the rows it changes. Every
process on the database (API, workers, tests) therefore sees one runtime.

The hot calls (create_actor, get_actor, suspend_actor, resume_actor, delete_actor and
create_egress_policy) are one autocommit statement each: it consumes the call's faults
(substrate_sim.take_faults) and, when none matched, applies the call in the same transaction by
calling the SQL function of the same name in sim_schema.sql. The other calls take their faults in
one statement, then run their own transaction.

Besides the Protocol the simulator offers test hooks: the durable directory of an Actor
(`read_durable` / `write_durable`), pending snapshots (`set_option("snapshot_pending", True)` and
`complete_snapshots`), a log of the mutations that took effect (`calls`, `mutation_count`) and fault
injection (`inject`, `release`, `wait_blocked`, `clear_faults`) stored in the database so that it
works across processes.

`invoke` runs the deterministic agent of agent.py as the Actor would: its memory is the Actor's
durable directory, and it reports the turn to the TaskStoreService at `taskstore_address` (settable
after construction) with the workload token of its env (SESSIONQ_WORKLOAD_TOKEN).

Fault semantics: faults match a Protocol method name and, optionally, a resource name (the Actor
name for actor and egress calls and create_tag; the tag name for get_tag/delete_tag; the template
name for template calls; list calls only match faults without a name). Each call consumes, under a
row lock, at most one *wait* fault (``delay``, ``block``) and at most one *outcome* fault
(``fail_before``, ``lose_after``, ``empty_page``, ``stuck_token``), the oldest matching of each, so
several outcome faults on one method script consecutive calls. Waits never hold a transaction or a
connection: blocked calls poll the faults table every 10 ms. (A hot call whose statement took faults
did nothing else; it honours them, then applies the call with its function alone.)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import importlib.resources
import inspect
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any, NoReturn, TypeVar

import psycopg
from a2a.types import a2a_pb2
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp
from psycopg import errors as pg_errors
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from sessionq.substrate.agent import TurnResult, run_turn
from sessionq.substrate.base import (
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
from sessionq.substrate.taskstore_client import TaskStoreClient, TaskStoreError

__all__ = [
    "FAULT_KINDS",
    "PROTOCOL_METHODS",
    "WORKLOAD_TOKEN_ENV",
    "SimulatedSubstrate",
    "decode_actor_token",
    "encode_actor_token",
    "install_schema",
    "worker_identity",
]

T = TypeVar("T")

SCHEMA = "substrate_sim"
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
POLL_INTERVAL = 0.01  # seconds between polls of the faults table while blocked or waiting

WORKER_ATESPACE = "kagent"
WORKER_PREFIX = "kagent-default-7c9f8b6d54-"
WORKER_STATE = "WORKER_STATE_READY"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of Kubernetes' generated name suffixes

# pg_advisory_xact_lock key serialising install_schema across processes ("SubstrSm").
_INSTALL_LOCK_KEY = 0x5375627374725353

# the env variable holding the Actor's workload credential for the TaskStoreService
WORKLOAD_TOKEN_ENV = "SESSIONQ_WORKLOAD_TOKEN"

EGRESS_PROTOCOLS = frozenset({"http", "https", "tls_passthrough"})

PROTOCOL_METHODS: frozenset[str] = frozenset(
    name for name, value in vars(Substrate).items() if not name.startswith("_") and inspect.iscoroutinefunction(value)
)
LIST_METHODS = frozenset({"list_actors", "list_workers"})

_WAIT_KINDS = frozenset({"delay", "block"})  # also spelled out in substrate_sim.take_faults
_LIST_KINDS = frozenset({"empty_page", "stuck_token"})
FAULT_KINDS = frozenset({"delay", "fail_before", "lose_after", "block"}) | _LIST_KINDS

_WORKER_HOLDING_STATES = (ActorState.RUNNING, ActorState.PAUSED)


# --------------------------------------------------------------------------------------------
# schema installation


def _schema_sql() -> str:
    return importlib.resources.files("sessionq.substrate").joinpath("sim_schema.sql").read_text("utf-8")


def worker_identity(index: int, taken: set[str] | None = None) -> tuple[str, str]:
    """The (name, ip) of the worker with this pool index: deterministic from the index.

    `taken` holds names already given to lower indices; a (very unlikely) suffix collision is
    resolved deterministically by hashing again."""
    attempt = 0
    while True:
        digest = hashlib.sha256(f"substrate-sim-worker:{index}:{attempt}".encode()).digest()
        suffix = "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])
        name = WORKER_PREFIX + suffix
        if taken is None or name not in taken:
            return name, f"10.244.{index // 250}.{index % 250 + 2}"
        attempt += 1


def _worker_rows(count: int) -> list[tuple[str, int, str, str]]:
    taken: set[str] = set()
    rows = []
    for i in range(count):
        name, ip = worker_identity(i, taken)
        taken.add(name)
        rows.append((name, i, WORKER_ATESPACE, ip))
    return rows


async def install_schema(conninfo: str, *, worker_pool_size: int = 256) -> None:
    """Create the simulator schema and the worker pool rows that are missing. Idempotent and safe
    when several processes run it at once (transaction-level advisory lock)."""
    if worker_pool_size < 0:
        raise ValueError("worker_pool_size must be >= 0")
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_INSTALL_LOCK_KEY,))
            await conn.execute(_schema_sql().encode())
            async with conn.cursor() as cur:
                await cur.execute("SELECT count(*) FROM substrate_sim.workers")
                row = await cur.fetchone()
                existing = int(row[0]) if row else 0
                if existing < worker_pool_size:
                    await cur.executemany(
                        "INSERT INTO substrate_sim.workers (name, idx, atespace, ip, state)"
                        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                        [(*r, WORKER_STATE) for r in _worker_rows(worker_pool_size)[existing:]],
                    )


# --------------------------------------------------------------------------------------------
# page tokens (the runtime's keyset format)


def encode_actor_token(atespace: str | None, name: str) -> str:
    """Keyset token resuming strictly after (atespace, name); atespace None for a listing within
    one atespace and for workers: urlsafe base64 (no padding) of compact JSON."""
    payload: dict[str, Any] = {"v": 1}
    if atespace is not None:
        payload["atespace"] = atespace
    payload["name"] = name
    raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_actor_token(token: str, *, global_listing: bool) -> tuple[str | None, str]:
    """Inverse of `encode_actor_token`: (atespace or None, name). `global_listing` says whether the
    token must carry an atespace (a ListActors over all atespaces). Raises INVALID_ARGUMENT."""

    def bad(why: str) -> SubstrateError:
        return SubstrateError(Code.INVALID_ARGUMENT, f"invalid page token {token!r}: {why}")

    if not token or not isinstance(token, str):
        raise bad("empty")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise bad("not base64 JSON") from exc
    if not isinstance(payload, dict) or payload.get("v") != 1:
        raise bad("unsupported version")
    name = payload.get("name")
    if not isinstance(name, str):
        raise bad("missing name")
    expected = {"v", "name", "atespace"} if global_listing else {"v", "name"}
    if set(payload) != expected:
        known = set(payload) <= {"v", "name", "atespace"}
        raise bad("wrong keys for this listing" if known else "unknown keys")
    if global_listing:
        atespace = payload["atespace"]
        if not isinstance(atespace, str):
            raise bad("atespace is not a string")
        return atespace, name
    return None, name


# --------------------------------------------------------------------------------------------
# row conversion helpers


def _rule_to_json(rule: EgressRule) -> dict[str, Any]:
    return {
        "protocol": rule.protocol,
        "hostname": rule.hostname,
        "port": rule.port,
        "credential_headers": dict(sorted(rule.credential_headers.items())),
    }


def _rule_from_json(data: dict[str, Any]) -> EgressRule:
    return EgressRule(
        protocol=data["protocol"],
        hostname=data["hostname"],
        port=int(data["port"]),
        credential_headers=dict(data.get("credential_headers") or {}),
    )


def _rule_sort_key(rule: dict[str, Any]) -> tuple[str, str, int, str]:
    return (rule["protocol"], rule["hostname"], rule["port"], json.dumps(rule["credential_headers"]))


def _canonical_rules(rules: Iterable[EgressRule], *, actor: str) -> list[dict[str, Any]]:
    """Validate and de-duplicate an allow-set; conflicting rules for one host and port are rejected."""
    seen: dict[tuple[str, int], dict[str, Any]] = {}
    for rule in rules:
        if not isinstance(rule, EgressRule):
            raise SubstrateError(Code.INVALID_ARGUMENT, f"egress policy of actor {actor}: not an EgressRule")
        if rule.protocol not in EGRESS_PROTOCOLS:
            raise SubstrateError(
                Code.INVALID_ARGUMENT,
                f"egress policy of actor {actor}: unsupported protocol {rule.protocol!r}",
            )
        if not rule.hostname or not isinstance(rule.port, int) or not 0 < rule.port < 65536:
            raise SubstrateError(
                Code.INVALID_ARGUMENT,
                f"egress policy of actor {actor}: invalid destination {rule.hostname!r}:{rule.port!r}",
            )
        data = _rule_to_json(rule)
        key = (rule.hostname.lower(), rule.port)
        if key in seen and seen[key] != data:
            raise SubstrateError(
                Code.INVALID_ARGUMENT,
                f"egress policy of actor {actor}: conflicting rules for {rule.hostname}:{rule.port}",
            )
        seen[key] = data
    return sorted(seen.values(), key=_rule_sort_key)


def _rule_collection(data: list[dict[str, Any]]) -> frozenset[EgressRule] | tuple[EgressRule, ...]:
    rules = [_rule_from_json(d) for d in data]
    try:
        return frozenset(rules)
    except TypeError:
        # EgressRule is a frozen dataclass holding a dict (credential_headers), so it is unhashable
        # and cannot go into a frozenset; fall back to a tuple in canonical order.
        return tuple(rules)


def _snapshot(row: DictRow) -> Snapshot:
    return Snapshot(
        generation=row["generation"],
        fidelity=SnapshotFidelity(row["fidelity"]),
        status=SnapshotStatus(row["status"]),
        uri=row["uri"],
        created_at=row["created_at"],
    )


def _actor(row: DictRow, snapshots: Iterable[Snapshot] = ()) -> Actor:
    return Actor(
        atespace=row["atespace"],
        name=row["name"],
        uid=row["uid"],
        template=row["template"],
        state=ActorState(row["state"]),
        worker=row["worker"],
        worker_ip=row["worker_ip"],
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        snapshots=tuple(snapshots),
    )


def _template(row: DictRow) -> ActorTemplate:
    return ActorTemplate(
        atespace=row["atespace"],
        name=row["name"],
        uid=row["uid"],
        image=row["image"],
        version=row["version"],
        created_at=row["created_at"],
    )


def _tag(row: DictRow) -> Tag:
    return Tag(
        atespace=row["atespace"],
        name=row["name"],
        actor_name=row["actor_name"],
        actor_uid=row["actor_uid"],
        snapshot_generation=row["snapshot_generation"],
        snapshot_uri=row["uri"],
        created_at=row["created_at"],
    )


def _policy(row: DictRow) -> EgressPolicy:
    return EgressPolicy(actor_uid=row["actor_uid"], rules=_rule_collection(row["rules"]), version=row["version"])


def _worker(row: DictRow) -> Worker:
    holder = f"{row['holder_atespace']}/{row['holder_name']}" if row["holder_name"] is not None else None
    return Worker(name=row["name"], atespace=row["atespace"], ip=row["ip"], actor=holder, state=row["state"])


def _page_size(page_size: int) -> int:
    if page_size < 0:
        raise SubstrateError(Code.INVALID_ARGUMENT, f"negative page_size {page_size}")
    if page_size == 0:
        return DEFAULT_PAGE_SIZE
    return min(page_size, MAX_PAGE_SIZE)


def _require_name(kind: str, value: str) -> None:
    if not isinstance(value, str) or not value or "/" in value:
        raise SubstrateError(Code.INVALID_ARGUMENT, f"invalid {kind} {value!r}")


def _split_template(template: str) -> tuple[str, str]:
    atespace, sep, name = template.partition("/")
    if not sep or not atespace or not name or "/" in name:
        raise SubstrateError(Code.INVALID_ARGUMENT, f"template must be '<atespace>/<name>', got {template!r}")
    return atespace, name


@dataclass(frozen=True)
class _Fault:
    id: int
    kind: str
    code: Code
    delay: float


_ACTOR_SELECT = (
    "SELECT a.atespace, a.name, a.uid, a.template, a.state, a.worker, a.version, a.durable,"
    " a.created_at, a.updated_at, w.ip AS worker_ip"
    " FROM substrate_sim.actors a LEFT JOIN substrate_sim.workers w ON w.name = a.worker"
)

_Cursor = psycopg.AsyncCursor[DictRow]

# The hot calls: the function of sim_schema.sql that applies each, called by `_call_fn`.
_FN_CREATE_ACTOR = (
    "substrate_sim.create_actor(%(atespace)s, %(name)s, %(template)s, %(from_tag)s, %(env)s, %(uid)s, %(pid)s::integer)"
)
_FN_GET_ACTOR = "substrate_sim.get_actor(%(atespace)s, %(name)s)"
_FN_RESUME_ACTOR = (
    "substrate_sim.resume_actor(%(atespace)s, %(name)s, %(uid)s, %(pool_size)s::integer, %(pid)s::integer)"
)
_FN_SUSPEND_ACTOR = "substrate_sim.suspend_actor(%(atespace)s, %(name)s, %(uid)s, %(fidelity)s, %(pid)s::integer)"
_FN_DELETE_ACTOR = "substrate_sim.delete_actor(%(atespace)s, %(name)s, %(uid)s, %(any_state)s, %(pid)s::integer)"
_FN_CREATE_EGRESS_POLICY = (
    "substrate_sim.create_egress_policy(%(atespace)s, %(actor)s, %(uid)s, %(rules)s, %(pid)s::integer)"
)
# One statement: take the call's faults, and apply the call only when none matched.
_GATED = (
    "SELECT CASE WHEN t.faults IS NULL THEN {call} ELSE jsonb_build_object('faults', t.faults) END"
    " FROM substrate_sim.take_faults(%(fault_method)s, %(fault_target)s) AS t(faults)"
)
_FAIL_SQLSTATE = "SX001"  # substrate_sim.fail: the Code name in DETAIL


def _faults_from_json(data: list[dict[str, Any]] | None) -> list[_Fault]:
    """The faults substrate_sim.take_faults returned (NULL: none)."""
    return [_Fault(id=int(d["id"]), kind=d["kind"], code=Code(d["code"]), delay=float(d["delay"])) for d in data or ()]


def _timestamp(value: str, tz: tzinfo) -> datetime:
    """A timestamptz of a jsonb result, in the session time zone as psycopg loads timestamptz columns."""
    return datetime.fromisoformat(value).astimezone(tz)


def _actor_from_json(data: dict[str, Any], tz: tzinfo) -> Actor:
    """An Actor of substrate_sim.actor_json (the same fields as a row of _ACTOR_SELECT)."""
    snapshots = (_snapshot({**snap, "created_at": _timestamp(snap["created_at"], tz)}) for snap in data["snapshots"])
    row = {**data, "created_at": _timestamp(data["created_at"], tz), "updated_at": _timestamp(data["updated_at"], tz)}
    return _actor(row, snapshots)


def _actor_result(result: dict[str, Any], tz: tzinfo) -> Actor:
    return _actor_from_json(result["actor"], tz)


# --------------------------------------------------------------------------------------------
# the simulator

# The simulator's commits do not wait for their WAL flush (asynchronous commit). It stands in for
# a runtime that keeps its own state: its durability is not the control plane's promise, and a
# crash of the server may forget its last changes, as a runtime may lose work. That loss is one
# the control plane already handles: every control-plane commit is synchronous and flushes all
# earlier WAL, so a simulator change survives once anything the control plane recorded after it
# survives (the Actor UID after create_actor, the completion after the egress policy, and so on).
# What can be lost is only a change the control plane never recorded, which is a lost response
# (OP-14): a retry inspects the Actor and continues from what exists. Saves a WAL flush on each
# runtime call (two per creation). Set on each new connection of the simulator's pool, so that
# options in the database URL stay as they are.
async def _commit_asynchronously(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute("SET synchronous_commit = off")


class SimulatedSubstrate:
    """The runtime simulator; see the module docstring. Use ``async with SimulatedSubstrate(url)``
    or call `open` / `close`. `worker_pool_size` bounds the workers this instance allocates and lists
    (the pool rows are created by `install_schema`; `open` adds missing ones); every process on one
    database should use the same size."""

    def __init__(
        self,
        conninfo: str,
        *,
        worker_pool_size: int = 256,
        taskstore_address: str | None = None,
        pool_size: int = 8,
        taskstore_message_limit: int | None = None,
    ) -> None:
        if worker_pool_size < 0:
            raise ValueError("worker_pool_size must be >= 0")
        self._conninfo = conninfo
        self.worker_pool_size = worker_pool_size
        # "host:port" of the TaskStoreService the simulated agents report to; may be set later
        self.taskstore_address = taskstore_address
        # the gRPC message limit of the agents' task store channel (None: the client's default, sized
        # for the default a2a.maxMessageBytes)
        self.taskstore_message_limit = taskstore_message_limit
        self._pool: AsyncConnectionPool | None = None
        self._pool_size = pool_size

    # lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None:
            return
        pool = AsyncConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=self._pool_size,
            open=False,
            name="substrate_sim",
            kwargs={"autocommit": True, "application_name": "substrate_sim"},
            configure=_commit_asynchronously,
        )
        await pool.open(wait=True, timeout=30.0)
        self._pool = pool
        try:
            await self._ensure_installed()
        except BaseException:
            self._pool = None
            await pool.close()
            raise

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def __aenter__(self) -> SimulatedSubstrate:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _ensure_installed(self) -> None:
        """Install the schema when it is missing, lacks its functions or indexes (a database
        installed before they existed) or holds fewer workers than this instance's pool."""
        async with self._tx() as cur:
            await cur.execute(
                "SELECT to_regclass('substrate_sim.workers') IS NOT NULL AS present,"
                " to_regprocedure('substrate_sim.release_worker(text,text)') IS NOT NULL"
                " AND to_regclass('substrate_sim.workers_free_idx') IS NOT NULL AS current"
            )
            row = await cur.fetchone()
            present = bool(row and row["present"])
            current = bool(row and row["current"])
            count = 0
            if present:
                await cur.execute("SELECT count(*) AS n FROM substrate_sim.workers")
                row = await cur.fetchone()
                count = int(row["n"]) if row else 0
        if not present or not current or count < self.worker_pool_size:
            await install_schema(self._conninfo, worker_pool_size=self.worker_pool_size)

    @contextlib.asynccontextmanager
    async def _tx(self) -> AsyncIterator[_Cursor]:
        """One short transaction on a pooled connection."""
        if self._pool is None:
            raise RuntimeError("SimulatedSubstrate is not open")
        try:
            async with self._pool.connection() as conn, conn.transaction():
                async with conn.cursor(row_factory=dict_row) as cur:
                    yield cur
        except pg_errors.TransactionRollback as exc:
            raise SubstrateError(Code.ABORTED, f"simulated runtime transaction aborted: {exc}") from exc
        except psycopg.OperationalError as exc:
            raise SubstrateError(Code.UNAVAILABLE, f"simulated runtime store unavailable: {exc}") from exc

    # faults ---------------------------------------------------------------------------------

    async def _execute(self, sql: str, params: Any) -> tuple[Any, tzinfo]:
        """One statement on an autocommit pooled connection (its own transaction, one round trip):
        the first column of its first row (None without rows) and the session time zone. Errors map
        as in `_tx`; substrate_sim.fail's SX001 becomes SubstrateError(Code(detail), message)."""
        if self._pool is None:
            raise RuntimeError("SimulatedSubstrate is not open")
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(sql, params)
                row = await cur.fetchone()
                tz = conn.info.timezone
        except pg_errors.TransactionRollback as exc:
            raise SubstrateError(Code.ABORTED, f"simulated runtime transaction aborted: {exc}") from exc
        except psycopg.OperationalError as exc:
            raise SubstrateError(Code.UNAVAILABLE, f"simulated runtime store unavailable: {exc}") from exc
        except psycopg.Error as exc:
            if exc.sqlstate == _FAIL_SQLSTATE:
                raise SubstrateError(
                    Code(exc.diag.message_detail or Code.INTERNAL), exc.diag.message_primary or ""
                ) from None
            raise
        return (row[0] if row is not None else None), tz

    async def _take_faults(self, method: str, target: str | None) -> list[_Fault]:
        """Atomically consume the oldest matching wait fault and the oldest matching outcome fault
        (substrate_sim.take_faults).

        One statement on an autocommit connection (its own transaction): with no faults injected,
        which is the common case, a call pays one round trip for this."""
        result, _ = await self._execute("SELECT substrate_sim.take_faults(%s, %s)", (method, target))
        return _faults_from_json(result)

    async def _block_on(self, fault_id: int) -> None:
        """Wait until the block fault is released. Each step is one autocommit statement, so a
        blocked call never sits idle in a transaction (what the control plane must never do during
        runtime I/O stays observable in pg_stat_activity)."""
        await self._execute(
            "UPDATE substrate_sim.faults SET blocked = blocked + 1, blocked_total = blocked_total + 1"
            " WHERE id = %s RETURNING id",
            (fault_id,),
        )
        try:
            while True:
                released, _ = await self._execute(
                    "SELECT coalesce((SELECT released FROM substrate_sim.faults WHERE id = %s), true)", (fault_id,)
                )
                if released:
                    return
                await asyncio.sleep(POLL_INTERVAL)
        finally:
            with contextlib.suppress(Exception):
                await self._execute(
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
        """A hot call: `call` is the SQL function of `method` (see sim_schema.sql). One statement
        takes the call's faults and, when none matched, applies it. When faults matched (and
        nothing else happened), they are honoured as by `_call`, the effect being the function
        called on its own."""
        gated = _GATED.format(call=call)
        result, tz = await self._execute(gated, {**params, "fault_method": method, "fault_target": target})
        if "faults" not in result:
            return parse(result, tz)

        async def effect() -> T:
            again, tz = await self._execute("SELECT " + call, params)
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
        async with self._tx() as cur:
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
        async with self._tx() as cur:
            await cur.execute("UPDATE substrate_sim.faults SET released = true WHERE id = %s", (fault_id,))

    async def clear_faults(self) -> None:
        """Remove every fault; calls blocked on one proceed."""
        async with self._tx() as cur:
            await cur.execute("DELETE FROM substrate_sim.faults")

    async def wait_blocked(self, fault_id: int, timeout: float = 5.0, *, count: int = 1) -> None:
        """Return once at least `count` calls are blocked on the fault; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            async with self._tx() as cur:
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
        async with self._tx() as cur:
            await cur.execute("SELECT hits FROM substrate_sim.faults WHERE id = %s", (fault_id,))
            row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"fault {fault_id} not found")
        return int(row["hits"])

    # options, call log ---------------------------------------------------------------------

    async def set_option(self, key: str, value: Any) -> None:
        async with self._tx() as cur:
            await cur.execute(
                "INSERT INTO substrate_sim.options (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = clock_timestamp()",
                (key, Jsonb(value)),
            )

    async def get_option(self, key: str) -> Any:
        """The option's value, None when unset."""
        async with self._tx() as cur:
            await cur.execute("SELECT value FROM substrate_sim.options WHERE key = %s", (key,))
            row = await cur.fetchone()
        return None if row is None else row["value"]

    async def mutation_count(self, *, actor: str | None = None, method: str | None = None) -> int:
        """Mutations that took effect, optionally for one resource name and/or one method."""
        async with self._tx() as cur:
            await cur.execute(
                "SELECT count(*) AS n FROM substrate_sim.calls"
                " WHERE (%(actor)s::text IS NULL OR name = %(actor)s)"
                " AND (%(method)s::text IS NULL OR method = %(method)s)",
                {"actor": actor, "method": method},
            )
            row = await cur.fetchone()
        return int(row["n"]) if row else 0

    async def calls(self, actor: str | None = None) -> list[dict[str, Any]]:
        """The mutation log in order: dicts with id, method, atespace, name, uid, detail, pid, at."""
        async with self._tx() as cur:
            await cur.execute(
                "SELECT id, method, atespace, name, uid, detail, pid, at FROM substrate_sim.calls"
                " WHERE (%(actor)s::text IS NULL OR name = %(actor)s) ORDER BY id",
                {"actor": actor},
            )
            return [dict(r) for r in await cur.fetchall()]

    @staticmethod
    async def _log(
        cur: _Cursor,
        method: str,
        atespace: str | None,
        name: str | None,
        uid: str | None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        await cur.execute(
            "INSERT INTO substrate_sim.calls (method, atespace, name, uid, detail, pid)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (method, atespace, name, uid, Jsonb(detail) if detail is not None else None, os.getpid()),
        )

    # shared actor helpers ------------------------------------------------------------------

    @staticmethod
    async def _lock_actor(cur: _Cursor, atespace: str, name: str, uid: str | None) -> DictRow:
        """Lock the Actor row; NOT_FOUND if missing, FAILED_PRECONDITION if `uid` differs."""
        await cur.execute(_ACTOR_SELECT + " WHERE a.atespace = %s AND a.name = %s FOR UPDATE OF a", (atespace, name))
        row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"actor {atespace}/{name} not found")
        if uid is not None and row["uid"] != uid:
            raise SubstrateError(
                Code.FAILED_PRECONDITION,
                f"actor uid mismatch for {atespace}/{name}: expected {uid}, found {row['uid']}",
            )
        return row

    @staticmethod
    async def _snapshots_of(cur: _Cursor, uids: list[str]) -> dict[str, list[Snapshot]]:
        result: dict[str, list[Snapshot]] = {u: [] for u in uids}
        if uids:
            await cur.execute(
                "SELECT actor_uid, generation, fidelity, status, uri, created_at FROM substrate_sim.snapshots"
                " WHERE actor_uid = ANY(%s) ORDER BY actor_uid, generation",
                (uids,),
            )
            for row in await cur.fetchall():
                result[row["actor_uid"]].append(_snapshot(row))
        return result

    async def _load_actor(self, cur: _Cursor, atespace: str, name: str) -> Actor:
        await cur.execute(_ACTOR_SELECT + " WHERE a.atespace = %s AND a.name = %s", (atespace, name))
        row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"actor {atespace}/{name} not found")
        snaps = await self._snapshots_of(cur, [row["uid"]])
        return _actor(row, snaps[row["uid"]])

    @staticmethod
    async def _release_worker(cur: _Cursor, row: DictRow) -> None:
        if row["worker"] is not None:
            await cur.execute("SELECT substrate_sim.release_worker(%s, %s)", (row["worker"], row["uid"]))

    # templates -----------------------------------------------------------------------------

    async def create_actor_template(self, atespace: str, name: str, image: str) -> ActorTemplate:
        async def op() -> ActorTemplate:
            _require_name("atespace", atespace)
            _require_name("template name", name)
            async with self._tx() as cur:
                await cur.execute(
                    "INSERT INTO substrate_sim.templates (atespace, name, uid, image) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (atespace, name) DO NOTHING RETURNING *",
                    (atespace, name, str(uuid.uuid4()), image),
                )
                row = await cur.fetchone()
                if row is None:
                    raise SubstrateError(Code.ALREADY_EXISTS, f"actor template {atespace}/{name} already exists")
                await self._log(cur, "create_actor_template", atespace, name, row["uid"], {"image": image})
                return _template(row)

        return await self._call("create_actor_template", name, op)

    async def get_actor_template(self, atespace: str, name: str) -> ActorTemplate:
        async def op() -> ActorTemplate:
            async with self._tx() as cur:
                await cur.execute(
                    "SELECT * FROM substrate_sim.templates WHERE atespace = %s AND name = %s",
                    (atespace, name),
                )
                row = await cur.fetchone()
            if row is None:
                raise SubstrateError(Code.NOT_FOUND, f"actor template {atespace}/{name} not found")
            return _template(row)

        return await self._call("get_actor_template", name, op)

    async def delete_actor_template(self, atespace: str, name: str, uid: str) -> None:
        async def op() -> None:
            async with self._tx() as cur:
                await cur.execute(
                    "SELECT uid FROM substrate_sim.templates WHERE atespace = %s AND name = %s FOR UPDATE",
                    (atespace, name),
                )
                row = await cur.fetchone()
                if row is None:
                    raise SubstrateError(Code.NOT_FOUND, f"actor template {atespace}/{name} not found")
                if row["uid"] != uid:
                    raise SubstrateError(
                        Code.FAILED_PRECONDITION,
                        f"actor template uid mismatch for {atespace}/{name}: expected {uid}, found {row['uid']}",
                    )
                await cur.execute(
                    "DELETE FROM substrate_sim.templates WHERE atespace = %s AND name = %s", (atespace, name)
                )
                await self._log(cur, "delete_actor_template", atespace, name, uid)

        await self._call("delete_actor_template", name, op)

    # actors --------------------------------------------------------------------------------

    async def create_actor(
        self,
        atespace: str,
        name: str,
        template: str,
        *,
        from_tag: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Actor:
        try:
            _require_name("atespace", atespace)
            _require_name("actor name", name)
            _split_template(template)
            env_json = Jsonb(dict(env or {}))
        except Exception as exc:
            await self._rejected("create_actor", name, exc)
        params = {
            "atespace": atespace,
            "name": name,
            "template": template,
            "from_tag": from_tag,
            "env": env_json,
            "uid": str(uuid.uuid4()),
            "pid": os.getpid(),
        }
        return await self._call_fn("create_actor", name, _FN_CREATE_ACTOR, params, _actor_result)

    async def get_actor(self, atespace: str, name: str) -> Actor:
        params = {"atespace": atespace, "name": name}
        return await self._call_fn("get_actor", name, _FN_GET_ACTOR, params, _actor_result)

    async def resume_actor(self, atespace: str, name: str, uid: str) -> tuple[Actor, bool]:
        def parse(result: dict[str, Any], tz: tzinfo) -> tuple[Actor, bool]:
            return _actor_from_json(result["actor"], tz), bool(result["changed"])

        params = {
            "atespace": atespace,
            "name": name,
            "uid": uid,
            "pool_size": self.worker_pool_size,
            "pid": os.getpid(),
        }
        return await self._call_fn("resume_actor", name, _FN_RESUME_ACTOR, params, parse)

    async def suspend_actor(
        self, atespace: str, name: str, uid: str, fidelity: SnapshotFidelity = SnapshotFidelity.VOLUMES
    ) -> Actor:
        try:
            fid = SnapshotFidelity(fidelity)
            if fid in (SnapshotFidelity.ROOTFS, SnapshotFidelity.UNSPECIFIED):
                raise SubstrateError(
                    Code.INVALID_ARGUMENT,
                    f"snapshot fidelity {fid.value} rejected (suspending {atespace}/{name})",
                )
        except Exception as exc:
            await self._rejected("suspend_actor", name, exc)
        params = {"atespace": atespace, "name": name, "uid": uid, "fidelity": fid.value, "pid": os.getpid()}
        return await self._call_fn("suspend_actor", name, _FN_SUSPEND_ACTOR, params, _actor_result)

    async def pause_actor(self, atespace: str, name: str, uid: str) -> Actor:
        async def op() -> Actor:
            async with self._tx() as cur:
                row = await self._lock_actor(cur, atespace, name, uid)
                state = ActorState(row["state"])
                if state == ActorState.PAUSED:
                    return await self._load_actor(cur, atespace, name)
                if state != ActorState.RUNNING:
                    raise SubstrateError(
                        Code.FAILED_PRECONDITION, f"actor {atespace}/{name} cannot pause from {state.value}"
                    )
                await cur.execute(
                    "UPDATE substrate_sim.actors SET state = %s, version = version + 1,"
                    " updated_at = clock_timestamp() WHERE uid = %s",
                    (ActorState.PAUSED.value, uid),
                )
                await self._log(cur, "pause_actor", atespace, name, uid)
                return await self._load_actor(cur, atespace, name)

        return await self._call("pause_actor", name, op)

    async def delete_actor(self, atespace: str, name: str, uid: str, *, any_state: bool = False) -> None:
        params = {"atespace": atespace, "name": name, "uid": uid, "any_state": bool(any_state), "pid": os.getpid()}
        await self._call_fn("delete_actor", name, _FN_DELETE_ACTOR, params, lambda result, tz: None)

    # egress --------------------------------------------------------------------------------

    async def create_egress_policy(self, atespace: str, actor: str, uid: str, rules: list[EgressRule]) -> EgressPolicy:
        try:
            data = _canonical_rules(rules, actor=f"{atespace}/{actor}")
        except Exception as exc:
            await self._rejected("create_egress_policy", actor, exc)

        def parse(result: dict[str, Any], tz: tzinfo) -> EgressPolicy:
            policy = result["policy"]
            return EgressPolicy(
                actor_uid=policy["actor_uid"], rules=_rule_collection(policy["rules"]), version=int(policy["version"])
            )

        params = {"atespace": atespace, "actor": actor, "uid": uid, "rules": Jsonb(data), "pid": os.getpid()}
        return await self._call_fn("create_egress_policy", actor, _FN_CREATE_EGRESS_POLICY, params, parse)

    async def get_egress_policy(self, atespace: str, actor: str) -> EgressPolicy:
        async def op() -> EgressPolicy:
            async with self._tx() as cur:
                await cur.execute(
                    "SELECT a.uid, p.* FROM substrate_sim.actors a"
                    " LEFT JOIN substrate_sim.egress_policies p ON p.actor_uid = a.uid"
                    " WHERE a.atespace = %s AND a.name = %s",
                    (atespace, actor),
                )
                row = await cur.fetchone()
            if row is None:
                raise SubstrateError(Code.NOT_FOUND, f"actor {atespace}/{actor} not found")
            if row["actor_uid"] is None:
                raise SubstrateError(Code.NOT_FOUND, f"egress policy default of actor {atespace}/{actor} not found")
            return _policy(row)

        return await self._call("get_egress_policy", actor, op)

    async def update_egress_policy(self, atespace: str, actor: str, uid: str, rules: list[EgressRule]) -> EgressPolicy:
        async def op() -> EgressPolicy:
            data = _canonical_rules(rules, actor=f"{atespace}/{actor}")
            async with self._tx() as cur:
                await self._lock_actor(cur, atespace, actor, uid)
                await cur.execute(
                    "UPDATE substrate_sim.egress_policies SET rules = %s, version = version + 1,"
                    " updated_at = clock_timestamp() WHERE actor_uid = %s RETURNING *",
                    (Jsonb(data), uid),
                )
                row = await cur.fetchone()
                if row is None:
                    raise SubstrateError(Code.NOT_FOUND, f"egress policy default of actor {atespace}/{actor} not found")
                await self._log(cur, "update_egress_policy", atespace, actor, uid, {"rules": data})
                return _policy(row)

        return await self._call("update_egress_policy", actor, op)

    # tags ----------------------------------------------------------------------------------

    async def create_tag(self, atespace: str, name: str, actor: str, uid: str) -> Tag:
        async def op() -> Tag:
            _require_name("tag name", name)
            async with self._tx() as cur:
                row = await self._lock_actor(cur, atespace, actor, uid)
                if row["state"] != ActorState.SUSPENDED.value:
                    raise SubstrateError(
                        Code.FAILED_PRECONDITION,
                        f"actor {atespace}/{actor} is {row['state']}; only a SUSPENDED actor can be tagged",
                    )
                await cur.execute(
                    "SELECT generation, fidelity, status, uri, durable FROM substrate_sim.snapshots"
                    " WHERE actor_uid = %s ORDER BY generation DESC LIMIT 1",
                    (uid,),
                )
                snap = await cur.fetchone()
                if snap is None:
                    raise SubstrateError(Code.FAILED_PRECONDITION, f"actor {atespace}/{actor} has no snapshot to tag")
                if snap["status"] != SnapshotStatus.COMPLETED.value:
                    raise SubstrateError(
                        Code.FAILED_PRECONDITION,
                        f"snapshot generation {snap['generation']} of actor {atespace}/{actor} is not completed",
                    )
                await cur.execute(
                    "INSERT INTO substrate_sim.tags (atespace, name, actor_name, actor_uid,"
                    " snapshot_generation, fidelity, uri, durable) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (atespace, name) DO NOTHING RETURNING *",
                    (
                        atespace,
                        name,
                        actor,
                        uid,
                        snap["generation"],
                        snap["fidelity"],
                        snap["uri"],
                        Jsonb(snap["durable"]),
                    ),
                )
                tag = await cur.fetchone()
                if tag is None:
                    raise SubstrateError(Code.ALREADY_EXISTS, f"tag {atespace}/{name} already exists")
                detail = {"tag": name, "generation": snap["generation"]}
                await self._log(cur, "create_tag", atespace, actor, uid, detail)
                return _tag(tag)

        return await self._call("create_tag", actor, op)

    async def get_tag(self, atespace: str, name: str) -> Tag:
        async def op() -> Tag:
            async with self._tx() as cur:
                await cur.execute(
                    "SELECT * FROM substrate_sim.tags WHERE atespace = %s AND name = %s", (atespace, name)
                )
                row = await cur.fetchone()
            if row is None:
                raise SubstrateError(Code.NOT_FOUND, f"tag {atespace}/{name} not found")
            return _tag(row)

        return await self._call("get_tag", name, op)

    async def delete_tag(self, atespace: str, name: str) -> None:
        async def op() -> None:
            async with self._tx() as cur:
                # Lock the tagged actor (if it still exists) before the tag, the order create_tag and
                # delete_actor use, so a concurrent delete_actor cannot leave the snapshot orphaned.
                await cur.execute(
                    "SELECT a.uid FROM substrate_sim.tags t"
                    " JOIN substrate_sim.actors a ON a.uid = t.actor_uid"
                    " WHERE t.atespace = %s AND t.name = %s FOR UPDATE OF a",
                    (atespace, name),
                )
                await cur.fetchall()
                await cur.execute(
                    "DELETE FROM substrate_sim.tags WHERE atespace = %s AND name = %s"
                    " RETURNING actor_uid, snapshot_generation",
                    (atespace, name),
                )
                row = await cur.fetchone()
                if row is None:
                    raise SubstrateError(Code.NOT_FOUND, f"tag {atespace}/{name} not found")
                # collect the snapshot the tag kept alive once its actor is gone and nothing else pins it
                await cur.execute(
                    "DELETE FROM substrate_sim.snapshots s"
                    " WHERE s.actor_uid = %(uid)s AND s.generation = %(g)s"
                    " AND NOT EXISTS (SELECT 1 FROM substrate_sim.actors a WHERE a.uid = %(uid)s)"
                    " AND NOT EXISTS (SELECT 1 FROM substrate_sim.tags t"
                    "   WHERE t.actor_uid = %(uid)s AND t.snapshot_generation = %(g)s)",
                    {"uid": row["actor_uid"], "g": row["snapshot_generation"]},
                )
                await self._log(cur, "delete_tag", atespace, name, None, {"actor_uid": row["actor_uid"]})

        await self._call("delete_tag", name, op)

    # inventory -----------------------------------------------------------------------------

    async def list_actors(self, atespace: str | None, page_size: int, page_token: str) -> Page[Actor]:
        global_listing = atespace is None
        size = _page_size(page_size)
        boundary = decode_actor_token(page_token, global_listing=global_listing) if page_token else None

        def fake_page(kind: str) -> Page[Actor]:
            if kind == "stuck_token" and page_token:
                return Page(items=[], next_page_token=page_token)
            key = boundary or (("" if global_listing else None), "")
            # an empty page that still advances: just past the boundary ("\x01" sorts before any name character)
            name = key[1] + "\x01" if boundary else key[1]
            return Page(items=[], next_page_token=encode_actor_token(key[0], name))

        async def op() -> Page[Actor]:
            async with self._tx() as cur:
                if global_listing:
                    b_atespace, b_name = boundary if boundary is not None else ("", "")
                    await cur.execute(
                        _ACTOR_SELECT + " WHERE (a.atespace, a.name) > (%s, %s) ORDER BY a.atespace, a.name LIMIT %s",
                        (b_atespace, b_name, size + 1),
                    )
                else:
                    b_name = boundary[1] if boundary is not None else ""
                    await cur.execute(
                        _ACTOR_SELECT + " WHERE a.atespace = %s AND a.name > %s ORDER BY a.name LIMIT %s",
                        (atespace, b_name, size + 1),
                    )
                rows = await cur.fetchall()
                more = len(rows) > size
                rows = rows[:size]
                snaps = await self._snapshots_of(cur, [r["uid"] for r in rows])
            items = [_actor(r, snaps[r["uid"]]) for r in rows]
            token = ""
            if more:
                last = items[-1]
                token = encode_actor_token(last.atespace if global_listing else None, last.name)
            return Page(items=items, next_page_token=token)

        return await self._call("list_actors", None, op, fake_page)

    async def list_workers(self, page_size: int, page_token: str) -> Page[Worker]:
        size = _page_size(page_size)
        boundary = decode_actor_token(page_token, global_listing=False)[1] if page_token else None

        def fake_page(kind: str) -> Page[Worker]:
            if kind == "stuck_token" and page_token:
                return Page(items=[], next_page_token=page_token)
            return Page(items=[], next_page_token=encode_actor_token(None, boundary + "\x01" if boundary else ""))

        async def op() -> Page[Worker]:
            async with self._tx() as cur:
                await cur.execute(
                    "SELECT * FROM substrate_sim.workers WHERE idx < %s AND name > %s ORDER BY name LIMIT %s",
                    (self.worker_pool_size, boundary or "", size + 1),
                )
                rows = await cur.fetchall()
            more = len(rows) > size
            items = [_worker(r) for r in rows[:size]]
            return Page(items=items, next_page_token=encode_actor_token(None, items[-1].name) if more else "")

        return await self._call("list_workers", None, op, fake_page)

    # the Actor's private A2A endpoint ------------------------------------------------------

    async def invoke(self, atespace: str, name: str, uid: str, request: InvokeRequest) -> None:
        """Run one turn of the simulated agent (sessionq.substrate.agent) inside the RUNNING Actor.

        The agent reports through the TaskStoreService at `taskstore_address` with the workload
        token of its env (SESSIONQ_WORKLOAD_TOKEN): CreateTask (WORKING) for a new turn, or GetTask
        and UpdateTask (WORKING) for a continuation; then, after the turn's delay and the write of
        its memory to the durable directory, UpdateTask with the final task and SettleTask with
        that version. A task store error becomes a SubstrateError with the same code (INTERNAL for
        codes the runtime does not use)."""

        async def op() -> None:
            async with self._tx() as cur:
                await cur.execute(
                    "SELECT uid, state, env, durable FROM substrate_sim.actors WHERE atespace = %s AND name = %s",
                    (atespace, name),
                )
                row = await cur.fetchone()
            if row is None:
                raise SubstrateError(Code.NOT_FOUND, f"actor {atespace}/{name} not found")
            if row["uid"] != uid:
                raise SubstrateError(
                    Code.FAILED_PRECONDITION,
                    f"actor uid mismatch for {atespace}/{name}: expected {uid}, found {row['uid']}",
                )
            if row["state"] != ActorState.RUNNING.value:
                raise SubstrateError(
                    Code.FAILED_PRECONDITION, f"actor {atespace}/{name} is not running ({row['state']})"
                )
            address = self.taskstore_address
            if not address:
                raise SubstrateError(
                    Code.FAILED_PRECONDITION,
                    f"actor {atespace}/{name} cannot report its turn: no task store address configured",
                )
            token = dict(row["env"] or {}).get(WORKLOAD_TOKEN_ENV)
            if not token:
                raise SubstrateError(
                    Code.FAILED_PRECONDITION,
                    f"actor {atespace}/{name} has no workload credential ({WORKLOAD_TOKEN_ENV} unset)",
                )
            message = _parse_message(request.message)
            text = "\n".join(p.text for p in message.parts if p.WhichOneof("content") == "text")
            turn = run_turn(dict(row["durable"] or {}), text, continuation=request.task_id is not None)
            client = (
                TaskStoreClient(address, token)
                if self.taskstore_message_limit is None
                else TaskStoreClient(address, token, max_message_bytes=self.taskstore_message_limit)
            )
            try:
                await self._agent_turn(client, atespace, name, uid, request, message, turn)
            except TaskStoreError as exc:
                code = Code.__members__.get(exc.code.name, Code.INTERNAL)
                raise SubstrateError(code, f"actor {atespace}/{name}: {exc}") from exc
            finally:
                await client.close()

        await self._call("invoke", name, op)

    async def _agent_turn(
        self,
        client: TaskStoreClient,
        atespace: str,
        name: str,
        uid: str,
        request: InvokeRequest,
        message: a2a_pb2.Message,
        turn: TurnResult,
    ) -> None:
        session_id = request.session_id
        user = a2a_pb2.Message()
        user.CopyFrom(message)
        user.role = a2a_pb2.ROLE_USER
        if not user.message_id:
            user.message_id = str(uuid.uuid4())

        # 1. the task is WORKING
        if request.task_id is None:
            task_id = str(uuid.uuid4())
            context_id = session_id
            user.context_id, user.task_id = context_id, task_id
            task = a2a_pb2.Task(
                id=task_id,
                context_id=context_id,
                status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING, timestamp=_now()),
            )
            task.history.append(user)
            version = await client.create_task(session_id, task, request.dispatch_id)
        else:
            task_id = request.task_id
            task, version = await client.get_task(session_id, task_id)
            context_id = task.context_id or session_id
            user.context_id, user.task_id = context_id, task_id
            task.history.append(user)
            task.status.CopyFrom(a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING, timestamp=_now()))
            version = await client.update_task(session_id, task, version, _status_event(task), request.dispatch_id)

        # 2. the turn takes its time (the Actor stays RUNNING), then the agent saves its memory
        if turn.delay > 0:
            await asyncio.sleep(turn.delay)
        await self.write_durable(atespace, name, uid, turn.memory)

        # 3. the final update (the task store stages it until the task is settled)
        state = a2a_pb2.TaskState.Value(turn.state)
        answer = a2a_pb2.Message(
            message_id=str(uuid.uuid4()),
            context_id=context_id,
            task_id=task_id,
            role=a2a_pb2.ROLE_AGENT,
            parts=[a2a_pb2.Part(text=turn.answer)],
        )
        task.status.CopyFrom(a2a_pb2.TaskStatus(state=state, message=answer, timestamp=_now()))
        task.history.append(answer)
        if state == a2a_pb2.TASK_STATE_COMPLETED:
            task.artifacts.append(
                a2a_pb2.Artifact(artifact_id=str(uuid.uuid4()), name="answer", parts=[a2a_pb2.Part(text=turn.answer)])
            )
        version = await client.update_task(session_id, task, version, _status_event(task), request.dispatch_id)

        # 4. native cleanup (nothing to release in the simulator), then settle at the final version
        await client.settle_task(session_id, task_id, version)

    # simulator-only hooks ------------------------------------------------------------------

    async def read_durable(self, atespace: str, name: str) -> dict[str, Any]:
        """The Actor's durable directory /data (a JSON object), in any state."""
        async with self._tx() as cur:
            await cur.execute(
                "SELECT durable FROM substrate_sim.actors WHERE atespace = %s AND name = %s", (atespace, name)
            )
            row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"actor {atespace}/{name} not found")
        return dict(row["durable"] or {})

    async def write_durable(self, atespace: str, name: str, uid: str, data: dict[str, Any]) -> None:
        """Replace the durable directory of a RUNNING Actor (what the agent inside does); not a
        counted mutation."""
        async with self._tx() as cur:
            row = await self._lock_actor(cur, atespace, name, uid)
            if row["state"] != ActorState.RUNNING.value:
                raise SubstrateError(
                    Code.FAILED_PRECONDITION,
                    f"actor {atespace}/{name} is {row['state']}; its durable directory is writable only while RUNNING",
                )
            await cur.execute("UPDATE substrate_sim.actors SET durable = %s WHERE uid = %s", (Jsonb(dict(data)), uid))

    async def read_env(self, atespace: str, name: str) -> dict[str, str]:
        """The env the Actor was created with."""
        async with self._tx() as cur:
            await cur.execute(
                "SELECT env FROM substrate_sim.actors WHERE atespace = %s AND name = %s", (atespace, name)
            )
            row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"actor {atespace}/{name} not found")
        return dict(row["env"])

    async def complete_snapshots(self, atespace: str, name: str) -> int:
        """Mark the Actor's IN_PROGRESS snapshots COMPLETED; returns how many changed."""
        async with self._tx() as cur:
            row = await self._lock_actor(cur, atespace, name, None)
            await cur.execute(
                "UPDATE substrate_sim.snapshots SET status = %s, completed_at = clock_timestamp()"
                " WHERE actor_uid = %s AND status = %s",
                (SnapshotStatus.COMPLETED.value, row["uid"], SnapshotStatus.IN_PROGRESS.value),
            )
            return cur.rowcount

    async def crash_actor(self, atespace: str, name: str) -> Actor:
        """Simulate a crash: the Actor becomes CRASHED and loses its worker (a counted mutation,
        logged with method "crash")."""
        async with self._tx() as cur:
            row = await self._lock_actor(cur, atespace, name, None)
            await self._release_worker(cur, row)
            await cur.execute(
                "UPDATE substrate_sim.actors SET state = %s, worker = NULL, version = version + 1,"
                " updated_at = clock_timestamp() WHERE uid = %s",
                (ActorState.CRASHED.value, row["uid"]),
            )
            await self._log(cur, "crash", atespace, name, row["uid"], {"from": row["state"]})
            return await self._load_actor(cur, atespace, name)


def _now() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


def _status_event(task: a2a_pb2.Task) -> a2a_pb2.StreamResponse:
    return a2a_pb2.StreamResponse(
        status_update=a2a_pb2.TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)
    )


def _parse_message(data: Any) -> a2a_pb2.Message:
    """The A2A Message of an InvokeRequest (protobuf JSON, camelCase; unknown fields ignored)."""
    if not isinstance(data, dict):
        raise SubstrateError(Code.INVALID_ARGUMENT, "invoke: message must be a protobuf JSON object")
    try:
        return json_format.ParseDict(data, a2a_pb2.Message(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise SubstrateError(Code.INVALID_ARGUMENT, f"invoke: invalid message: {exc}") from exc


def _conforms(sim: SimulatedSubstrate) -> Substrate:
    """Static check (mypy) that the simulator implements the Protocol."""
    return sim
