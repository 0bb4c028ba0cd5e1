"""Fuzzing the API (issue 7): generated and mutated requests to every RPC of the gRPC frontend.

Properties, checked for every example against the live in-process server (real gRPC stubs, real
PostgreSQL, workers and the simulated runtime):

- only client-error codes come back (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, ABORTED,
  ALREADY_EXISTS, PERMISSION_DENIED, UNAUTHENTICATED), or OK; UNAVAILABLE / DEADLINE_EXCEEDED only
  from a call that legitimately waits and only for a request that was valid; never INTERNAL,
  UNKNOWN or anything else;
- a rejected call changes nothing: a snapshot of sessionq.sessions, session_shares, checkpoints,
  tasks, task_versions, events, agents, revisions and the count of procrastinate jobs (outside the
  periodic queues) is the same before and after it;
- another user's Session, task, share or checkpoint is indistinguishable from a missing one (same
  code, same message once the ids are replaced by a placeholder) - `test_cross_user_probes`.

Requests come from two kinds of strategies: *generated* (every field drawn from adversarial values:
empty / huge / unicode / control-character strings, malformed and random UUIDs, out-of-range ints,
negative durations, unknown enum values, garbage page tokens, missing fields, NaN in Struct values)
and *mutated* (a valid request for an existing Session, with exactly one field - or the caller's
credentials - changed). Ids of the world's objects are symbolic (`Ref`) and resolved at run time.

Every world object a valid request could destroy has a spare (alice's spare Session, checkpoint and
share) so that accepted mutations do not hollow out the rest of the run. After an accepted (or
UNAVAILABLE) call the test waits until the background work it caused has settled, and the
snapshot is taken again.

`test_fuzz_findings_replayed` replays the smallest request of every kind of finding the fuzzers
made, so that each stays covered even when the derandomized run does not reach it.

Hypothesis runs derandomized with a modest number of examples (the file takes well under 90 s).
For a longer local hunt: `SESSIONQ_FUZZ_SCALE=4` (more examples), `SESSIONQ_FUZZ_RANDOM=1` (a
random seed) and `SESSIONQ_FUZZ_COLLECT=<file>` (append every finding to the file instead of
failing at the first one).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from conftest import apply_agent
from google.protobuf import struct_pb2, text_format
from google.rpc import error_details_pb2, status_pb2
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from sessionq._pb.kagent.api.v1alpha1 import (
    agents_pb2,
    agents_pb2_grpc,
    checkpoints_pb2,
    checkpoints_pb2_grpc,
    common_pb2,
    sandboxes_pb2,
    sandboxes_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    task_store_pb2,
    task_store_pb2_grpc,
)
from sessionq._pb.sessionq.v1 import inventory_pb2, inventory_pb2_grpc
from sessionq.api.paging import encode_token
from sessionq.domain import workload

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

SC = grpc.StatusCode
CLIENT_ERRORS = frozenset({
    SC.INVALID_ARGUMENT, SC.NOT_FOUND, SC.FAILED_PRECONDITION, SC.ABORTED, SC.ALREADY_EXISTS,
    SC.PERMISSION_DENIED, SC.UNAUTHENTICATED,
})
WAIT_CODES = frozenset({SC.UNAVAILABLE, SC.DEADLINE_EXCEEDED})
CALL_TIMEOUT = 10.0
SETTLE_TIMEOUT = 30.0
AGENT = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")
COLLECT = os.environ.get("SESSIONQ_FUZZ_COLLECT", "")
SCALE = float(os.environ.get("SESSIONQ_FUZZ_SCALE", "1"))  # more examples for a longer local run
RANDOM = bool(os.environ.get("SESSIONQ_FUZZ_RANDOM"))  # a random seed instead of the derandomized CI run

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=not RANDOM,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


# -- symbolic references to the world's objects ----------------------------------------------------

@dataclass(frozen=True)
class Ref:
    """A world object's id, resolved when the request is built (e.g. Ref("alice_sid"))."""
    name: str

    def __repr__(self) -> str:
        return f"<{self.name}>"


@dataclass(frozen=True)
class Struct:
    """A google.protobuf.Struct value (built at request time: dicts would be taken as messages)."""
    value: dict[str, Any]


def _value(v: Any) -> struct_pb2.Value:
    out = struct_pb2.Value()
    if v is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, (int, float)):
        out.number_value = float(v)
    elif isinstance(v, str):
        out.string_value = v
    elif isinstance(v, list):
        out.list_value.values.extend(_value(x) for x in v)
    elif isinstance(v, dict):
        for k, x in v.items():
            out.struct_value.fields[k].CopyFrom(_value(x))
    return out


