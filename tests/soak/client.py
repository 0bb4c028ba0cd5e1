"""The load: many asyncio clients calling the public API the way the client contract says.

Every RPC goes through `Gateway.call`, which records each attempt in the history and retries the
same request on UNAVAILABLE and DEADLINE_EXCEEDED (on the next API replica, as a load balancer
would), with backoff, bounded in attempts and time. ABORTED (a conflicting operation) is not
retried: the client backs off and does something else. CreateCheckpoint is also retried while
the snapshot is pending (KAGENT_CHECKPOINT_SNAPSHOT_PENDING).

Each `Client` owns a few Sessions and picks its next action from its own seeded RNG: create,
send a turn (A2A SendMessage), suspend, resume, rename, get, delete, checkpoint, and the fork
check (tell the source a number, checkpoint, fork, tell the source a newer number, ask the fork
which number it remembers: it must answer the first and never the second). Now and then it acts
on another client's Session of the same user, which makes lifecycle operations conflict. The
race: a burst of concurrent Suspend/Resume calls on one Session (the attack that found a two-minute
stall); once every call has answered, the Session must have no pending operation within
RACE_SETTLE seconds (violation `race-stall`).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.rpc import error_details_pb2, status_pb2

from sessionq._pb.kagent.api.v1alpha1 import (
    agents_pb2_grpc,
    checkpoints_pb2,
    checkpoints_pb2_grpc,
    common_pb2,
    runtime_pb2,
    sessions_pb2,
    sessions_pb2_grpc,
)

from .cluster import AGENT_NAME, AGENT_NAMESPACE, USERS
from .history import History

TENANT = f"{AGENT_NAMESPACE}/{AGENT_NAME}"
AGENT = common_pb2.ResourceReference(namespace=AGENT_NAMESPACE, name=AGENT_NAME)
RETRY_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
SNAPSHOT_PENDING = "KAGENT_CHECKPOINT_SNAPSHOT_PENDING"
CHANNEL_OPTIONS = [
    ("grpc.enable_retries", 0),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
RACERS = 12
RACE_SETTLE = 30.0  # > a claim lifetime of the soak (10 s) plus a runtime delay fault
LIFECYCLE_RPCS = frozenset({"CreateSession", "SuspendSession", "ResumeSession", "DeleteSession", "ForkSession"})
_numbers = itertools.count(1)


def new_number() -> int:
    """A number told to some Session, unique in the run (7 digits: no accidental substring)."""
    return 3_000_000 + 7 * next(_numbers)


def state_name(value: int) -> str:
    return runtime_pb2.RuntimeState.Name(value).removeprefix("RUNTIME_STATE_")


def task_state_name(value: int) -> str:
    return a2a_pb2.TaskState.Name(value)


def reason_of(err: grpc.aio.AioRpcError) -> str | None:
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            st = status_pb2.Status.FromString(value)
            for d in st.details:
                info = error_details_pb2.ErrorInfo()
                if d.Unpack(info):
                    return info.reason
    return None


def answer_of(task: a2a_pb2.Task) -> str:
    return " ".join(p.text for p in task.status.message.parts)


def summarize(resp: Any) -> dict[str, Any]:
    """The interesting fields of a response, for the history."""
    if resp is None:
        return {}
    if hasattr(resp, "session") and resp.HasField("session"):
        s = resp.session
        return {"session": s.id, "state": state_name(s.state),
                "operation": runtime_pb2.RuntimeOperation.Name(s.operation).removeprefix("RUNTIME_OPERATION_"),
                "name": s.name}
    if hasattr(resp, "task") and isinstance(resp, a2a_pb2.SendMessageResponse) and resp.HasField("task"):
        t = resp.task
        return {"task": t.id, "context": t.context_id, "state": task_state_name(t.status.state),
                "answer": answer_of(t)[:200]}
    if hasattr(resp, "checkpoint") and resp.HasField("checkpoint"):
        c = resp.checkpoint
        return {"checkpoint": c.id, "session": c.session_id, "head": c.head_task_id,
                "state": checkpoints_pb2.CheckpointState.Name(c.state)}
    return {}


@dataclass
class Result:
    code: str
    resp: Any
    details: str
    reason: str | None
    attempts: int
    t0: float
    t1: float

    @property
    def ok(self) -> bool:
        return self.code == "OK"


class Gateway:
    """Channels to every API replica and the recording, retrying call."""

    def __init__(self, endpoints: list[str], history: History) -> None:
        self.endpoints = endpoints
        self.history = history
        self.channels = [grpc.aio.insecure_channel(e, options=CHANNEL_OPTIONS) for e in endpoints]
        self.stubs = [
            {
                "sessions": sessions_pb2_grpc.SessionServiceStub(ch),
                "a2a": a2a_pb2_grpc.A2AServiceStub(ch),
                "checkpoints": checkpoints_pb2_grpc.CheckpointServiceStub(ch),
                "agents": agents_pb2_grpc.AgentServiceStub(ch),
            }
            for ch in self.channels
        ]
        self.hard_deadline: float | None = None  # time.monotonic(): no retries after it

    async def close(self) -> None:
        for ch in self.channels:
            await ch.close()

    async def call(
        self, who: str, op: str, service: str, rpc: str, request: Any, *, user: str, session: str | None = None,
        endpoint: int = 0, retry_reasons: frozenset[str] = frozenset(), max_attempts: int = 8,
        budget: float = 40.0, attempt_timeout: float = 10.0, rng: random.Random | None = None,
        note: dict[str, Any] | None = None,
    ) -> Result:
        rng = rng or random.Random()
        started = time.monotonic()
        first = self.history.now()
        attempt, ep = 0, endpoint % len(self.stubs)
        while True:
            attempt += 1
            t0 = self.history.now()
            try:
                resp = await getattr(self.stubs[ep][service], rpc)(
                    request, metadata=[("authorization", f"Bearer {USERS[user]}")], timeout=attempt_timeout)
                code, details, reason = "OK", "", None
            except grpc.aio.AioRpcError as e:
                resp, code, details, reason = None, e.code().name, e.details() or "", reason_of(e)
            t1 = self.history.now()
            summary = summarize(resp)
            self.history.attempt({
                "t0": round(t0, 3), "t1": round(t1, 3), "who": who, "op": op, "rpc": rpc, "attempt": attempt,
                "api": ep, "user": user, "session": session or summary.get("session"), "code": code,
                "details": details[:300], "reason": reason, "resp": summary, **({"req": note} if note else {}),
            })
            if code in ("INTERNAL", "UNKNOWN"):
                self.history.violation(
                    "internal-error", f"{service}.{rpc} answered {code}: {details[:200]}",
                    key=f"internal:{rpc}:{details[:80]}", session=session, who=who)
            retry = code in RETRY_CODES or (reason is not None and reason in retry_reasons)
            delay = min(2.0, 0.1 * 2 ** (attempt - 1)) * rng.uniform(0.5, 1.0)
            out_of_time = time.monotonic() - started + delay > budget or (
                self.hard_deadline is not None and time.monotonic() + delay > self.hard_deadline)
            if not retry or attempt >= max_attempts or out_of_time:
                result = Result(code, resp, details, reason, attempt, first, t1)
                self.history.op({"t0": round(first, 3), "t1": round(t1, 3), "op": op, "code": code,
                                 "reason": reason, "attempts": attempt, "who": who})
                return result
            if code in RETRY_CODES and len(self.stubs) > 1:
                ep = (ep + 1) % len(self.stubs)  # as a load balancer would: another replica
            await asyncio.sleep(delay)


@dataclass
class SessionModel:
    id: str
    user: str
    state: str = "READY"
    head: str | None = None  # the newest task we know completed and nothing newer was sent
    deleted: bool = False
    fork_of: str | None = None


@dataclass
class Shared:
    """What clients share: the gateway, the history, the Sessions of each user, the stop flag."""

    gateway: Gateway
    history: History
    stop: asyncio.Event
    sessions: dict[str, dict[str, SessionModel]] = field(default_factory=dict)  # user -> id -> model
    told: dict[int, tuple[str, float]] = field(default_factory=dict)  # number -> (session, when sent)


class Client:
    MAX_LIVE = 6

    def __init__(self, index: int, seed: int, shared: Shared) -> None:
        self.index = index
        self.name = f"client-{index}"
        self.rng = random.Random(f"client:{seed}:{index}")
        self.shared = shared
        self.user = "alice" if index % 2 == 0 else "bob"
        self.mine: dict[str, SessionModel] = {}
        self.created = 0
        self.endpoint = index  # preferred API replica

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def history(self) -> History:
        return self.shared.history

    async def call(self, op: str, service: str, rpc: str, request: Any, session: str | None = None,
                   **kw: Any) -> Result:
        return await self.shared.gateway.call(self.name, op, service, rpc, request, user=self.user,
                                              session=session, endpoint=self.endpoint, rng=self.rng, **kw)

    def live(self) -> list[SessionModel]:
        return [s for s in self.mine.values() if not s.deleted]

    def register(self, model: SessionModel) -> None:
        self.mine[model.id] = model
        self.shared.sessions.setdefault(self.user, {})[model.id] = model

    def forget(self, model: SessionModel) -> None:
        model.deleted = True
        self.mine.pop(model.id, None)

    def pick_session(self, states: tuple[str, ...] = ("READY", "SUSPENDED")) -> SessionModel | None:
        pool = [s for s in self.live() if s.state in states]
        if self.rng.random() < 0.08:  # now and then someone else's Session of the same user
            others = [s for s in self.shared.sessions.get(self.user, {}).values()
                      if not s.deleted and s.state in states and s.id not in self.mine]
            if others:
                return self.rng.choice(others)
        return self.rng.choice(pool) if pool else None

    def check_session_ack(self, rpc: str, result: Result, expected: tuple[str, ...]) -> None:
        """An acknowledged lifecycle call answers with the Session at its target state, done."""
        s = result.resp.session
        state = state_name(s.state)
        op = runtime_pb2.RuntimeOperation.Name(s.operation).removeprefix("RUNTIME_OPERATION_")
        if state not in expected or op != "NONE":
            self.history.violation(
                "ack-state", f"{rpc} of session {s.id} acknowledged with state {state} / operation {op}"
                f" (expected {'/'.join(expected)}, NONE)", session=s.id)

    # -- the loop -------------------------------------------------------------------------------

    async def run(self) -> None:
        while not self.shared.stop.is_set():
            action = self.pick_action()
            try:
                await getattr(self, f"do_{action}")()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a harness bug must not silently stop the load
                self.history.report("client-error", f"{self.name} {action}: {type(e).__name__}: {e}")
                await asyncio.sleep(0.5)
            await asyncio.sleep(self.rng.uniform(0.0, 0.05))

    def pick_action(self) -> str:
        live = self.live()
        ready = [s for s in live if s.state == "READY"]
        suspended = [s for s in live if s.state == "SUSPENDED"]
        weights = {
            "create": 40 if len(live) < 2 else (5 if len(live) < self.MAX_LIVE else 0),
            "turn": 32 if ready else 0,
            "suspend": 7 if ready else 0,
            "resume": 9 if suspended else 0,
            "rename": 4 if live else 0,
            "get": 6 if live else 0,
            "delete": (8 if len(live) >= self.MAX_LIVE else 3) if live else 0,
            "checkpoint": 5 if any(s.head for s in ready) else 0,
            "fork_check": 4 if ready else 0,
            "race": 2 if ready or suspended else 0,
        }
        names = [k for k, w in weights.items() if w > 0]
        return self.rng.choices(names, weights=[weights[k] for k in names])[0]

    # -- actions --------------------------------------------------------------------------------

    async def do_create(self) -> None:
        self.created += 1
        rid = f"{self.name}-create-{self.created}"
        r = await self.call("create", "sessions", "CreateSession", sessions_pb2.CreateSessionRequest(
            request_id=rid, agent=AGENT, name=f"soak {self.name} #{self.created}"), note={"request_id": rid})
        if r.ok:
            self.check_session_ack("CreateSession", r, ("READY", "SUSPENDED"))
            self.register(SessionModel(r.resp.session.id, self.user, state_name(r.resp.session.state)))

    async def refresh(self, s: SessionModel) -> None:
        r = await self.call("get", "sessions", "GetSession", sessions_pb2.GetSessionRequest(session_id=s.id),
                            session=s.id, max_attempts=3, budget=10)
        if r.ok:
            s.state = state_name(r.resp.session.state)
            if s.state in ("DELETING", "DELETED"):
                self.forget(s)
        elif r.code == "NOT_FOUND":
            self.forget(s)

    async def do_get(self) -> None:
        s = self.pick_session(("READY", "SUSPENDED", "CREATING", "DELETING", "FAILED"))
        if s is not None:
            await self.refresh(s)

    async def send_turn(self, s: SessionModel, text: str, op: str = "turn") -> a2a_pb2.Task | None:
        msg = a2a_pb2.Message(message_id=f"{self.name}-m{self.rng.getrandbits(48):x}", role=a2a_pb2.ROLE_USER,
                              context_id=s.id, parts=[a2a_pb2.Part(text=text)])
        for n in re.findall(r"remember the number (\d+)", text, re.IGNORECASE):
            self.shared.told[int(n)] = (s.id, self.history.now())
        r = await self.call(op, "a2a", "SendMessage", a2a_pb2.SendMessageRequest(tenant=TENANT, message=msg),
                            session=s.id, max_attempts=3, budget=25, attempt_timeout=12, note={"text": text})
        if not r.ok:
            s.head = None  # the turn may have run anyway
            if r.code == "NOT_FOUND":
                self.forget(s)
            elif r.code == "FAILED_PRECONDITION":
                await self.refresh(s)
            return None
        task = r.resp.task
        state = task_state_name(task.status.state)
        s.head = task.id if state == "TASK_STATE_COMPLETED" else None
        return task

    async def do_turn(self) -> None:
        s = self.pick_session(("READY",))
        if s is None:
            return
        if self.rng.random() < 0.5:
            n = new_number()
            await self.send_turn(s, f"Remember the number {n}.")
            return
        a, b = self.rng.randint(1, 999), self.rng.randint(1, 999)
        task = await self.send_turn(s, f"What is {a}+{b}?")
        if task is not None and task_state_name(task.status.state) == "TASK_STATE_COMPLETED":
            answer = answer_of(task)
            if f"= {a + b}" not in answer:
                self.history.violation("wrong-answer", f"session {s.id} task {task.id}: {a}+{b} answered {answer!r}",
                                       session=s.id)

    async def lifecycle(self, rpc: str, op: str, s: SessionModel, expected: tuple[str, ...]) -> Result:
        request = getattr(sessions_pb2, f"{rpc}Request")(session_id=s.id)
        r = await self.call(op, "sessions", rpc, request, session=s.id)
        if r.ok:
            self.check_session_ack(rpc, r, expected)
            s.state = state_name(r.resp.session.state)
        elif r.code == "NOT_FOUND":
            self.forget(s)
        elif r.code in ("FAILED_PRECONDITION", "UNAVAILABLE", "DEADLINE_EXCEEDED"):
            await self.refresh(s)
        elif r.code == "ABORTED":
            await asyncio.sleep(self.rng.uniform(0.1, 0.4))  # a conflicting operation: back off, move on
        return r

    async def do_suspend(self) -> None:
        s = self.pick_session(("READY",))
        if s is not None:
            await self.lifecycle("SuspendSession", "suspend", s, ("SUSPENDED",))

    async def do_resume(self) -> None:
        s = self.pick_session(("SUSPENDED",))
        if s is not None:
            await self.lifecycle("ResumeSession", "resume", s, ("READY",))

    async def do_delete(self) -> None:
        live = self.live()
        if not live:
            return
        s = self.pick_session(("READY", "SUSPENDED", "CREATING", "FAILED")) or live[0]
        r = await self.lifecycle("DeleteSession", "delete", s, ("DELETED",))
        if r.ok:
            self.forget(s)

    async def do_race(self) -> None:
        """Concurrent Suspend/Resume calls on one Session, each retried as the contract says; then
        no operation may stay pending for long (a waiting job must not absorb the next one)."""
        s = self.pick_session(("READY", "SUSPENDED"))
        if s is None:
            return
        rpcs = [self.rng.choice(("SuspendSession", "ResumeSession")) for _ in range(RACERS)]
        results = await asyncio.gather(*(
            self.call("race", "sessions", rpc, getattr(sessions_pb2, f"{rpc}Request")(session_id=s.id), session=s.id,
                      max_attempts=3, budget=15)
            for rpc in rpcs))
        if any(r.code == "NOT_FOUND" for r in results):
            self.forget(s)
            return
        last = time.monotonic()
        while True:
            r = await self.call("race-settle", "sessions", "GetSession", sessions_pb2.GetSessionRequest(session_id=s.id),
                                session=s.id, max_attempts=3, budget=10)
            if r.code == "NOT_FOUND":
                self.forget(s)
                return
            if r.ok and r.resp.session.operation == runtime_pb2.RUNTIME_OPERATION_NONE:
                s.state = state_name(r.resp.session.state)
                self.history.race_settles.append(round(time.monotonic() - last, 3))
                return
            waited = time.monotonic() - last
            if waited > RACE_SETTLE or self.shared.stop.is_set():
                if not self.shared.stop.is_set():
                    self.history.violation(
                        "race-stall", f"session {s.id} still has a pending operation {waited:.0f} s after a race"
                        f" of {RACERS} Suspend/Resume calls answered", session=s.id)
                return
            await asyncio.sleep(0.2)

    async def do_rename(self) -> None:
        s = self.pick_session(("READY", "SUSPENDED"))
        if s is None:
            return
        name = f"renamed {self.rng.getrandbits(32):08x}"
        r = await self.call("rename", "sessions", "UpdateSessionName",
                            sessions_pb2.UpdateSessionNameRequest(session_id=s.id, name=name), session=s.id,
                            note={"name": name})
        if r.ok and r.resp.session.name != name:
            self.history.violation("ack-state", f"UpdateSessionName of {s.id} answered name {r.resp.session.name!r}"
                                   f" instead of {name!r}", session=s.id)
        elif r.code == "NOT_FOUND":
            self.forget(s)

    async def checkpoint(self, s: SessionModel, head: str, op: str = "checkpoint") -> Result:
        rid = f"{self.name}-cp-{self.rng.getrandbits(40):x}"
        return await self.call(
            op, "checkpoints", "CreateCheckpoint",
            checkpoints_pb2.CreateCheckpointRequest(session_id=s.id, expected_head_task_id=head, request_id=rid),
            session=s.id, retry_reasons=frozenset({SNAPSHOT_PENDING}), max_attempts=40, budget=25,
            note={"request_id": rid, "head": head})

    async def do_checkpoint(self) -> None:
        candidates = [s for s in self.live() if s.state == "READY" and s.head]
        if not candidates:
            return
        s = self.rng.choice(candidates)
        assert s.head is not None
        await self.checkpoint(s, s.head)

    async def do_fork_check(self) -> None:
        """Forks never see later source turns, and do see the pinned ones."""
        s = self.pick_session(("READY",))
        if s is None:
            return
        checks = self.history.fork_checks
        n1 = new_number()
        task = await self.send_turn(s, f"Remember the number {n1}.", op="turn")
        if task is None or task_state_name(task.status.state) != "TASK_STATE_COMPLETED":
            checks["inconclusive: first turn"] += 1
            return
        cp = await self.checkpoint(s, task.id)
        if not cp.ok or cp.resp.checkpoint.state != checkpoints_pb2.CHECKPOINT_STATE_READY:
            checks["inconclusive: checkpoint"] += 1
            return
        rid = f"{self.name}-fork-{self.rng.getrandbits(40):x}"
        f = await self.call("fork", "checkpoints", "ForkSession",
                            checkpoints_pb2.ForkSessionRequest(checkpoint_id=cp.resp.checkpoint.id, request_id=rid),
                            note={"request_id": rid, "checkpoint": cp.resp.checkpoint.id, "source": s.id})
        if not f.ok:
            checks["inconclusive: fork"] += 1
            return
        self.check_session_ack("ForkSession", f, ("READY", "SUSPENDED"))
        fork = SessionModel(f.resp.session.id, self.user, state_name(f.resp.session.state), fork_of=s.id)
        self.register(fork)
        n2 = new_number()
        await self.send_turn(s, f"Remember the number {n2}.", op="turn")  # whatever happens to it
        recall = await self.send_turn(fork, "What number did I ask you to remember?", op="turn")
        if recall is None or task_state_name(recall.status.state) != "TASK_STATE_COMPLETED":
            checks["inconclusive: recall"] += 1
            return
        answer = answer_of(recall)
        recalled = [int(x) for x in re.findall(r"\d+", answer)]
        told = self.shared.told
        where = {n: told.get(n) for n in recalled}
        cp_id = cp.resp.checkpoint.id
        if n2 in recalled or any(w is not None and w[0] == s.id and n != n1 for n, w in where.items()):
            checks["violation"] += 1
            self.history.violation(
                "fork-sees-later-turn", f"fork {fork.id} of {s.id} (checkpoint {cp_id}, head turn 'Remember {n1}')"
                f" answered {answer!r}: that number was told to the source after the checkpoint", session=fork.id)
        elif n1 in recalled:
            checks["ok"] += 1
        elif any(w is not None and w[0] == fork.id for w in where.values()):
            checks["inconclusive: another client talked to the fork"] += 1
        else:
            checks["violation"] += 1
            self.history.violation(
                "fork-lost-pinned-turn", f"fork {fork.id} of {s.id} (checkpoint {cp_id}) should recall {n1} (the"
                f" checkpoint's head turn) but answered {answer!r} (numbers told: "
                f"{ {n: w for n, w in where.items()} })", session=fork.id)
