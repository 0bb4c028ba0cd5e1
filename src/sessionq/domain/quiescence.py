"""Automatic quiescence: after every turn the Actor gives its worker back.

A settlement marks the Session's idle boundary and sends NOTIFY sessionq_idle in the same
transaction. Every worker process runs `QuiescencePool`: one LISTEN connection and N workers
(sessions.quiescenceWorkers, default 4) that claim boundaries with FOR UPDATE SKIP LOCKED, up to
sessions.quiescenceBatch (default 8) in one statement (sessionq.claim_idle_work), suspend their
Actors concurrently with a VOLUMES snapshot, and record the exact snapshots; outcomes that finish
while another is being recorded are recorded together (`_Outcomes`, sessionq.finish_idle_many).

Waking: a notification wakes one idle worker (wake-ups coalesce); a worker whose claim saw more
work due hands a wake-up on before its runtime I/O, so a burst is drained by all workers, and a
lone settlement costs one look. The same statement that claims says whether unclaimed work is
blocked and when an uncertain claim or a keep-warm window falls due: with blocked work a worker
looks again within a second, otherwise it waits for that timer or the recovery interval
(sessions.quiescenceRecoveryInterval, default 60 s) - the only polling, which recovers a lost
notification or a crashed replica.

A claim may have issued runtime work, so it never expires: a failed or crashed attempt leaves it
in place, blocking new work on that Session until its outcome is recorded (Q-10). Such a claim is
uncertain, and the workers resolve it themselves: a failed attempt records when the claim may be
taken over (a backoff from 1 s doubling up to sessions.quiescenceRetryMax), a claim whose holder
recorded nothing within its lease (sessions.quiescenceAttemptTimeout + 10 s: the worker died, or
the database was away) is found by the recovery scan. A worker that finds nothing else to claim
takes one that is due over (FOR UPDATE SKIP LOCKED, with a lease), reads the Actor back under the
recorded UID and suspends it only if the read-back shows the suspend did not happen; a SUSPENDED
Actor is recorded as it is. Within one attempt the suspend is repeated directly only after
failures that certainly never reached the runtime (SubstrateError.not_sent); after any other
failure the next try reads the Actor back first. While a claim is uncertain a new turn is refused
with what is happening and when to retry (sessionq.check_turn_blockers).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable
from typing import Any, Literal
from uuid import UUID, uuid4

import psycopg

from sessionq import metrics, telemetry
from sessionq.db import notify
from sessionq.db.connection import Listener
from sessionq.db.notify import Channel
from sessionq.db.retry import with_db_retry
from sessionq.db.store import Store
from sessionq.domain.snapshots import IdentityMismatch, pick_snapshot
from sessionq.domain.turn_snapshots import PinToFinish, finish_pin, pin_lost, pin_recorded, tag_turn
from sessionq.errors import conflict
from sessionq.models import QuiescenceFailureReason, Session, SnapshotState
from sessionq.runtime.base import (
    Actor,
    ActorState,
    Code,
    SnapshotFidelity,
    Substrate,
    SubstrateError,
)

log = logging.getLogger(__name__)

SHORT_RETRY = 1.0
MAX_TRACES = 4096  # traceparents of notified settlements kept for their suspends
RUNTIME_ATTEMPTS = 5
SUSPEND_BOUND = 120.0  # sessions.quiescenceAttemptTimeout's default
LEASE_MARGIN = 10.0  # a holder's lease: its attempt bound and this
RETRY_FIRST = 1.0  # the first wait before an uncertain claim is tried again; it doubles
RETRY_MAX = 30.0  # sessions.quiescenceRetryMax's default
SNAPSHOT_WAIT = 2.0
CLAIM_BATCH = 8  # idle boundaries a worker claims at once and suspends concurrently


class _Attempt:
    """What one attempt at a claim learnt: whether a suspend may have reached the runtime."""

    def __init__(self, read_first: bool) -> None:
        self.read_first = read_first  # read the Actor back before suspending
        self.possibly_issued = False


class QuiescencePool:
    def __init__(
        self,
        store: Store,
        runtime: Substrate,
        url: str,
        *,
        workers: int = 4,
        recovery_interval: float = 60.0,
        short_retry: float = SHORT_RETRY,
        listen: bool = True,
        snapshot_wait: float = SNAPSHOT_WAIT,
        drain_timeout: float = 30.0,
        attempt_timeout: float = SUSPEND_BOUND,
        retry_first: float = RETRY_FIRST,
        retry_max: float = RETRY_MAX,
        lease_margin: float = LEASE_MARGIN,
        turn_snapshots: int = 0,
        keep_warm: float = 0.0,
        paused_ttl: float = 0.0,
        batch: int = CLAIM_BATCH,
    ) -> None:
        self.batch = max(batch, 1)  # idle boundaries one worker claims in one statement
        self.keep_warm = keep_warm  # sessions.keepWarm: an idle boundary is claimable this long after it was marked
        self.paused_ttl = paused_ttl  # sessions.pausedRuntimeTtl: how long an Actor waiting for input stays paused
        self.attempt_timeout = attempt_timeout
        self.turn_snapshots = turn_snapshots  # sessions.turnSnapshots: pin the turn's snapshot (turn_snapshots.py)
        self.lease = attempt_timeout + lease_margin
        self.retry_first = retry_first
        self.retry_max = max(retry_max, retry_first)
        self.snapshot_wait = snapshot_wait
        self.drain_timeout = drain_timeout
        self.store = store
        self.runtime = runtime
        self.url = url
        self.workers = workers
        self.recovery_interval = recovery_interval
        self.short_retry = min(short_retry, recovery_interval)
        self.listen = listen
        self.wakeups = Wakeups(workers)
        self.claims = 0  # for tests and metrics: claims taken by this pool
        self.resolutions = 0  # uncertain claims taken over by this pool
        self.queries = 0  # claim attempts + blocked checks made by this pool
        self._next_lapse_scan = 0.0  # monotonic time of the next recovery scan for lapsed claims
        self.outcomes = _Outcomes(store, runtime)
        self.traces: dict[str, str] = {}  # Session id -> traceparent of its notified settlement (tracing on)

    async def run(self, stop: asyncio.Event) -> None:
        listener = None
        if self.listen:
            listener = Listener(self.url, [Channel.IDLE], application_name="sessionq-listen-idle")
            listener.subscribe(Channel.IDLE, self._woken)
            await listener.start()
        try:
            tasks = [asyncio.create_task(self._worker(i, stop), name=f"quiescence-{i}") for i in range(self.workers)]
            await stop.wait()
            self.wakeups.post_all()  # idle workers see the stop at once; busy ones finish their claim first
            _done, pending = await asyncio.wait(tasks, timeout=self.drain_timeout)
            for t in pending:  # past the drain timeout: such a claim stays (it may have issued work)
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
        finally:
            if listener:
                await listener.stop()

    def _woken(self, payload: str | None) -> None:
        """A settlement (or another idle boundary) was notified: wake a worker. While tracing is on,
        the traceparent of a traced settlement is kept for the suspend it wakes (its span joins that
        trace); a bounded number, the oldest forgotten first."""
        self.wakeups.post()
        if payload is None or not telemetry.tracing() or '"traceparent"' not in payload:
            return
        try:
            data = notify.decode(Channel.IDLE, payload)
        except notify.PayloadError:
            return
        if isinstance(data.get("traceparent"), str):
            self.traces[data["session"]] = data["traceparent"]
            if len(self.traces) > MAX_TRACES:
                self.traces.pop(next(iter(self.traces)))

    async def _worker(self, index: int, stop: asyncio.Event) -> None:
        while not stop.is_set():
            retry_in: float | None = None
            try:
                if index == 0 and time.monotonic() >= self._next_lapse_scan:
                    # the recovery scan: claims whose holder recorded nothing within its lease
                    self._next_lapse_scan = time.monotonic() + self.recovery_interval
                    self.queries += 1
                    if lapsed := await self.store.mark_lapsed_idle_claims(self.lease):
                        log.warning("%d quiescence claims outlived their lease; they are read back", lapsed)
                self.queries += 1
                work = await self.store.claim_idle_work(uuid4(), self.keep_warm, self.batch)
                blocked, retry_in = work.blocked, work.due_in
                if work.claimed:
                    self.claims += len(work.claimed)
                    if work.more:
                        self.wakeups.post()  # before runtime I/O: a sibling joins a burst
                    if not await self._quiesce_all(work.claimed) or work.more:
                        continue  # more is due, or a claim became uncertain: look again for its timer
                    # nothing else was due at the claim: later work comes with its own wake-up,
                    # and the claim reported the timers
                if retry_in is not None and retry_in <= 0:
                    self.queries += 1
                    session = await self.store.take_over_uncertain_idle(uuid4(), self.lease)
                    if session is not None:
                        self.resolutions += 1
                        self.wakeups.post()
                        await self.resolve(session)
                        continue
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                log.warning("quiescence worker %d: database error (%s); retrying shortly", index, e)
                blocked = True
            except Exception:
                log.exception("quiescence worker %d failed; retrying shortly", index)
                blocked = True
            if stop.is_set():
                break
            timeout = self.short_retry if blocked else self.recovery_interval
            if retry_in is not None:  # an uncertain claim falls due then, or a keep-warm window ends
                timeout = min(timeout, max(retry_in, self.short_retry))
            await self.wakeups.wait(timeout)

    async def _quiesce_all(self, sessions: list[Session]) -> bool:
        """Quiesce the claimed Sessions concurrently (each claim on its own: one's failure leaves
        the others' outcomes alone). True when every outcome was recorded; a failure that raised
        is logged here."""
        if len(sessions) == 1:
            results: list[BaseException | Session | None] = [await _caught(self._traced_quiesce(sessions[0]))]
        else:
            results = await asyncio.gather(*(self._traced_quiesce(s) for s in sessions), return_exceptions=True)
        recorded = True
        for session, r in zip(sessions, results, strict=True):
            if isinstance(r, asyncio.CancelledError):
                raise r
            if isinstance(r, BaseException):
                log.error("quiescence of a claimed session failed; the claim stays", exc_info=r,
                          extra={"session_id": str(session.id)})
            recorded = recorded and isinstance(r, Session)
        return recorded

    async def _traced_quiesce(self, session: Session) -> Session | None:
        """quiesce() in a span that joins the trace of the settlement whose notification woke it
        (a no-op unless tracing is on)."""
        with telemetry.span("quiescence suspend", parent=self.traces.pop(str(session.id), None),
                            root=False, attributes={"sessionq.session_id": str(session.id)}):
            return await self.quiesce(session)

    async def quiesce(self, session: Session) -> Session | None:
        """Suspend the claimed Session's Actor and record the exact snapshot. On failure the
        claim stays, uncertain (it may have issued runtime work), and the error is logged. With
        sessions.pausedRuntimeTtl, an Actor whose last turn waits for input is paused instead
        (`pause`), and suspended when the TTL passes without an answer."""
        waits = self.paused_ttl > 0 and session.actor_paused_at is None
        if waits and await self.store.turn_waits_for_input(session.id):
            paused = await self.pause(session)
            if paused is not None:
                return paused
        return await self._attempt(session, _Attempt(read_first=False))

    async def pause(self, session: Session) -> Session | None:
        """Pause the claimed Session's Actor (ateapi PauseActor: the process runtime stops the process
        without archiving) and record it: the idle boundary falls due again when the TTL passes.
        None when the runtime refused or failed: the caller suspends it instead, as without a TTL."""
        assert session.idle_boundary_id is not None and session.idle_executor is not None
        extra = {"session_id": str(session.id)}
        try:
            await asyncio.wait_for(
                self.runtime.pause_actor(session.actor_atespace, session.actor_name, session.actor_uid or ""),
                timeout=self.attempt_timeout,
            )
        except (SubstrateError, TimeoutError) as e:
            log.warning("pausing the actor failed (%s); suspending it instead", e, extra=extra)
            return None
        boundary, executor = session.idle_boundary_id, session.idle_executor
        recorded = await with_db_retry(
            lambda: self.store.finish_pause(session.id, boundary, executor, self.paused_ttl), budget=60.0
        )
        metrics.ACTORS_PAUSED.inc()
        log.debug("paused session's actor waiting for input", extra=extra)
        return recorded

    async def resolve(self, session: Session) -> Session | None:
        """Finish an uncertain claim this worker took over: read the Actor back under the recorded
        UID, suspend it only if the read-back shows it is not suspended, record the snapshot. On
        failure the claim stays uncertain and falls due again after a longer wait."""
        log.info("resolving an uncertain quiescence claim (attempt %d)", (session.idle_attempts or 0) + 1,
                 extra={"session_id": str(session.id)})
        return await self._attempt(session, _Attempt(read_first=True))

    async def _attempt(self, session: Session, attempt: _Attempt) -> Session | None:
        assert session.idle_boundary_id is not None and session.idle_executor is not None
        extra = {"session_id": str(session.id)}
        try:
            snapshot = await asyncio.wait_for(self._suspend(session, attempt), timeout=self.attempt_timeout)
        except IdentityMismatch as e:
            log.error("quiescence refused: %s; the idle claim stays until an operator resolves it", e, extra=extra)
            await self._attempt_failed(session, QuiescenceFailureReason.RUNTIME_UNAVAILABLE, str(e), attempt,
                                       retry_after=self.retry_max)
            return None
        except (SubstrateError, TimeoutError, psycopg.Error) as e:
            if not isinstance(e, SubstrateError):
                # cut off by the bound, or the runtime's client failed otherwise: a call may still reach it
                attempt.possibly_issued = True
            log.error(
                "quiescence runtime call failed (%s); the idle claim stays (%s)",
                e,
                "the suspend may have been issued" if attempt.possibly_issued else "no suspend reached the runtime",
                extra=extra,
            )
            reason = QuiescenceFailureReason.SUSPEND_FAILED
            if isinstance(e, SubstrateError) and e.code == Code.NOT_FOUND:
                reason, message = QuiescenceFailureReason.RUNTIME_UNAVAILABLE, f"the actor is gone: {e.message}"
            elif isinstance(e, SubstrateError) and not attempt.possibly_issued:
                message = f"the runtime could not be reached ({e.code.name}: {e.message}); nothing was issued"
            elif isinstance(e, SubstrateError):
                message = f"the runtime answered {e.code.name}: {e.message}"
            elif isinstance(e, TimeoutError):
                message = f"the suspend took longer than {self.attempt_timeout:g}s"
            else:
                message = f"the runtime call failed: {type(e).__name__}"
            retry_after = min(self.retry_first * 2 ** (session.idle_attempts or 0), self.retry_max)
            await self._attempt_failed(session, reason, message, attempt, retry_after=retry_after)
            return None
        pin = None
        if self.turn_snapshots > 0:  # under the idle claim, before the next turn may resume the Actor
            pin = await tag_turn(self.store, self.runtime, session, snapshot, self.turn_snapshots)
        recorded = await self.outcomes.finish(
            session.id, session.idle_boundary_id, session.idle_executor, snapshot, pin)
        if session.idle_boundary_at is not None:
            lag = time.time() - session.idle_boundary_at.timestamp()
            metrics.QUIESCENCE_LATENCY.observe(max(lag, 0.0))
        log.debug("quiesced session", extra=extra)
        return recorded

    async def _attempt_failed(
        self,
        session: Session,
        reason: QuiescenceFailureReason,
        message: str,
        attempt: _Attempt,
        *,
        retry_after: float,
    ) -> None:
        """The quiescence failure record (Session.last_quiescence_failure) and the claim made
        uncertain, due again after `retry_after` seconds. The claim stays either way: if the database
        cannot be reached here, the recovery scan finds the claim once its lease has passed."""
        assert session.idle_boundary_id is not None and session.idle_executor is not None
        boundary, executor = session.idle_boundary_id, session.idle_executor
        try:
            await with_db_retry(
                lambda: self.store.idle_attempt_failed(
                    session.id, boundary, executor, reason, message,
                    not_sent=not attempt.possibly_issued, retry_after=retry_after,
                ),
                budget=60.0,  # a failover's length, as for finish_idle: otherwise only the lease frees the claim
            )
        except Exception:
            log.exception("could not record the quiescence failure", extra={"session_id": str(session.id)})

    async def _suspend(self, session: Session, attempt: _Attempt) -> dict[str, Any] | None:
        delay = 0.1
        for n in range(RUNTIME_ATTEMPTS):
            try:
                if attempt.read_first:
                    actor = await self._read_back_and_suspend(session, attempt)
                else:
                    actor = await self._suspended_actor(session, attempt)
                snapshot = pick_snapshot(actor.snapshots)
                waited = 0.0
                while (
                    snapshot is not None
                    and snapshot["status"] != SnapshotState.COMPLETED
                    and waited < self.snapshot_wait
                ):
                    await asyncio.sleep(0.1)
                    waited += 0.1
                    actor = await self.runtime.get_actor(session.actor_atespace, session.actor_name)
                    snapshot = pick_snapshot(actor.snapshots)
                return snapshot
            except SubstrateError as e:
                if e.code == Code.NOT_FOUND or n == RUNTIME_ATTEMPTS - 1 or e.code == Code.FAILED_PRECONDITION:
                    raise
                await asyncio.sleep(delay)
                delay *= 2
        return None

    async def _issue_suspend(self, session: Session, uid: str, attempt: _Attempt) -> Actor:
        """One SuspendActor call under `uid`. Unless it certainly never reached the runtime, the
        suspend may have happened: every later try in this attempt reads the Actor back first."""
        try:
            return await self.runtime.suspend_actor(
                session.actor_atespace, session.actor_name, uid, SnapshotFidelity.VOLUMES
            )
        except SubstrateError as e:
            if not e.not_sent and e.code != Code.FAILED_PRECONDITION:  # a UID refusal is an answer
                attempt.possibly_issued = attempt.read_first = True
            raise

    async def _suspended_actor(self, session: Session, attempt: _Attempt) -> Actor:
        """Suspend with the recorded UID in one call (the runtime refuses another UID and answers an
        already suspended Actor as it is); inspect only when it refuses."""
        if session.actor_uid:
            try:
                return await self._issue_suspend(session, session.actor_uid, attempt)
            except SubstrateError as e:
                if e.code != Code.FAILED_PRECONDITION:
                    raise
        return await self._read_back_and_suspend(session, attempt)

    async def _read_back_and_suspend(self, session: Session, attempt: _Attempt) -> Actor:
        """Read the Actor back under the recorded UID and suspend it only if it is not suspended
        (the read-back proves an earlier suspend did not happen); a suspending Actor is waited for."""
        actor = await self.runtime.get_actor(session.actor_atespace, session.actor_name)
        if session.actor_uid and actor.uid != session.actor_uid:
            raise IdentityMismatch(
                f"actor {session.actor_name} has uid {actor.uid}, not the recorded {session.actor_uid}"
            )
        waited = 0.0
        while actor.state == ActorState.SUSPENDING and waited < self.snapshot_wait:
            await asyncio.sleep(0.1)
            waited += 0.1
            actor = await self.runtime.get_actor(session.actor_atespace, session.actor_name)
        if actor.state == ActorState.SUSPENDING:
            raise SubstrateError(Code.UNAVAILABLE, f"actor {session.actor_name} is still suspending")
        if actor.state in (ActorState.RUNNING, ActorState.PAUSED, ActorState.RESUMING):
            actor = await self._issue_suspend(session, actor.uid, attempt)
        return actor


_Item = tuple[UUID, UUID, UUID, dict[str, Any] | None, PinToFinish | None]


class _Outcomes:
    """Records the quiescence outcomes of a pool's workers, several in one statement: an outcome
    that arrives while a batch is being recorded waits for the next one (sessionq.finish_idle_many),
    so a lone outcome is recorded at once and a burst's in batches. A turn pin the attempt tagged is
    finished in the same statement, before the outcome (as `finish_pin` then finish_idle would).
    Retried on database failure without repeating the runtime call; a batch that fails otherwise is
    recorded one by one, so each outcome gets its own answer (finish_idle's SQ409 when its executor
    no longer holds the claim). The recording runs in its own task: a cancelled waiter does not
    discard a known outcome."""

    def __init__(self, store: Store, runtime: Substrate) -> None:
        self.store = store
        self.runtime = runtime
        self.pending: list[tuple[_Item, asyncio.Future[Session]]] = []
        self.task: asyncio.Task[None] | None = None
        self.statements = 0  # for tests: how many statements recorded outcomes

    async def finish(
        self, session_id: UUID, boundary: UUID, executor: UUID, snapshot: dict[str, Any] | None,
        pin: PinToFinish | None = None,
    ) -> Session:
        future: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        self.pending.append(((session_id, boundary, executor, snapshot, pin), future))
        if self.task is None:
            self.task = asyncio.create_task(self._record(), name="quiescence-outcomes")
        return await asyncio.shield(future)

    async def _record(self) -> None:
        try:
            while self.pending:
                batch, self.pending = self.pending, []
                try:
                    if len(batch) == 1 and batch[0][0][4] is None:  # one outcome, no pin: finish_idle
                        (item, future), = batch
                        await self._one(item, future)
                        continue
                    self.statements += 1
                    many = functools.partial(self.store.finish_idle_many, [
                        (s, b, e, snap, pin.as_json() if pin else None) for (s, b, e, snap, pin), _ in batch])
                    rows = await with_db_retry(many, budget=60.0)
                except Exception:
                    for item, future in batch:  # each on its own, for its own answer
                        if not future.done():
                            await self._one(item, future)
                    continue
                for item, future in batch:
                    row, pinned = rows[item[0]]
                    pin = item[4]
                    if pin is not None:
                        if pinned:
                            pin_recorded(pin)
                        else:
                            await pin_lost(self.runtime, pin, "the attempt no longer holds it")
                    if row is None:  # as finish_idle answers it
                        future.set_exception(conflict(
                            f"executor {item[2]} does not hold the idle claim of session {item[0]}"))
                    else:
                        future.set_result(row)
        finally:
            self.task = None

    async def _one(self, item: _Item, future: asyncio.Future[Session]) -> None:
        session_id, boundary, executor, snapshot, pin = item
        try:
            if pin is not None:
                self.statements += 1
                await finish_pin(self.store, self.runtime, pin)
            self.statements += 1
            future.set_result(await with_db_retry(
                lambda: self.store.finish_idle(session_id, boundary, executor, snapshot), budget=60.0))
        except Exception as e:
            future.set_exception(e)


async def _caught(coro: Awaitable[Session | None]) -> BaseException | Session | None:
    try:
        return await coro
    except Exception as e:
        return e


class Wakeups:
    """Coalescing wake-ups for N workers: each notification wakes one idle worker (or is kept as a
    token, at most N), instead of waking every worker for one piece of work."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.tokens = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def post(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.tokens = min(self.tokens + 1, self.cap)

    def post_all(self) -> None:
        for _ in range(self.cap + len(self.waiters)):
            self.post()

    async def wait(self, timeout: float) -> bool:
        """True when woken, False when the timeout passed."""
        if self.tokens:
            self.tokens -= 1
            return True
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=timeout)
            return True
        except TimeoutError:
            if waiter.done():  # woken just as the timeout passed: keep the wake-up for someone
                self.post()
            return False
        finally:
            with contextlib.suppress(ValueError):
                self.waiters.remove(waiter)


async def retry_claimed(pool: QuiescencePool, session_id: UUID) -> Literal["nothing", "recorded"]:
    """Take over a claimed idle boundary now (the operator's retry) and resolve it: read back,
    suspend only if not suspended, record. Raises while the runtime keeps failing, so the job
    retries; the claim stays either way until an outcome is recorded."""
    session = await pool.store.take_over_idle_claim(session_id, uuid4(), pool.lease)
    if session is None:
        return "nothing"
    if await pool.resolve(session) is None:
        raise RuntimeError(f"quiescence of session {session_id} failed again; the claim stays")
    return "recorded"


async def claim_and_quiesce(pool: QuiescencePool) -> UUID | None:
    """One claim attempt and, if it got one, the quiescence of that Session (tests, benchmarks)."""
    session = await pool.store.claim_idle(uuid4(), pool.keep_warm)
    if session is None:
        return None
    await pool.quiesce(session)
    return session.id
