"""A simulated Substrate runtime backed by PostgreSQL.

`SimulatedSubstrate` implements the `Substrate` Protocol (runtime/base.py). Its state lives in the schema
``substrate_sim`` (schema.sql) of the same database as the control plane but OUTSIDE the
control plane's transactions: the simulator has its own small connection pool and every call is a
short transaction of its own that locks (``SELECT ... FOR UPDATE``) the rows it changes. Every
process on the database (API, workers, tests) therefore sees one runtime.

The hot calls (create_actor, get_actor, suspend_actor, resume_actor, delete_actor and
create_egress_policy) are one autocommit statement each: it consumes the call's faults
(substrate_sim.take_faults) and, when none matched, applies the call in the same transaction by
calling the SQL function of the same name in schema.sql. The other calls take their faults in
one statement, then run their own transaction.

Besides the Protocol the simulator offers test hooks: the durable directory of an Actor
(`read_durable` / `write_durable`), pending snapshots (`set_option("snapshot_pending", True)` and
`complete_snapshots`), a log of the mutations that took effect (`calls`, `mutation_count`) and fault
injection (`inject`, `release`, `wait_blocked`, `clear_faults`) stored in the database so that it
works across processes.

`invoke` runs the deterministic agent of agent.py as the Actor would: its memory is the Actor's
durable directory, and it reports the turn to the TaskStoreService at `taskstore_address` (settable
after construction) with the workload credential the call brings (`InvokeRequest.credential`), or
else the one of its env (SESSIONQ_WORKLOAD_TOKEN, Actors created by older setups).

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

import os
import uuid
from datetime import datetime, tzinfo
from typing import Any, TypeVar

from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from sessionq.runtime.base import (
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
from sessionq.runtime.deterministic_agent import run_turn
from sessionq.runtime.simulator.faults import FaultInjection
from sessionq.runtime.simulator.turns import play_turn, waiting_for_input
from sessionq.runtime.stand_in.database import Cursor
from sessionq.runtime.stand_in.egress import canonical_rules
from sessionq.runtime.stand_in.message import parse_message
from sessionq.runtime.stand_in.names import require_name, require_ref, split_template
from sessionq.runtime.stand_in.pages import (
    clamp_page_size,
    decode_actor_token,
    encode_actor_token,
    worker_boundary,
    worker_page,
)
from sessionq.runtime.stand_in.reads import StandInReads, checked_actor
from sessionq.runtime.stand_in.rows import (
    actor_from_row,
    policy_from_row,
    snapshot_from_row,
    tag_from_row,
    template_from_row,
    worker_from_row,
)
from sessionq.runtime.taskstore_client import TaskStoreClient, TaskStoreError

__all__ = ["WORKLOAD_TOKEN_ENV", "SimulatedSubstrate", "decode_actor_token", "encode_actor_token"]

T = TypeVar("T")

# the env variable holding the Actor's workload credential for the TaskStoreService
WORKLOAD_TOKEN_ENV = "SESSIONQ_WORKLOAD_TOKEN"

# task store errors an invoke passes on with their own code (the others become INTERNAL)
_TASKSTORE_CODES = frozenset({
    Code.NOT_FOUND, Code.ALREADY_EXISTS, Code.FAILED_PRECONDITION, Code.INVALID_ARGUMENT, Code.UNAVAILABLE,
    Code.DEADLINE_EXCEEDED, Code.ABORTED, Code.INTERNAL, Code.RESOURCE_EXHAUSTED,
})


# row mappers: the stand-in core's, with where the simulator keeps a snapshot (its uri column)


def _snapshot(row: DictRow) -> Snapshot:
    return snapshot_from_row(row, row["uri"])


def _tag(row: DictRow) -> Tag:
    return tag_from_row(row, row["uri"])


def _worker(row: DictRow) -> Worker:
    return worker_from_row(row, atespace=row["atespace"], state=row["state"])


_READS = StandInReads(
    schema="substrate_sim",
    actor_columns="a.atespace, a.name, a.uid, a.template, a.state, a.worker, a.version, a.durable,"
    " a.created_at, a.updated_at, w.ip AS worker_ip",
    snapshot_columns="actor_uid, generation, fidelity, status, uri, created_at,"
    " substrate_sim.snapshot_size(durable) AS size_bytes",
    to_snapshot=_snapshot,
)


# The hot calls: the function of schema.sql that applies each, called by `_call_fn`.
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

def _timestamp(value: str, tz: tzinfo) -> datetime:
    """A timestamptz of a jsonb result, in the session time zone as psycopg loads timestamptz columns."""
    return datetime.fromisoformat(value).astimezone(tz)


def _actor_from_json(data: dict[str, Any], tz: tzinfo) -> Actor:
    """An Actor of substrate_sim.actor_json (the same fields as a row of _READS.actor_select)."""
    snapshots = (_snapshot({**snap, "created_at": _timestamp(snap["created_at"], tz)}) for snap in data["snapshots"])
    row = {**data, "created_at": _timestamp(data["created_at"], tz), "updated_at": _timestamp(data["updated_at"], tz)}
    return actor_from_row(row, snapshots)


def _actor_result(result: dict[str, Any], tz: tzinfo) -> Actor:
    return _actor_from_json(result["actor"], tz)


class SimulatedSubstrate(FaultInjection):
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
        super().__init__(conninfo, worker_pool_size=worker_pool_size, pool_size=pool_size)
        # "host:port" of the TaskStoreService the simulated agents report to; may be set later
        self.taskstore_address = taskstore_address
        # the gRPC message limit of the agents' task store channel (None: the client's default, sized
        # for the default a2a.maxMessageBytes)
        self.taskstore_message_limit = taskstore_message_limit

    # lifecycle ------------------------------------------------------------------------------

    # options, call log ---------------------------------------------------------------------

    async def set_option(self, key: str, value: Any) -> None:
        async with self.tx() as cur:
            await cur.execute(
                "INSERT INTO substrate_sim.options (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = clock_timestamp()",
                (key, Jsonb(value)),
            )

    async def get_option(self, key: str) -> Any:
        """The option's value, None when unset."""
        async with self.tx() as cur:
            await cur.execute("SELECT value FROM substrate_sim.options WHERE key = %s", (key,))
            row = await cur.fetchone()
        return None if row is None else row["value"]

    async def mutation_count(self, *, actor: str | None = None, method: str | None = None) -> int:
        """Mutations that took effect, optionally for one resource name and/or one method."""
        async with self.tx() as cur:
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
        async with self.tx() as cur:
            await cur.execute(
                "SELECT id, method, atespace, name, uid, detail, pid, at FROM substrate_sim.calls"
                " WHERE (%(actor)s::text IS NULL OR name = %(actor)s) ORDER BY id",
                {"actor": actor},
            )
            return [dict(r) for r in await cur.fetchall()]

    @staticmethod
    async def _log(
        cur: Cursor,
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
    async def _lock_actor(cur: Cursor, atespace: str, name: str, uid: str | None) -> DictRow:
        """Lock the Actor row; NOT_FOUND if missing, FAILED_PRECONDITION if `uid` differs."""
        await cur.execute(
            _READS.actor_select + " WHERE a.atespace = %s AND a.name = %s FOR UPDATE OF a", (atespace, name)
        )
        return checked_actor(await cur.fetchone(), atespace, name, uid)

    @staticmethod
    async def _load_actor(cur: Cursor, atespace: str, name: str) -> Actor:
        return await _READS.actor(cur, atespace, name)

    async def _require_actor_ref(self, method: str, atespace: str, name: str) -> None:
        """The name rule for a hot call's Actor; a refusal still takes the call's faults first."""
        try:
            require_ref("actor", atespace, name)
        except SubstrateError as exc:
            await self._rejected(method, name, exc)

    @staticmethod
    async def _release_worker(cur: Cursor, row: DictRow) -> None:
        if row["worker"] is not None:
            await cur.execute("SELECT substrate_sim.release_worker(%s)", (row["uid"],))

    # templates -----------------------------------------------------------------------------

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
        # the simulated agent runs in process: a command, its arguments and environment are accepted and ignored
        del command, args, env

        async def op() -> ActorTemplate:
            require_name("atespace", atespace)
            require_name("template name", name)
            async with self.tx() as cur:
                await cur.execute(
                    "INSERT INTO substrate_sim.templates (atespace, name, uid, image) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (atespace, name) DO NOTHING RETURNING *",
                    (atespace, name, str(uuid.uuid4()), image),
                )
                row = await cur.fetchone()
                if row is None:
                    raise SubstrateError(Code.ALREADY_EXISTS, f"actor template {atespace}/{name} already exists")
                await self._log(cur, "create_actor_template", atespace, name, row["uid"], {"image": image})
                return template_from_row(row)

        return await self._call("create_actor_template", name, op)

    async def get_actor_template(self, atespace: str, name: str) -> ActorTemplate:
        async def op() -> ActorTemplate:
            require_ref("template", atespace, name)
            async with self.tx() as cur:
                return await _READS.template(cur, atespace, name)

        return await self._call("get_actor_template", name, op)

    async def delete_actor_template(self, atespace: str, name: str, uid: str) -> None:
        async def op() -> None:
            require_ref("template", atespace, name)
            async with self.tx() as cur:
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
            require_name("atespace", atespace)
            require_name("actor name", name)
            split_template(template)
            if from_tag is not None:
                require_name("tag name", from_tag)
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
        await self._require_actor_ref("get_actor", atespace, name)
        params = {"atespace": atespace, "name": name}
        return await self._call_fn("get_actor", name, _FN_GET_ACTOR, params, _actor_result)

    async def resume_actor(self, atespace: str, name: str, uid: str) -> tuple[Actor, bool]:
        def parse(result: dict[str, Any], tz: tzinfo) -> tuple[Actor, bool]:
            return _actor_from_json(result["actor"], tz), bool(result["changed"])

        await self._require_actor_ref("resume_actor", atespace, name)
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
            require_ref("actor", atespace, name)
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
            require_ref("actor", atespace, name)
            async with self.tx() as cur:
                row = await self._lock_actor(cur, atespace, name, uid)
                state = ActorState(row["state"])
                if state == ActorState.PAUSED:
                    return await self._load_actor(cur, atespace, name)
                if state != ActorState.RUNNING:
                    raise SubstrateError(
                        Code.FAILED_PRECONDITION, f"actor {atespace}/{name} cannot pause from {state.value}"
                    )
                # the locked Actor's UID: a caller without a UID precondition (a plain ateapi client) passes None
                await cur.execute(
                    "UPDATE substrate_sim.actors SET state = %s, version = version + 1,"
                    " updated_at = clock_timestamp() WHERE uid = %s",
                    (ActorState.PAUSED.value, row["uid"]),
                )
                await self._log(cur, "pause_actor", atespace, name, row["uid"])
                return await self._load_actor(cur, atespace, name)

        return await self._call("pause_actor", name, op)

    async def delete_actor(self, atespace: str, name: str, uid: str, *, any_state: bool = False) -> None:
        await self._require_actor_ref("delete_actor", atespace, name)
        params = {"atespace": atespace, "name": name, "uid": uid, "any_state": bool(any_state), "pid": os.getpid()}
        await self._call_fn("delete_actor", name, _FN_DELETE_ACTOR, params, lambda result, tz: None)

    # egress --------------------------------------------------------------------------------

    async def create_egress_policy(self, atespace: str, actor: str, uid: str, rules: list[EgressRule]) -> EgressPolicy:
        try:
            require_ref("actor", atespace, actor)
            data = canonical_rules(rules, actor=f"{atespace}/{actor}")
        except Exception as exc:
            await self._rejected("create_egress_policy", actor, exc)

        def parse(result: dict[str, Any], tz: tzinfo) -> EgressPolicy:
            return policy_from_row(result["policy"])

        params = {"atespace": atespace, "actor": actor, "uid": uid, "rules": Jsonb(data), "pid": os.getpid()}
        return await self._call_fn("create_egress_policy", actor, _FN_CREATE_EGRESS_POLICY, params, parse)

    async def get_egress_policy(self, atespace: str, actor: str) -> EgressPolicy:
        async def op() -> EgressPolicy:
            require_ref("actor", atespace, actor)
            async with self.tx() as cur:
                return await _READS.egress_policy(cur, atespace, actor)

        return await self._call("get_egress_policy", actor, op)

    async def update_egress_policy(self, atespace: str, actor: str, uid: str, rules: list[EgressRule]) -> EgressPolicy:
        async def op() -> EgressPolicy:
            require_ref("actor", atespace, actor)
            data = canonical_rules(rules, actor=f"{atespace}/{actor}")
            async with self.tx() as cur:
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
                return policy_from_row(row)

        return await self._call("update_egress_policy", actor, op)

    # tags ----------------------------------------------------------------------------------

    async def create_tag(self, atespace: str, name: str, actor: str, uid: str) -> Tag:
        async def op() -> Tag:
            require_name("tag name", name)
            require_ref("actor", atespace, actor)
            async with self.tx() as cur:
                row = await self._lock_actor(cur, atespace, actor, uid)
                if row["state"] != ActorState.SUSPENDED.value:
                    raise SubstrateError(
                        Code.FAILED_PRECONDITION,
                        f"actor {atespace}/{actor} is {row['state']}; only a SUSPENDED actor can be tagged",
                    )
                await cur.execute(
                    "SELECT generation, fidelity, status, uri, durable FROM substrate_sim.snapshots"
                    " WHERE actor_uid = %s ORDER BY generation DESC LIMIT 1",
                    (row["uid"],),
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
                    " snapshot_generation, fidelity, uri, durable, template_uid)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, coalesce((SELECT t.uid FROM substrate_sim.templates t"
                    "  WHERE t.atespace || '/' || t.name = %s), ''))"
                    " ON CONFLICT (atespace, name) DO NOTHING RETURNING *",
                    (
                        atespace,
                        name,
                        actor,
                        row["uid"],
                        snap["generation"],
                        snap["fidelity"],
                        snap["uri"],
                        Jsonb(snap["durable"]),
                        row["template"],
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
            require_ref("tag", atespace, name)
            async with self.tx() as cur:
                return _tag(await _READS.tag_row(cur, atespace, name))

        return await self._call("get_tag", name, op)

    async def delete_tag(self, atespace: str, name: str) -> None:
        async def op() -> None:
            require_ref("tag", atespace, name)
            async with self.tx() as cur:
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
        size = clamp_page_size(page_size)
        boundary = decode_actor_token(page_token, global_listing=global_listing) if page_token else None

        def fake_page(kind: str) -> Page[Actor]:
            if kind == "stuck_token" and page_token:
                return Page(items=[], next_page_token=page_token)
            key = boundary or (("" if global_listing else None), "")
            # an empty page that still advances: just past the boundary ("\x01" sorts before any name character)
            name = key[1] + "\x01" if boundary else key[1]
            return Page(items=[], next_page_token=encode_actor_token(key[0], name))

        async def op() -> Page[Actor]:
            if atespace is not None:
                require_name("atespace", atespace)
            async with self.tx() as cur:
                return await _READS.actor_page(cur, atespace, boundary, size)

        return await self._call("list_actors", None, op, fake_page)

    async def list_tags(self, atespace: str | None, page_size: int, page_token: str) -> Page[Tag]:
        async def op() -> Page[Tag]:
            if atespace is not None:
                require_name("atespace", atespace)
            size = clamp_page_size(page_size)
            boundary = decode_actor_token(page_token, global_listing=atespace is None) if page_token else None
            async with self.tx() as cur:
                return await _READS.tag_page(cur, atespace, boundary, size, _tag)

        return await self._call("list_tags", atespace or "", op)

    async def list_workers(self, page_size: int, page_token: str) -> Page[Worker]:
        size = clamp_page_size(page_size)
        boundary = worker_boundary(page_token)

        def fake_page(kind: str) -> Page[Worker]:
            if kind == "stuck_token" and page_token:
                return Page(items=[], next_page_token=page_token)
            return Page(items=[], next_page_token=encode_actor_token(None, boundary + "\x01" if boundary else ""))

        async def op() -> Page[Worker]:
            async with self.tx() as cur:
                return await worker_page(
                    cur,
                    "SELECT * FROM substrate_sim.workers WHERE idx < %s AND name > %s ORDER BY name LIMIT %s",
                    (self.worker_pool_size, boundary),
                    size,
                    _worker,
                )

        return await self._call("list_workers", None, op, fake_page)

    # the Actor's private A2A endpoint ------------------------------------------------------

    async def invoke(self, atespace: str, name: str, uid: str, request: InvokeRequest) -> None:
        """Run one turn of the simulated agent (sessionq.runtime.deterministic_agent) inside the RUNNING Actor.

        The agent reports through the TaskStoreService at `taskstore_address` with the workload
        credential of the call (`request.credential`), or else the one of its env
        (SESSIONQ_WORKLOAD_TOKEN): CreateTask (WORKING) for a new turn, or GetTask
        and UpdateTask (WORKING) for a continuation; then, after the turn's delay and the write of
        its memory to the durable directory, UpdateTask with the final task and SettleTask with
        that version. A task store error becomes a SubstrateError with the same code (INTERNAL for
        codes the runtime does not use)."""

        async def op() -> None:
            require_ref("actor", atespace, name)
            async with self.tx() as cur:
                await cur.execute(
                    "SELECT uid, state, env, durable FROM substrate_sim.actors WHERE atespace = %s AND name = %s",
                    (atespace, name),
                )
                row = await cur.fetchone()
            row = checked_actor(row, atespace, name, uid)
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
            token = request.credential or dict(row["env"] or {}).get(WORKLOAD_TOKEN_ENV)
            if not token:
                raise SubstrateError(
                    Code.FAILED_PRECONDITION,
                    f"actor {atespace}/{name} has no workload credential (none with the call,"
                    f" {WORKLOAD_TOKEN_ENV} unset)",
                )
            message = parse_message(request.message)
            text = "\n".join(p.text for p in message.parts if p.WhichOneof("content") == "text")
            client = (
                TaskStoreClient(address, token)
                if self.taskstore_message_limit is None
                else TaskStoreClient(address, token, max_message_bytes=self.taskstore_message_limit)
            )
            try:
                # an answer continues a task waiting for input; a SUBMITTED one is a turn sessionq queued
                named = await client.get_task(request.session_id, request.task_id) if request.task_id else None
                turn = run_turn(dict(row["durable"] or {}), text,
                                continuation=named is not None and waiting_for_input(named[0]))
                await play_turn(
                    client,
                    lambda memory: self.write_durable(atespace, name, uid, memory),
                    request,
                    message,
                    turn,
                    canceled=lambda task_id: self.turn_canceled(uid, task_id),
                    named=named,
                )
            except TaskStoreError as exc:
                # the task store's own refusals (UNAUTHENTICATED, ...) are not the runtime's: INTERNAL
                code = Code.__members__.get(exc.code.name, Code.INTERNAL)
                if code not in _TASKSTORE_CODES:
                    code = Code.INTERNAL
                raise SubstrateError(code, f"actor {atespace}/{name}: {exc}") from exc
            finally:
                await client.close()

        await self._call("invoke", name, op)
    # simulator-only hooks ------------------------------------------------------------------

    async def read_durable(self, atespace: str, name: str) -> dict[str, Any]:
        """The Actor's durable directory /data (a JSON object), in any state."""
        async with self.tx() as cur:
            await cur.execute(
                "SELECT durable FROM substrate_sim.actors WHERE atespace = %s AND name = %s", (atespace, name)
            )
            row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"actor {atespace}/{name} not found")
        return dict(row["durable"] or {})

    async def cancel_turn(
        self, atespace: str, name: str, uid: str, session_id: str, task_id: str, *, credential: str | None = None
    ) -> None:
        """Tell the Actor to stop its turn of `task_id`: recorded in substrate_sim.turn_cancels, which
        the simulated turn checks while it works (it then stops without further task writes), and
        logged as a call (with whether a credential came, never its value). Idempotent; an Actor
        that is not running is not an error. Without a UID (a plain client of the served
        simulator) it acts on the current Actor."""

        async def op() -> None:
            require_ref("actor", atespace, name)
            async with self.tx() as cur:
                row = await self._lock_actor(cur, atespace, name, uid)
                await cur.execute(
                    "INSERT INTO substrate_sim.turn_cancels (actor_uid, task_id) VALUES (%s, %s)"
                    " ON CONFLICT DO NOTHING",
                    (row["uid"], task_id),
                )
                await cur.execute(
                    "INSERT INTO substrate_sim.calls (method, atespace, name, uid, detail, pid)"
                    " VALUES ('cancel_turn', %s, %s, %s, %s, pg_backend_pid())",
                    (atespace, name, row["uid"],
                     Jsonb({"session_id": session_id, "task_id": task_id, "credential": credential is not None})),
                )

        await self._call("cancel_turn", name, op)

    async def turn_canceled(self, uid: str, task_id: str) -> bool:
        """Whether the Actor was told to stop its turn of `task_id` (what the simulated agent checks)."""
        async with self.tx() as cur:
            await cur.execute(
                "SELECT 1 FROM substrate_sim.turn_cancels WHERE actor_uid = %s AND task_id = %s", (uid, task_id)
            )
            return await cur.fetchone() is not None

    async def write_durable(self, atespace: str, name: str, uid: str, data: dict[str, Any]) -> None:
        """Replace the durable directory of a RUNNING Actor (what the agent inside does); not a
        counted mutation."""
        async with self.tx() as cur:
            row = await self._lock_actor(cur, atespace, name, uid)
            if row["state"] != ActorState.RUNNING.value:
                raise SubstrateError(
                    Code.FAILED_PRECONDITION,
                    f"actor {atespace}/{name} is {row['state']}; its durable directory is writable only while RUNNING",
                )
            await cur.execute("UPDATE substrate_sim.actors SET durable = %s WHERE uid = %s", (Jsonb(dict(data)), uid))

    async def read_env(self, atespace: str, name: str) -> dict[str, str]:
        """The env the Actor was created with."""
        async with self.tx() as cur:
            await cur.execute(
                "SELECT env FROM substrate_sim.actors WHERE atespace = %s AND name = %s", (atespace, name)
            )
            row = await cur.fetchone()
        if row is None:
            raise SubstrateError(Code.NOT_FOUND, f"actor {atespace}/{name} not found")
        return dict(row["env"])

    async def complete_snapshots(self, atespace: str, name: str) -> int:
        """Mark the Actor's IN_PROGRESS snapshots COMPLETED; returns how many changed."""
        async with self.tx() as cur:
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
        async with self.tx() as cur:
            row = await self._lock_actor(cur, atespace, name, None)
            await self._release_worker(cur, row)
            await cur.execute(
                "UPDATE substrate_sim.actors SET state = %s, worker = NULL, version = version + 1,"
                " updated_at = clock_timestamp() WHERE uid = %s",
                (ActorState.CRASHED.value, row["uid"]),
            )
            await self._log(cur, "crash", atespace, name, row["uid"], {"from": row["state"]})
            return await self._load_actor(cur, atespace, name)

def _conforms(sim: SimulatedSubstrate) -> Substrate:
    """Static check (mypy) that the simulator implements the Protocol."""
    return sim