def _struct(d: dict[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    for k, v in d.items():
        s.fields[k].CopyFrom(_value(v))
    return s


@dataclass(frozen=True)
class Data:
    """A google.protobuf.Value (a Part's data)."""
    value: Any


# -- the world: objects of two users, credentials, snapshots ---------------------------------------

SNAPSHOT_TABLES = ("sessions", "session_shares", "checkpoints", "tasks", "task_versions", "events", "agents", "revisions")
# columns that the leader's periodic jobs may write at any time (revision GC marks unreferenced revisions)
BACKGROUND_COLUMNS = {"revisions": ("gc_marked_at", "gc_collected_at")}


def _rows(table: str) -> str:
    row = "to_jsonb(t)" + "".join(f" - '{c}'" for c in BACKGROUND_COLUMNS.get(table, ()))
    return f"(SELECT coalesce(array_agg(({row})::text ORDER BY ({row})::text), '{{}}') FROM sessionq.{table} t) AS {table}"


SNAPSHOT_SQL = "SELECT " + ", ".join(_rows(t) for t in SNAPSHOT_TABLES) + (
    ", (SELECT count(*) FROM procrastinate_jobs WHERE queue_name NOT IN ('periodic', 'maintenance')) AS jobs")

BUSY_SQL = """
SELECT
  (SELECT count(*) FROM sessionq.sessions
    WHERE operation <> 'NONE' OR dispatch_id IS NOT NULL OR idle_boundary_id IS NOT NULL
       OR idle_executor IS NOT NULL OR unsettled_task_id IS NOT NULL OR snapshot_status = 'IN_PROGRESS')
+ (SELECT count(*) FROM sessionq.checkpoints WHERE state IN ('CREATING', 'DELETING'))
+ (SELECT count(*) FROM sessionq.revisions WHERE state = 'PENDING')
+ (SELECT count(*) FROM procrastinate_jobs
    WHERE status IN ('todo', 'doing') AND queue_name NOT IN ('periodic', 'maintenance')) AS busy
"""


@dataclass(repr=False)
class World:
    api: Any
    store: Any
    refs: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # share tokens and workload credentials
    findings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return "World(...)"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # hypothesis' printer
        p.text(repr(self))

    def resolve(self, v: Any) -> Any:
        if isinstance(v, Ref):
            return self.refs[v.name]
        if isinstance(v, Struct):
            return _struct(self.resolve(v.value))
        if isinstance(v, Data):
            return _value(self.resolve(v.value))
        if isinstance(v, dict):
            return {k: self.resolve(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [self.resolve(x) for x in v]
        return v

    def md(self, name: str) -> list[tuple[str, str]]:
        users = {"alice", "bob", "admin"}
        if name in users:
            return [("authorization", f"Bearer {name}-token")]
        if name == "none":
            return []
        if name == "bad_token":
            return [("authorization", "Bearer not-a-token")]
        if name == "empty_bearer":
            return [("authorization", "Bearer ")]
        if name == "basic":
            return [("authorization", "Basic alice-token")]
        if name == "no_scheme":
            return [("authorization", "alice-token")]
        if name == "share_only":  # a share token without a bearer token
            return [("x-kagent-share-token", self.tokens["alice_share_rw"])]
        if name.startswith("bob+"):  # bob holding one of alice's share tokens (or garbage)
            return [*self.md("bob"), ("x-kagent-share-token", self.tokens.get(name[4:], "sqs_garbage"))]
        if name.startswith("wl_"):  # a workload credential
            return [("authorization", f"Bearer {self.tokens[name]}")]
        raise KeyError(name)

    async def snapshot(self) -> dict[str, Any]:
        async with self.store.pool.connection() as conn:
            cur = await conn.execute(SNAPSHOT_SQL)
            return dict(await cur.fetchone())

    async def settle(self) -> None:
        """Wait until no background work is in flight and two snapshots agree."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        previous = None
        while True:
            async with self.store.pool.connection() as conn:
                cur = await conn.execute(BUSY_SQL)
                busy = (await cur.fetchone())["busy"]
            if not busy:
                snap = await self.snapshot()
                if snap == previous:
                    return
                previous = snap
            if time.monotonic() > deadline:
                raise AssertionError(f"the world did not settle within {SETTLE_TIMEOUT}s ({busy} busy rows/jobs)")
            await asyncio.sleep(0.05)


def snapshot_diff(before: dict[str, Any], after: dict[str, Any]) -> str:
    out = []
    for key in before:
        if before[key] == after[key]:
            continue
        if key == "jobs":
            out.append(f"procrastinate_jobs: {before[key]} -> {after[key]}")
            continue
        gone = sorted(set(before[key]) - set(after[key]))
        new = sorted(set(after[key]) - set(before[key]))
        out.append(f"{key}: -{[g[:300] for g in gone]} +{[n[:300] for n in new]}")
    return "; ".join(out)


async def _create_session(api: Any, request_id: str, user: str) -> str:
    r = await sessions_pb2_grpc.SessionServiceStub(api.channel).CreateSession(
        sessions_pb2.CreateSessionRequest(request_id=request_id, agent=AGENT), metadata=api.md(user), timeout=15)
    return r.session.id


async def _create_sandbox(api: Any, request_id: str, user: str) -> str:
    r = await sandboxes_pb2_grpc.SandboxServiceStub(api.channel).CreateSandbox(
        sandboxes_pb2.CreateSandboxRequest(request_id=request_id, sandbox_template=AGENT), metadata=api.md(user),
        timeout=15)
    return r.sandbox.id


async def _turn(api: Any, sid: str, user: str, text: str) -> str:
    msg = a2a_pb2.Message(message_id=f"m-{uuid.uuid4()}", role=a2a_pb2.ROLE_USER, context_id=sid,
                          parts=[a2a_pb2.Part(text=text)])
    r = await a2a_pb2_grpc.A2AServiceStub(api.channel).SendMessage(
        a2a_pb2.SendMessageRequest(tenant="kagent/my-first-agent", message=msg), metadata=api.md(user), timeout=15)
    assert r.task.status.state == a2a_pb2.TASK_STATE_COMPLETED, r
    return r.task.id


def _reason(err: grpc.aio.AioRpcError) -> str | None:
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for d in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.ErrorInfo()
                if d.Unpack(info):
                    return info.reason
    return None


async def _checkpoint(api: Any, sid: str, head: str, rid: str, user: str) -> str:
    stub = checkpoints_pb2_grpc.CheckpointServiceStub(api.channel)
    deadline = time.monotonic() + 15
    while True:
        try:
            r = await stub.CreateCheckpoint(
                checkpoints_pb2.CreateCheckpointRequest(session_id=sid, expected_head_task_id=head, request_id=rid),
                metadata=api.md(user), timeout=10)
            return r.checkpoint.id
        except grpc.aio.AioRpcError as e:
            if _reason(e) != "KAGENT_CHECKPOINT_SNAPSHOT_PENDING" or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _share(api: Any, sid: str, user: str, permission: int) -> tuple[str, str]:
    r = await sessions_pb2_grpc.SessionServiceStub(api.channel).CreateSessionShare(
        sessions_pb2.CreateSessionShareRequest(session_id=sid, permission=permission, ttl={"seconds": 3600}),
        metadata=api.md(user), timeout=10)
    return r.share.id, r.token


async def build_world(api: Any, store: Any, sim: Any) -> World:
    await apply_agent(store, sim)
    w = World(api, store)
    ro, rw = sessions_pb2.SESSION_SHARE_PERMISSION_READ_ONLY, sessions_pb2.SESSION_SHARE_PERMISSION_READ_WRITE
    w.refs["alice_rid"] = "fuzz-alice"
    w.refs["alice_sid"] = await _create_session(api, "fuzz-alice", "alice")
    w.refs["alice_spare_sid"] = await _create_session(api, "fuzz-alice-spare", "alice")
    w.refs["bob_sid"] = await _create_session(api, "fuzz-bob", "bob")
    w.refs["deleted_sid"] = await _create_session(api, "fuzz-deleted", "alice")
    await sessions_pb2_grpc.SessionServiceStub(api.channel).DeleteSession(
        sessions_pb2.DeleteSessionRequest(session_id=w.refs["deleted_sid"]), metadata=api.md("alice"), timeout=15)
    w.refs["alice_sb"] = await _create_sandbox(api, "fuzz-sb-alice", "alice")
    w.refs["alice_spare_sb"] = await _create_sandbox(api, "fuzz-sb-spare", "alice")
    w.refs["bob_sb"] = await _create_sandbox(api, "fuzz-sb-bob", "bob")
    w.refs["alice_task"] = await _turn(api, w.refs["alice_sid"], "alice", "What is 2+2?")
    w.refs["bob_task"] = await _turn(api, w.refs["bob_sid"], "bob", "What is 3+3?")
    await w.settle()
    w.refs["alice_cp"] = await _checkpoint(api, w.refs["alice_sid"], w.refs["alice_task"], "fuzz-cp", "alice")
    w.refs["alice_spare_cp"] = await _checkpoint(api, w.refs["alice_sid"], w.refs["alice_task"], "fuzz-cp-spare", "alice")
    w.refs["bob_cp"] = await _checkpoint(api, w.refs["bob_sid"], w.refs["bob_task"], "fuzz-cp-bob", "bob")
    w.refs["alice_share"], w.tokens["alice_share_ro"] = await _share(api, w.refs["alice_sid"], "alice", ro)
    _, w.tokens["alice_share_rw"] = await _share(api, w.refs["alice_sid"], "alice", rw)
    w.refs["alice_spare_share"], _ = await _share(api, w.refs["alice_sid"], "alice", ro)
    w.refs["bob_share"], w.tokens["bob_share"] = await _share(api, w.refs["bob_sid"], "bob", ro)
    w.refs["missing_uuid"] = "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10"
    task = await store.get_task(w.refs["alice_task"])
    w.refs["alice_task_version"] = task.version  # type: ignore[assignment]
    secret = await store.secret("workload")
    w.tokens["wl_alice"] = workload.token_for(secret, uuid.UUID(w.refs["alice_sid"]))
    w.tokens["wl_bob"] = workload.token_for(secret, uuid.UUID(w.refs["bob_sid"]))
    w.tokens["wl_deleted"] = workload.token_for(secret, uuid.UUID(w.refs["deleted_sid"]))
    w.tokens["wl_missing"] = workload.token_for(secret, uuid.UUID(w.refs["missing_uuid"]))
    good = w.tokens["wl_alice"]
    w.tokens["wl_forged"] = good[:-4] + ("0000" if not good.endswith("0000") else "1111")
    w.tokens["wl_wrong_secret"] = workload.token_for("not-the-secret", uuid.UUID(w.refs["alice_sid"]))
    await w.settle()
    return w


@pytest.fixture
async def world(api, store, sim) -> World:
    return await build_world(api, store, sim)


# -- adversarial value strategies --------------------------------------------------------------------

NASTY_TEXT = [
    "", " ", "  x  ", "\x00", "a\x00b", "\x07", "\t", "\n", "x\r\n", "\x7f", "\u0085", "\u200b", "\u202e",
    "\ufeff", "\u2028", "é", "😀", "ｆｕｌｌ", "İ", "x" * 63, "x" * 64, "x" * 128, "x" * 129, "x" * 200, "x" * 201,
    "y" * 5000, "'; DROP TABLE sessionq.sessions; --", "%s", "%(x)s", "{}", "null", "\\", "../../etc/passwd",
    "kagent/my-first-agent", "a/b/c", "/", "-", ".", "..", "*", "%", "_",
]
MALFORMED_UUIDS = [
    "nope", "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e1", "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e100",
    "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e1g", "0198C3D7-4F2A-7B61-9C3E-5D8F7A2B4E10",
    "{0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10}", "urn:uuid:0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10",
    "0198c3d74f2a7b619c3e5d8f7a2b4e10", "00000000-0000-0000-0000-000000000000",
    "ffffffff-ffff-ffff-ffff-ffffffffffff", " 0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10", "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10\x00",
    "0198c3d7\u20134f2a-7b61-9c3e-5d8f7a2b4e10", "٠١٩٨c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10",
]
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def texts(max_size: int = 300) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(NASTY_TEXT),
        st.text(max_size=max_size),
        st.text(alphabet=st.characters(codec="ascii"), max_size=40),
        st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True),
    )


def ids(*refs: str) -> st.SearchStrategy[Any]:
    """A UUID-typed id field: world objects (possibly of the wrong kind), random, malformed, text."""
    return st.one_of(
        st.sampled_from([Ref(r) for r in refs]) if refs else st.nothing(),
        st.uuids().map(str),
        st.sampled_from(MALFORMED_UUIDS),
        texts(80),
    )


def task_ids(*refs: str) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([Ref(r) for r in refs]) if refs else st.nothing(), st.uuids().map(str), texts(200))


def ints(lo: int, hi: int, *special: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([lo, hi, -1, 0, 1, *special]), st.integers(lo, hi))


int32s = ints(*INT32, 50, 100, 101, 1000)
int64s = ints(*INT64, 2**31, 2**53 + 1)


def page_tokens() -> st.SearchStrategy[str]:
    part = st.one_of(st.sampled_from(["", "\x00", "x" * 300, "-1", "1e9", "99999999999999999999999", "nan",
                                      "0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10", "kagent", "my-first-agent"]),
                     st.text(max_size=30))
    return st.one_of(
        st.just(""),
        texts(80),
        st.lists(part, min_size=0, max_size=3).map(lambda ps: encode_token(*ps)),
        st.binary(max_size=40).map(lambda b: __import__("base64").urlsafe_b64encode(b).decode().rstrip("=")),
    )


def pages() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.fixed_dictionaries({}, optional={"limit": int32s, "page_token": page_tokens()}))


def durations() -> st.SearchStrategy[Any]:
    seconds = st.one_of(st.sampled_from([0, -1, 1, 60, 3600, 366 * 86400, 366 * 86400 + 1, 315576000000,
                                         -315576000000, 2**63 - 1, -(2**63)]), st.integers(*INT64))
    nanos = st.one_of(st.sampled_from([0, 1, -1, 999_999_999, -999_999_999, 10**9, 2**31 - 1, -(2**31)]),
                      st.integers(*INT32))
    return st.one_of(st.none(), st.fixed_dictionaries({}, optional={"seconds": seconds, "nanos": nanos}))


def agent_refs() -> st.SearchStrategy[Any]:
    ns = st.one_of(st.sampled_from(["kagent", "", "default", "Kagent", "kagent-", "a" * 63, "a" * 64]), texts(80))
    name = st.one_of(st.sampled_from(["my-first-agent", "", "no-such-agent", "a.b", "A", "a" * 253, "a" * 254]),
                     texts(300))
    return st.one_of(st.none(), st.fixed_dictionaries({}, optional={"namespace": ns, "name": name}))


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
                      st.integers(-(2**60), 2**60), texts(40))
JSON = st.recursive(JSON_LEAF, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                      st.dictionaries(texts(20), kids, max_size=3)), max_leaves=6)


def structs() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.dictionaries(texts(30), JSON, max_size=3).map(Struct))


def parts() -> st.SearchStrategy[Any]:
    common = {"metadata": structs(), "filename": texts(60), "media_type": texts(40)}
    return st.one_of(
        st.fixed_dictionaries({"text": texts()}, optional=common),
        st.fixed_dictionaries({"raw": st.binary(max_size=64)}, optional=common),
        st.fixed_dictionaries({"url": texts(100)}, optional=common),
        st.fixed_dictionaries({"data": JSON.map(Data)}, optional=common),
        st.fixed_dictionaries({}, optional=common),  # no content at all
    )


def messages(context: st.SearchStrategy[Any], task: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({}, optional={
        "message_id": texts(80), "context_id": context, "task_id": task,
        "role": ints(*INT32, 1, 2, 3), "parts": st.lists(parts(), max_size=3), "metadata": structs(),
        "extensions": st.lists(texts(40), max_size=2), "reference_task_ids": st.lists(task, max_size=2),
    })


def a2a_tasks(task: st.SearchStrategy[Any], context: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    status = st.fixed_dictionaries({}, optional={
        "state": ints(*INT32, 1, 2, 3, 4, 5, 6, 7, 8, 9),
        "message": messages(context, task),
        "timestamp": st.fixed_dictionaries({}, optional={"seconds": int64s, "nanos": int32s}),
    })
    artifact = st.fixed_dictionaries({}, optional={"artifact_id": texts(60), "name": texts(60),
                                                   "parts": st.lists(parts(), max_size=2), "metadata": structs()})
    return st.fixed_dictionaries({}, optional={
        "id": task, "context_id": context, "status": status, "artifacts": st.lists(artifact, max_size=2),
        "history": st.lists(messages(context, task), max_size=2), "metadata": structs(),
    })


USER_MDS = ["alice", "bob", "admin", "none", "bad_token", "empty_bearer", "basic", "no_scheme", "share_only",
            "bob+alice_share_ro", "bob+alice_share_rw", "bob+garbage", "wl_alice"]
WORKLOAD_MDS = ["wl_alice", "wl_bob", "wl_deleted", "wl_missing", "wl_forged", "wl_wrong_secret",
                "alice", "admin", "none", "bad_token", "empty_bearer", "basic"]


# -- the RPC table -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rpc:
    service: str
    method: str
    stub: Callable[[Any], Any]
    request: Any
    fields: dict[str, st.SearchStrategy[Any]]  # field -> strategy of adversarial values
    valid: dict[str, Any]  # a valid request (symbolic)
    valid_md: str = "alice"
    mds: tuple[str, ...] = tuple(USER_MDS)
    waits: bool = False  # the call legitimately waits (UNAVAILABLE allowed for a valid request)
    check: Callable[[dict[str, Any], str], bool] | None = None  # "is this request valid?" (for UNAVAILABLE)

    @property
    def name(self) -> str:
        return f"{self.service}/{self.method}"


def _uuid_ok(v: Any) -> bool:
    if isinstance(v, Ref):
        return True
    try:
        uuid.UUID(v)
        return bool(v)
    except (ValueError, TypeError, AttributeError):
        return False


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUB = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _rid_ok(v: Any) -> bool:
    return isinstance(v, str) and 1 <= len(v) <= 128 and "\x00" not in v


def _name_ok(v: Any) -> bool:
    return v is None or (isinstance(v, str) and len(v) <= 200 and v == v.strip()
                         and not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in v))


def _user(md: str) -> bool:
    return md in ("alice", "bob", "admin") or md.startswith("bob+")


def _create_ok(f: dict[str, Any], md: str) -> bool:
    ref = f.get("agent") or {}
    return (_user(md) and _rid_ok(f.get("request_id", "")) and _name_ok(f.get("name"))
            and _DNS_SUB.match(ref.get("name", "") or "") is not None
            and _DNS_LABEL.match(ref.get("namespace", "") or "kagent") is not None)


def _sid_ok(key: str) -> Callable[[dict[str, Any], str], bool]:
    return lambda f, md: _user(md) and _uuid_ok(f.get(key, ""))


def _fork_ok(f: dict[str, Any], md: str) -> bool:
    return _user(md) and _uuid_ok(f.get("checkpoint_id", "")) and _rid_ok(f.get("request_id", ""))


def _cp_ok(f: dict[str, Any], md: str) -> bool:
    return (_user(md) and _uuid_ok(f.get("session_id", "")) and _rid_ok(f.get("request_id", ""))
            and bool(f.get("expected_head_task_id")))


def _tenant_ok(t: Any) -> bool:
    ns, sep, name = (t or "").partition("/")
    return bool(sep) and _DNS_LABEL.match(ns) is not None and _DNS_SUB.match(name) is not None


def _send_ok(f: dict[str, Any], md: str) -> bool:
    msg = f.get("message") or {}
    return _user(md) and _tenant_ok(f.get("tenant")) and bool(msg.get("parts"))


SID_REFS = ("alice_sid", "alice_spare_sid", "bob_sid", "deleted_sid", "alice_cp", "alice_share", "alice_sb")
SB_REFS = ("alice_sb", "alice_spare_sb", "bob_sb", "alice_sid", "alice_cp")
CP_REFS = ("alice_cp", "alice_spare_cp", "bob_cp", "alice_sid", "bob_sid")
SHARE_REFS = ("alice_spare_share", "bob_share", "alice_sid", "alice_cp")
TASK_REFS = ("alice_task", "bob_task", "alice_sid")
sess = sessions_pb2_grpc.SessionServiceStub
cps = checkpoints_pb2_grpc.CheckpointServiceStub
S = "SessionService"
C = "CheckpointService"

SESSION_RPCS = [
    Rpc(S, "CreateSession", sess, sessions_pb2.CreateSessionRequest,
        {"request_id": st.one_of(st.just(Ref("alice_rid")), texts(200)), "name": texts(), "agent": agent_refs()},
        {"request_id": Ref("alice_rid"), "agent": {"namespace": "kagent", "name": "my-first-agent"}},
        waits=True, check=_create_ok),
    Rpc(S, "GetSession", sess, sessions_pb2.GetSessionRequest, {"session_id": ids(*SID_REFS)},
        {"session_id": Ref("alice_sid")}),
    Rpc(S, "ListSessions", sess, sessions_pb2.ListSessionsRequest,
        {"all_creators": st.booleans(), "page": pages(), "agent": agent_refs()}, {"page": {"limit": 10}}),
    Rpc(S, "UpdateSessionName", sess, sessions_pb2.UpdateSessionNameRequest,
        {"session_id": ids(*SID_REFS), "name": texts()}, {"session_id": Ref("alice_sid"), "name": "renamed"}),
    Rpc(S, "SuspendSession", sess, sessions_pb2.SuspendSessionRequest, {"session_id": ids(*SID_REFS)},
        {"session_id": Ref("alice_spare_sid")}, waits=True, check=_sid_ok("session_id")),
    Rpc(S, "ResumeSession", sess, sessions_pb2.ResumeSessionRequest, {"session_id": ids(*SID_REFS)},
        {"session_id": Ref("alice_spare_sid")}, waits=True, check=_sid_ok("session_id")),
    Rpc(S, "DeleteSession", sess, sessions_pb2.DeleteSessionRequest,
        {"session_id": ids("alice_spare_sid", "bob_sid", "deleted_sid", "alice_cp", "alice_share")},
        {"session_id": Ref("alice_spare_sid")}, waits=True, check=_sid_ok("session_id")),
    Rpc(S, "CreateSessionShare", sess, sessions_pb2.CreateSessionShareRequest,
        {"session_id": ids(*SID_REFS), "permission": ints(*INT32, 1, 2, 3), "ttl": durations()},
        {"session_id": Ref("alice_sid"), "permission": 1, "ttl": {"seconds": 60}}),
    Rpc(S, "ListSessionShares", sess, sessions_pb2.ListSessionSharesRequest,
        {"session_id": ids(*SID_REFS), "page": pages()}, {"session_id": Ref("alice_sid")}),
    Rpc(S, "RevokeSessionShare", sess, sessions_pb2.RevokeSessionShareRequest, {"share_id": ids(*SHARE_REFS)},
        {"share_id": Ref("alice_spare_share")}),
]

def _ttl_ok(ttl: Any) -> bool:
    if ttl is None:
        return True
    seconds, nanos = ttl.get("seconds", 0), ttl.get("nanos", 0)
    return 0 <= nanos < 10**9 and 1 <= seconds + nanos / 1e9 <= 86400


def _sandbox_ok(f: dict[str, Any], md: str) -> bool:
    ref = f.get("sandbox_template")
    return (_user(md) and ref is not None and _rid_ok(f.get("request_id", "")) and len(f.get("name") or "") <= 200
            and _DNS_SUB.match(ref.get("name", "") or "") is not None
            and _DNS_LABEL.match(ref.get("namespace", "") or "") is not None and _ttl_ok(f.get("ttl")))


sbx = sandboxes_pb2_grpc.SandboxServiceStub
X = "SandboxService"

SANDBOX_RPCS = [
    Rpc(X, "CreateSandbox", sbx, sandboxes_pb2.CreateSandboxRequest,
        {"request_id": st.one_of(st.just("fuzz-sb-alice"), texts(200)), "name": texts(),
         "sandbox_template": agent_refs(), "ttl": durations()},
        {"request_id": "fuzz-sb-alice", "sandbox_template": {"namespace": "kagent", "name": "my-first-agent"}},
        waits=True, check=_sandbox_ok),
    Rpc(X, "GetSandbox", sbx, sandboxes_pb2.GetSandboxRequest, {"sandbox_id": ids(*SB_REFS)},
        {"sandbox_id": Ref("alice_sb")}),
    Rpc(X, "ListSandboxes", sbx, sandboxes_pb2.ListSandboxesRequest,
        {"page": pages(), "sandbox_template": agent_refs()}, {"page": {"limit": 10}}),
    Rpc(X, "SuspendSandbox", sbx, sandboxes_pb2.SuspendSandboxRequest, {"sandbox_id": ids(*SB_REFS)},
        {"sandbox_id": Ref("alice_spare_sb")}, waits=True, check=_sid_ok("sandbox_id")),
    Rpc(X, "ResumeSandbox", sbx, sandboxes_pb2.ResumeSandboxRequest, {"sandbox_id": ids(*SB_REFS)},
        {"sandbox_id": Ref("alice_spare_sb")}, waits=True, check=_sid_ok("sandbox_id")),
    Rpc(X, "DeleteSandbox", sbx, sandboxes_pb2.DeleteSandboxRequest,
        {"sandbox_id": ids("alice_spare_sb", "bob_sb", "alice_sid", "alice_cp")},
        {"sandbox_id": Ref("alice_spare_sb")}, waits=True, check=_sid_ok("sandbox_id")),
]

CHECKPOINT_RPCS = [
    Rpc(C, "CreateCheckpoint", cps, checkpoints_pb2.CreateCheckpointRequest,
        {"session_id": ids(*SID_REFS), "request_id": st.one_of(st.just("fuzz-cp"), texts(200)),
         "expected_head_task_id": task_ids(*TASK_REFS)},
        {"session_id": Ref("alice_sid"), "request_id": "fuzz-cp", "expected_head_task_id": Ref("alice_task")},
        waits=True, check=_cp_ok),
    Rpc(C, "GetCheckpoint", cps, checkpoints_pb2.GetCheckpointRequest, {"checkpoint_id": ids(*CP_REFS)},
        {"checkpoint_id": Ref("alice_cp")}),
    Rpc(C, "ListCheckpoints", cps, checkpoints_pb2.ListCheckpointsRequest,
        {"session_id": ids(*SID_REFS), "page": pages()}, {"session_id": Ref("alice_sid")}),
    Rpc(C, "DeleteCheckpoint", cps, checkpoints_pb2.DeleteCheckpointRequest,
        {"checkpoint_id": ids("alice_spare_cp", "bob_cp", "alice_sid")}, {"checkpoint_id": Ref("alice_spare_cp")},
        waits=True, check=_sid_ok("checkpoint_id")),
    Rpc(C, "ForkSession", cps, checkpoints_pb2.ForkSessionRequest,
        {"checkpoint_id": ids(*CP_REFS), "request_id": st.one_of(st.just("fuzz-fork"), texts(200))},
        {"checkpoint_id": Ref("alice_cp"), "request_id": "fuzz-fork"}, waits=True, check=_fork_ok),
    Rpc(C, "UpdateCheckpointName", cps, checkpoints_pb2.UpdateCheckpointNameRequest,
        {"checkpoint_id": ids(*CP_REFS), "name": texts()}, {"checkpoint_id": Ref("alice_cp"), "name": "renamed"}),
]

egress = st.fixed_dictionaries({}, optional={
    "url": st.one_of(st.sampled_from(["https://api.example.com", "http://x:80/", "https://*.example.com",
                                      "ftp://x", "https://", "https://a:99999", "tls://x:443", "https://[::1]:443"]),
                     texts(120)),
    "credentialHeaders": st.dictionaries(texts(40), texts(80), max_size=2),
})
agent_resources = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "api_version": st.one_of(st.just("api.kagent.dev/v1alpha3"), texts(60)),
    "kind": st.one_of(st.just("Agent"), texts(20)),
    "value": st.fixed_dictionaries({}, optional={
        "apiVersion": st.one_of(st.just("api.kagent.dev/v1alpha3"), texts(60)),
        "kind": st.one_of(st.just("Agent"), texts(20)),
        "metadata": st.fixed_dictionaries({}, optional={"name": texts(80), "namespace": texts(80)}),
        "spec": st.fixed_dictionaries({}, optional={
            "template": st.one_of(texts(), st.just("i" * 513)), "egress": st.lists(egress, max_size=3)}),
        "status": st.fixed_dictionaries({}, optional={"conditions": st.lists(texts(20), max_size=2)}),
    }),
}))
VALID_RESOURCE = {"api_version": "api.kagent.dev/v1alpha3", "kind": "Agent", "value": {"spec": {}}}
AGENT_RPCS = [
    Rpc("AgentService", "CreateAgent", agents_pb2_grpc.AgentServiceStub, agents_pb2.CreateAgentRequest,
        {"ref": agent_refs(), "resource": agent_resources},
        {"ref": {"namespace": "kagent", "name": "fuzzed-agent"}, "resource": VALID_RESOURCE}),
    Rpc("AgentService", "UpdateAgent", agents_pb2_grpc.AgentServiceStub, agents_pb2.UpdateAgentRequest,
        {"ref": agent_refs(), "resource": agent_resources},
        {"ref": {"namespace": "kagent", "name": "my-first-agent"}, "resource": VALID_RESOURCE}),
    Rpc("AgentService", "GetAgent", agents_pb2_grpc.AgentServiceStub, agents_pb2.GetAgentRequest,
        {"ref": agent_refs()}, {"ref": {"namespace": "kagent", "name": "my-first-agent"}}),
    Rpc("AgentService", "ListAgents", agents_pb2_grpc.AgentServiceStub, agents_pb2.ListAgentsRequest,
        {"namespace": st.one_of(st.just("kagent"), texts(80))}, {"namespace": "kagent"}),
    Rpc("AgentService", "DeleteAgent", agents_pb2_grpc.AgentServiceStub, agents_pb2.DeleteAgentRequest,
        {"ref": agent_refs()}, {"ref": {"namespace": "kagent", "name": "no-such-agent"}}),
]

INVENTORY_RPCS = [
    Rpc("InventoryService", method, inventory_pb2_grpc.InventoryServiceStub, req,
        {"atespace": st.one_of(st.just("kagent"), texts(80)), "page": pages()}, {"atespace": "kagent"})
    for method, req in (("ListActors", inventory_pb2.ListActorsRequest), ("ListWorkers", inventory_pb2.ListWorkersRequest))
]

T = "TaskStoreService"
ts_stub = task_store_pb2_grpc.TaskStoreServiceStub
TS_SIDS = ("alice_sid", "bob_sid", "deleted_sid", "missing_uuid", "alice_spare_sid")
ts_task = a2a_tasks(task_ids(*TASK_REFS), ids(*TS_SIDS))
dispatch_ids = st.one_of(st.none(), ids("alice_sid", "missing_uuid"))
stream_events = st.one_of(
    st.none(),
    st.fixed_dictionaries({"task": ts_task}),
    st.fixed_dictionaries({"message": messages(ids(*TS_SIDS), task_ids(*TASK_REFS))}),
    st.fixed_dictionaries({"status_update": st.fixed_dictionaries({}, optional={
        "task_id": task_ids(*TASK_REFS), "context_id": ids(*TS_SIDS), "metadata": structs()})}),
    st.fixed_dictionaries({"artifact_update": st.fixed_dictionaries({}, optional={
        "task_id": task_ids(*TASK_REFS), "append": st.booleans(), "last_chunk": st.booleans()})}),
)
list_requests = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "tenant": texts(60), "context_id": ids(*TS_SIDS), "status": ints(*INT32, 1, 3, 9),
    "page_size": int32s, "page_token": page_tokens(), "history_length": int32s,
    "status_timestamp_after": st.fixed_dictionaries({}, optional={"seconds": int64s, "nanos": int32s}),
    "include_artifacts": st.booleans(),
}))
TASKSTORE_RPCS = [
    Rpc(T, "CreateTask", ts_stub, task_store_pb2.TaskStoreServiceCreateTaskRequest,
        {"session_id": ids(*TS_SIDS), "task": ts_task, "dispatch_id": dispatch_ids},
        {"session_id": Ref("alice_sid"), "task": {"id": "fuzz-new-task", "context_id": Ref("alice_sid")}},
        valid_md="wl_alice", mds=tuple(WORKLOAD_MDS)),
    Rpc(T, "GetTask", ts_stub, task_store_pb2.TaskStoreServiceGetTaskRequest,
        {"session_id": ids(*TS_SIDS), "task_id": task_ids(*TASK_REFS)},
        {"session_id": Ref("alice_sid"), "task_id": Ref("alice_task")}, valid_md="wl_alice", mds=tuple(WORKLOAD_MDS)),
    Rpc(T, "UpdateTask", ts_stub, task_store_pb2.TaskStoreServiceUpdateTaskRequest,
        {"session_id": ids(*TS_SIDS), "task": ts_task,
         "expected_version": st.one_of(st.just(Ref("alice_task_version")), int64s), "event": stream_events,
         "dispatch_id": dispatch_ids},
        {"session_id": Ref("alice_sid"), "task": {"id": Ref("alice_task"), "context_id": Ref("alice_sid")},
         "expected_version": Ref("alice_task_version")}, valid_md="wl_alice", mds=tuple(WORKLOAD_MDS)),
    Rpc(T, "ListTasks", ts_stub, task_store_pb2.TaskStoreServiceListTasksRequest,
        {"session_id": ids(*TS_SIDS), "request": list_requests}, {"session_id": Ref("alice_sid"), "request": {}},
        valid_md="wl_alice", mds=tuple(WORKLOAD_MDS)),
    Rpc(T, "SettleTask", ts_stub, task_store_pb2.TaskStoreServiceSettleTaskRequest,
        {"session_id": ids(*TS_SIDS), "task_id": task_ids(*TASK_REFS),
         "version": st.one_of(st.just(Ref("alice_task_version")), int64s)},
        {"session_id": Ref("alice_sid"), "task_id": Ref("alice_task"), "version": Ref("alice_task_version")},
        valid_md="wl_alice", mds=tuple(WORKLOAD_MDS)),
]

A2A_SIDS = ("alice_sid", "bob_sid", "deleted_sid", "alice_cp")
tenants = st.one_of(st.sampled_from(["kagent/my-first-agent", "kagent/no-such-agent", "kagent", "/", "kagent/",
                                     "/my-first-agent", "Kagent/my-first-agent", "kagent/my-first-agent/x"]), texts(80))
A2A_RPCS = [
    Rpc("A2AService", "SendMessage", a2a_pb2_grpc.A2AServiceStub, a2a_pb2.SendMessageRequest,
        {"tenant": tenants,
         "message": st.one_of(st.none(), messages(ids(*A2A_SIDS), task_ids(*TASK_REFS))),
         "configuration": st.one_of(st.none(), st.fixed_dictionaries({}, optional={
             "accepted_output_modes": st.lists(texts(30), max_size=2), "history_length": int32s,
             "return_immediately": st.booleans()})),
         "metadata": structs()},
        {"tenant": "kagent/my-first-agent",
         "message": {"message_id": "fuzz-m", "context_id": Ref("alice_sid"), "role": 1, "parts": [{"text": "What is 1+1?"}]}},
        waits=True, check=_send_ok),
    Rpc("A2AService", "GetTask", a2a_pb2_grpc.A2AServiceStub, a2a_pb2.GetTaskRequest,
        {"tenant": tenants, "id": task_ids(*TASK_REFS), "history_length": st.one_of(st.none(), int32s)},
        {"tenant": "kagent/my-first-agent", "id": Ref("alice_task")}),
]


# -- generated and mutated requests --------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    rpc: Rpc
    fields: dict[str, Any]
    md: str
    how: str  # "generated" or "mutated <field>"

    def __repr__(self) -> str:
        return f"Case({self.rpc.name}, {self.how}, md={self.md}, fields={self.fields!r})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # hypothesis' printer
        p.text(repr(self))


def generated(rpc: Rpc) -> st.SearchStrategy[Case]:
    return st.builds(
        lambda f, md: Case(rpc, f, md, "generated"),
        st.fixed_dictionaries({}, optional=rpc.fields),
        st.sampled_from(rpc.mds),
    )


def mutated(rpc: Rpc) -> st.SearchStrategy[Case]:
    """The valid request with exactly one field (or the credentials) changed."""
    def field_mutation(key: str) -> st.SearchStrategy[Case]:
        return rpc.fields[key].filter(lambda v: v != rpc.valid.get(key)).map(
            lambda v: Case(rpc, {**rpc.valid, key: v}, rpc.valid_md, f"mutated {key}"))

    md_mutation = st.sampled_from([m for m in rpc.mds if m != rpc.valid_md]).map(
        lambda md: Case(rpc, dict(rpc.valid), md, "mutated credentials"))
    return st.one_of(md_mutation, *(field_mutation(k) for k in rpc.fields))


def cases(rpcs: list[Rpc]) -> st.SearchStrategy[Case]:
    return st.one_of(*(s for r in rpcs for s in (generated(r), mutated(r))))


# -- running one case and checking the properties ------------------------------------------------------

class _ServerErrors(logging.Handler):
    """The last exception the servicers logged (the cause of an INTERNAL), for the finding's message."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            e = record.exc_info[1]
            self.last = f"{type(e).__module__}.{type(e).__name__}: {' '.join(str(e).split())[:200]}"


SERVER_ERRORS = _ServerErrors()
logging.getLogger("sessionq.api").addHandler(SERVER_ERRORS)

def _describe(case: Case, request: Any) -> str:
    text = text_format.MessageToString(request, as_one_line=True, as_utf8=True)
    if len(text) > 600:
        text = text[:600] + "..."
    return f"{case.rpc.name} [{case.how}] md={case.md} request={{{text}}}"


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


async def run_case(w: World, case: Case, collect: bool = bool(COLLECT)) -> tuple[grpc.StatusCode, str]:
    try:
        request = case.rpc.request(**w.resolve(case.fields))
    except (ValueError, TypeError):  # not representable in the message (client-side): not a request
        reject()
    stub = case.rpc.stub(w.api.channel)
    before = await w.snapshot()
    SERVER_ERRORS.last = ""
    try:
        await getattr(stub, case.rpc.method)(request, metadata=w.md(case.md), timeout=CALL_TIMEOUT)
        code, details = SC.OK, ""
    except grpc.aio.AioRpcError as e:
        code, details = e.code(), e.details() or ""
    problem = None
    if code in CLIENT_ERRORS:
        after = await w.snapshot()
        if after != before:
            problem = f"rejected with {code.name} ({details!r}) but state changed: {snapshot_diff(before, after)}"
    elif code == SC.OK:
        pass
    elif code in WAIT_CODES and case.rpc.waits:
        if case.rpc.check is not None and not case.rpc.check(case.fields, case.md):
            problem = f"{code.name} ({details!r}) for an invalid request: a client error was expected"
    else:
        problem = f"{code.name} ({details!r}): expected OK or a client-error code"
        if SERVER_ERRORS.last:
            problem += f"; server: {SERVER_ERRORS.last}"
        after = await w.snapshot()
        if after != before:
            problem += f"; and state changed: {snapshot_diff(before, after)}"
    if code not in CLIENT_ERRORS:
        await w.settle()
    if problem:
        finding = f"FINDING {_describe(case, request)}: {problem}"
        if collect:
            w.findings.append(finding)
            _append(COLLECT, finding)
        else:
            raise AssertionError(finding)
    return code, details


# -- the property tests, one per service -----------------------------------------------------------------

@settings(FUZZ, max_examples=round(400 * SCALE))
@given(case=cases(SESSION_RPCS))
async def test_fuzz_session_service(world: World, case: Case) -> None:
    await run_case(world, case)


@settings(FUZZ, max_examples=round(150 * SCALE))
@given(case=cases(SANDBOX_RPCS))
async def test_fuzz_sandbox_service(world: World, case: Case) -> None:
    await run_case(world, case)


@settings(FUZZ, max_examples=round(250 * SCALE))
@given(case=cases(CHECKPOINT_RPCS))
async def test_fuzz_checkpoint_service(world: World, case: Case) -> None:
    await run_case(world, case)


@settings(FUZZ, max_examples=round(120 * SCALE))
@given(case=cases(AGENT_RPCS))
async def test_fuzz_agent_service(world: World, case: Case) -> None:
    await run_case(world, case)


@settings(FUZZ, max_examples=round(80 * SCALE))
@given(case=cases(INVENTORY_RPCS))
async def test_fuzz_inventory_service(world: World, case: Case) -> None:
    await run_case(world, case)


@settings(FUZZ, max_examples=round(250 * SCALE))
@given(case=cases(TASKSTORE_RPCS))
async def test_fuzz_taskstore_service(world: World, case: Case) -> None:
    await run_case(world, case)


@settings(FUZZ, max_examples=round(120 * SCALE))
@given(case=cases(A2A_RPCS))
async def test_fuzz_a2a_service(world: World, case: Case) -> None:
    await run_case(world, case)


# -- replays: the smallest request of each kind of finding, checked on every run -------------------------

def _by_name(name: str) -> Rpc:
    service, method = name.split("/")
    return next(r for r in SESSION_RPCS + CHECKPOINT_RPCS + AGENT_RPCS + INVENTORY_RPCS + TASKSTORE_RPCS + A2A_RPCS + SANDBOX_RPCS
                if r.service == service and r.method == method)


NUL = "a\x00b"
ALICE_TASK = {"id": Ref("alice_task"), "context_id": Ref("alice_sid")}
REPLAYS: list[tuple[str, dict[str, Any], str]] = [
    ("SessionService/CreateSession", {"request_id": NUL, "agent": {"namespace": "kagent", "name": "my-first-agent"}}, "alice"),
    ("SessionService/ListSessions", {"page": {"page_token": encode_token(NUL)}}, "alice"),
    ("CheckpointService/CreateCheckpoint", {"session_id": Ref("alice_sid"), "request_id": NUL,
                                            "expected_head_task_id": Ref("alice_task")}, "alice"),
    ("CheckpointService/CreateCheckpoint", {"session_id": Ref("alice_sid"), "request_id": "replay",
                                            "expected_head_task_id": NUL}, "alice"),
    ("CheckpointService/ForkSession", {"checkpoint_id": Ref("alice_cp"), "request_id": NUL}, "alice"),
    ("AgentService/CreateAgent", {"ref": {"namespace": "kagent", "name": "replay"}, "resource": {
        **VALID_RESOURCE, "value": {"spec": {"template": NUL}}}}, "alice"),
    ("AgentService/CreateAgent", {"ref": {"namespace": "kagent", "name": "replay"}, "resource": {
        **VALID_RESOURCE, "value": {"spec": {"egress": [{"url": "https://api.example.com",
                                                          "credentialHeaders": {"x-key": NUL}}]}}}}, "alice"),
    ("InventoryService/ListActors", {"page": {"page_token": encode_token(NUL)}}, "alice"),
    ("TaskStoreService/GetTask", {"session_id": Ref("alice_sid"), "task_id": NUL}, "wl_alice"),
    ("TaskStoreService/SettleTask", {"session_id": Ref("alice_sid"), "task_id": NUL, "version": 1}, "wl_alice"),
    ("TaskStoreService/CreateTask", {"session_id": Ref("alice_sid"), "task": {"id": NUL}}, "wl_alice"),
    ("TaskStoreService/CreateTask", {"session_id": Ref("alice_sid"), "task": {"id": "replay", "metadata": Struct({"k": NUL})}},
     "wl_alice"),
    ("TaskStoreService/CreateTask", {"session_id": Ref("alice_sid"), "task": {"id": "replay",
                                                                             "metadata": Struct({"k": float("nan")})}}, "wl_alice"),
    ("TaskStoreService/CreateTask", {"session_id": Ref("alice_sid"), "task": {"id": "replay", "status": {
        "timestamp": {"seconds": -(2**63)}}}}, "wl_alice"),
    ("TaskStoreService/UpdateTask", {"session_id": Ref("alice_sid"), "task": {"id": NUL}, "expected_version": 1}, "wl_alice"),
    ("TaskStoreService/UpdateTask", {"session_id": Ref("alice_sid"), "task": ALICE_TASK,
                                     "expected_version": Ref("alice_task_version"),
                                     "event": {"status_update": {"task_id": NUL}}}, "wl_alice"),
    ("TaskStoreService/UpdateTask", {"session_id": Ref("alice_sid"), "task": {**ALICE_TASK, "status": {
        "timestamp": {"nanos": -1}}}, "expected_version": Ref("alice_task_version")}, "wl_alice"),
    ("TaskStoreService/ListTasks", {"session_id": Ref("alice_sid"), "request": {"page_token": encode_token("abc")}}, "wl_alice"),
    ("TaskStoreService/ListTasks", {"session_id": Ref("alice_sid"),
                                    "request": {"page_token": encode_token("99999999999999999999")}}, "wl_alice"),
    ("A2AService/GetTask", {"tenant": "kagent/my-first-agent", "id": NUL}, "alice"),
    ("A2AService/SendMessage", {"tenant": "kagent/my-first-agent", "message": {
        "message_id": "replay", "task_id": NUL, "parts": [{"text": "hi"}]}}, "alice"),
    ("A2AService/SendMessage", {"tenant": "kagent/my-first-agent", "message": {
        "message_id": "replay", "context_id": Ref("alice_sid"), "parts": [{"text": NUL}]}}, "alice"),
    ("A2AService/SendMessage", {"tenant": "kagent/my-first-agent", "message": {
        "message_id": "replay", "context_id": Ref("alice_sid"), "parts": [{"data": Data(float("nan"))}]}}, "alice"),
    ("A2AService/SendMessage", {"tenant": "kagent/my-first-agent", "message": {
        "message_id": NUL, "parts": [{"text": "hi"}]}}, "alice"),
    ("A2AService/SendMessage", {"tenant": "kagent/my-first-agent", "message": {
        "message_id": "replay-new", "parts": [{"text": NUL}]}}, "alice"),
]


async def test_fuzz_findings_replayed(world: World) -> None:
    """The smallest request of every kind of finding the fuzzers made (and their close relatives),
    replayed on every run: each must answer a client-error code (or OK) and change nothing if rejected."""
    problems = []
    for name, fields, md in REPLAYS:
        try:
            await run_case(world, Case(_by_name(name), fields, md, "replay"), collect=False)
        except AssertionError as e:
            problems.append(str(e))
    assert not problems, f"{len(problems)} of {len(REPLAYS)} replayed requests misbehave:\n" + "\n".join(problems)


# -- the workload credential: who may use the task store ---------------------------------------------------

async def test_taskstore_credentials(world: World) -> None:
    """A user's token is UNAUTHENTICATED, another Session's credential PERMISSION_DENIED, and a forged
    one UNAUTHENTICATED, on every TaskStoreService RPC; nothing changes."""
    expect = {"alice": SC.UNAUTHENTICATED, "admin": SC.UNAUTHENTICATED, "none": SC.UNAUTHENTICATED,
              "wl_forged": SC.UNAUTHENTICATED, "wl_wrong_secret": SC.UNAUTHENTICATED,
              "wl_bob": SC.PERMISSION_DENIED, "wl_missing": SC.PERMISSION_DENIED, "wl_deleted": SC.PERMISSION_DENIED}
    wrong = []
    for rpc in TASKSTORE_RPCS:
        for md, code in expect.items():
            got, details = await run_case(world, Case(rpc, dict(rpc.valid), md, "credentials"))
            if got != code:
                wrong.append(f"{rpc.name} md={md}: {got.name} ({details!r}), expected {code.name}")
    assert not wrong, "\n".join(wrong)


# -- cross-user probes: another user's object looks exactly like a missing one ---------------------------

PLACEHOLDER = "<ID>"


def _normalize(text: str, *values: str) -> str:
    for v in values:
        if v:
            text = text.replace(v, PLACEHOLDER)
    return text


def _response_shape(resp: Any) -> str:
    """The whole answer of an accepted call (a list: its items and next page token)."""
    return text_format.MessageToString(resp, as_one_line=True) if resp is not None else ""


async def _outcome(w: World, rpc: Rpc, fields: dict[str, Any], md: str, ids_: tuple[str, ...]) -> tuple[str, str, str]:
    request = rpc.request(**w.resolve(fields))
    before = await w.snapshot()
    try:
        resp = await getattr(rpc.stub(w.api.channel), rpc.method)(request, metadata=w.md(md), timeout=CALL_TIMEOUT)
        code, details = SC.OK, ""
    except grpc.aio.AioRpcError as e:
        resp, code, details = None, e.code(), e.details() or ""
    after = await w.snapshot()
    assert after == before, f"{rpc.name} {fields} md={md}: {code.name} changed state: {snapshot_diff(before, after)}"
    return code.name, _normalize(details, *ids_), _normalize(_response_shape(resp), *ids_)


def _rpc(rpcs: list[Rpc], method: str) -> Rpc:
    return next(r for r in rpcs if r.method == method)


# (rpc, fields with the probed id as "{id}", the foreign object, the caller, other refs in the message)
PROBES: list[tuple[Rpc, dict[str, Any], str, str]] = [
    (_rpc(SESSION_RPCS, "GetSession"), {"session_id": "{id}"}, "bob_sid", "alice"),
    (_rpc(SESSION_RPCS, "UpdateSessionName"), {"session_id": "{id}", "name": "x"}, "bob_sid", "alice"),
    (_rpc(SESSION_RPCS, "SuspendSession"), {"session_id": "{id}"}, "bob_sid", "alice"),
    (_rpc(SESSION_RPCS, "ResumeSession"), {"session_id": "{id}"}, "bob_sid", "alice"),
    (_rpc(SESSION_RPCS, "DeleteSession"), {"session_id": "{id}"}, "bob_sid", "alice"),
    (_rpc(SESSION_RPCS, "CreateSessionShare"), {"session_id": "{id}", "permission": 1, "ttl": {"seconds": 60}},
     "bob_sid", "alice"),
    (_rpc(SESSION_RPCS, "ListSessionShares"), {"session_id": "{id}"}, "bob_sid", "alice"),
    (_rpc(SESSION_RPCS, "RevokeSessionShare"), {"share_id": "{id}"}, "bob_share", "alice"),
    (_rpc(CHECKPOINT_RPCS, "CreateCheckpoint"), {"session_id": "{id}", "request_id": "probe",
                                                 "expected_head_task_id": Ref("bob_task")}, "bob_sid", "alice"),
    (_rpc(CHECKPOINT_RPCS, "ListCheckpoints"), {"session_id": "{id}"}, "bob_sid", "alice"),
    (_rpc(CHECKPOINT_RPCS, "GetCheckpoint"), {"checkpoint_id": "{id}"}, "bob_cp", "alice"),
    (_rpc(CHECKPOINT_RPCS, "UpdateCheckpointName"), {"checkpoint_id": "{id}", "name": "x"}, "bob_cp", "alice"),
    (_rpc(CHECKPOINT_RPCS, "DeleteCheckpoint"), {"checkpoint_id": "{id}"}, "bob_cp", "alice"),
    (_rpc(CHECKPOINT_RPCS, "ForkSession"), {"checkpoint_id": "{id}", "request_id": "probe"}, "bob_cp", "alice"),
    (_rpc(A2A_RPCS, "GetTask"), {"tenant": "kagent/my-first-agent", "id": "{id}"}, "bob_task", "alice"),
    (_rpc(A2A_RPCS, "SendMessage"), {"tenant": "kagent/my-first-agent", "message": {
        "message_id": "probe", "role": 1, "task_id": "{id}", "parts": [{"text": "hi"}]}}, "bob_task", "alice"),
    (_rpc(A2A_RPCS, "SendMessage"), {"tenant": "kagent/my-first-agent", "message": {
        "message_id": "probe", "role": 1, "context_id": "{id}", "parts": [{"text": "hi"}]}}, "bob_sid", "alice"),
    (_rpc(TASKSTORE_RPCS, "GetTask"), {"session_id": Ref("alice_sid"), "task_id": "{id}"}, "bob_task", "wl_alice"),
    (_rpc(TASKSTORE_RPCS, "SettleTask"), {"session_id": Ref("alice_sid"), "task_id": "{id}", "version": 1},
     "bob_task", "wl_alice"),
    (_rpc(TASKSTORE_RPCS, "UpdateTask"), {"session_id": Ref("alice_sid"), "task": {"id": "{id}"},
                                          "expected_version": 1}, "bob_task", "wl_alice"),
    (_rpc(TASKSTORE_RPCS, "CreateTask"), {"session_id": Ref("alice_sid"), "task": {"id": "{id}"}}, "bob_task", "wl_alice"),
    (_rpc(SANDBOX_RPCS, "GetSandbox"), {"sandbox_id": "{id}"}, "bob_sb", "alice"),
    (_rpc(SANDBOX_RPCS, "SuspendSandbox"), {"sandbox_id": "{id}"}, "bob_sb", "alice"),
    (_rpc(SANDBOX_RPCS, "ResumeSandbox"), {"sandbox_id": "{id}"}, "bob_sb", "alice"),
    (_rpc(SANDBOX_RPCS, "DeleteSandbox"), {"sandbox_id": "{id}"}, "bob_sb", "alice"),
]


def _fill(v: Any, value: str) -> Any:
    if v == "{id}":
        return value
    if isinstance(v, dict):
        return {k: _fill(x, value) for k, x in v.items()}
    if isinstance(v, list):
        return [_fill(x, value) for x in v]
    return v


MISSING_IDS = ("3f2b8c1e-9a47-4d2e-b6f0-7c1d2e3f4a5b", "01a228cf-0000-7000-8000-000000000000")


async def test_cross_user_probes(world: World) -> None:
    """For every RPC that takes the id of a Session, share, checkpoint or task: another user's
    object answers exactly as a missing one (random ids; for Sessions also a deleted one)."""
    w = world
    differences = []
    for missing, (rpc, fields, foreign_ref, md) in ((m, p) for m in MISSING_IDS for p in PROBES):
        foreign = w.refs[foreign_ref]
        # a missing task id is any unknown string; a missing object of a UUID kind a random UUID
        absent = missing if foreign_ref != "bob_task" else f"task-{missing}"
        others = [w.refs["bob_task"], w.refs["alice_sid"]]
        seen = await _outcome(w, rpc, _fill(fields, foreign), md, (foreign, *others))
        want = await _outcome(w, rpc, _fill(fields, absent), md, (absent, *others))
        if seen != want:
            differences.append(f"{rpc.name} md={md}: {foreign_ref} -> {seen}; missing -> {want}")
        if foreign_ref == "bob_sid" and missing == MISSING_IDS[0]:
            deleted = w.refs["deleted_sid"]
            gone = await _outcome(w, rpc, _fill(fields, deleted), md, (deleted, *others))
            if gone != want:
                differences.append(f"{rpc.name} md={md}: deleted_sid -> {gone}; missing -> {want}")
    # bob's Actor and Worker are invisible to alice (and alice's to bob) in the inventory
    inv = inventory_pb2_grpc.InventoryServiceStub(w.api.channel)
    for user, other in (("alice", "bob_sid"), ("bob", "alice_sid")):
        actors = await inv.ListActors(inventory_pb2.ListActorsRequest(page={"limit": 100}), metadata=w.md(user),
                                      timeout=CALL_TIMEOUT)
        names = {a.name for a in actors.actors}
        if any(w.refs[other] in n for n in names):
            differences.append(f"InventoryService/ListActors md={user}: sees {other}'s Actor ({sorted(names)})")
    assert not differences, "another user's object is distinguishable from a missing one:\n" + "\n".join(differences)


def test_rpc_table_covers_every_rpc() -> None:
    """Every RPC of every registered service has a fuzz entry (A2A: the two the frontend implements)."""
    covered = {r.name for r in
               SESSION_RPCS + CHECKPOINT_RPCS + AGENT_RPCS + INVENTORY_RPCS + TASKSTORE_RPCS + A2A_RPCS + SANDBOX_RPCS}
    wanted = set()
    for module, service in ((sessions_pb2, "SessionService"), (checkpoints_pb2, "CheckpointService"),
                            (agents_pb2, "AgentService"), (inventory_pb2, "InventoryService"),
                            (task_store_pb2, "TaskStoreService"), (sandboxes_pb2, "SandboxService")):
        wanted |= {f"{service}/{m.name}" for m in module.DESCRIPTOR.services_by_name[service].methods}
    wanted |= {"A2AService/SendMessage", "A2AService/GetTask"}
    assert wanted <= covered, sorted(wanted - covered)
