"""Executing lifecycle operations: prepare -> claim -> runtime I/O -> complete.

`OperationExecutor.run(session_id)` executes whatever operation is current on the Session. It is
called by the ``execute_operation`` job (jobs/operations.py); every retry of that job, on any
worker replica, runs the same steps, and the claim in PostgreSQL lets exactly one attempt at a
time issue runtime mutations for a generation (clause OP-2).

- Preparation is read-only (the revision, the Actor as the runtime reports it). A preparation
  that fails for good invalidates the generation through ``fail_preparation``. The first attempt
  at a plain creation of a READY revision has nothing to inspect: ``begin_operation`` decides its
  preparation and claims it in the statement that reads the Session.
- The claim lives at most ``sessions.claimLifetime``; the runtime calls of an attempt run under
  a deadline no longer than that (OP-12), so an attempt whose claim lapsed cannot issue a late
  mutation (a delayed creation cannot resurrect a deleted Actor).
- No transaction is open while the runtime is called (OP-3): every store call is its own
  transaction.
- An attempt that ends in an error releases its claim (the executor id stays recorded) and the
  job retries; a retry that finds a previous executor inspects the deterministic Actor and
  continues from what exists (OP-14).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID, uuid4

from sessionq import errors, metrics
from sessionq.db.retry import detached, with_db_retry
from sessionq.db.store import Store
from sessionq.domain import workload
from sessionq.domain.snapshots import pick_snapshot
from sessionq.models import (
    AttemptFailure,
    CheckpointState,
    ClaimStatus,
    OperationKind,
    OperationStart,
    PreparationFailure,
    Revision,
    RevisionState,
    RowKind,
    Session,
)
from sessionq.runtime.base import (
    Actor,
    ActorState,
    Code,
    EgressRule,
    SnapshotFidelity,
    Substrate,
    SubstrateError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT = {Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.ABORTED, Code.RESOURCE_EXHAUSTED, Code.INTERNAL}
# a runtime reached over gRPC (runtime/ateapi): an unknown outcome, a cancelled call, or credentials
# it refuses (operations stay pending until an operator fixes them; the adapter logs the cause)
TRANSIENT |= {Code.UNKNOWN, Code.CANCELLED, Code.UNAUTHENTICATED, Code.PERMISSION_DENIED}
PREPARATION_ATTEMPTS = 3


class PreparationFailed(Exception):
    def __init__(self, reason: PreparationFailure, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class RuntimeConflict(Exception):
    """The runtime holds something we must not adopt or overwrite (e.g. a replaced Actor)."""


class OutcomeStatus(enum.StrEnum):
    """What one run of the executor did (the execute_operation job returns it)."""

    COMPLETED = "completed"  # this attempt completed the generation
    BUSY = "busy"  # another attempt holds a live claim (until retry_at)
    SUPERSEDED = "superseded"  # a newer generation is current
    DONE = "done"  # the generation was already completed
    GONE = "gone"  # the Session no longer exists
    FAILED_PREPARATION = "failed_preparation"  # the generation was invalidated before anything was issued
    NOTHING = "nothing"  # no operation is pending


# the claim statuses that end a run without runtime work, as outcomes
_UNCLAIMED = {
    ClaimStatus.SUPERSEDED: OutcomeStatus.SUPERSEDED,
    ClaimStatus.DONE: OutcomeStatus.DONE,
    ClaimStatus.GONE: OutcomeStatus.GONE,
}


@dataclass(frozen=True)
class Outcome:
    status: OutcomeStatus
    session: Session | None = None
    retry_at: datetime | None = None


def egress_rules(revision: Revision) -> list[EgressRule]:
    return [
        EgressRule(r["protocol"], r["hostname"], int(r["port"]), dict(r.get("credential_headers") or {}))
        for r in revision.egress
    ]


def attempt_failure(error: BaseException) -> tuple[AttemptFailure, str]:
    """Why an attempt failed, as the Session shows it to its clients while the job retries: the
    runtime's own code and message, a conflict sessionq found, a timeout; for anything else (a bug,
    a lost database) only the error's type, never its text (the worker log and `sessionq jobs show`
    have the rest)."""
    if isinstance(error, SubstrateError):
        if error.code == Code.DEADLINE_EXCEEDED:
            return AttemptFailure.ATTEMPT_TIMED_OUT, f"the runtime did not answer in time: {error.message}"
        return AttemptFailure.RUNTIME_ERROR, f"the runtime answered {error.code.name}: {error.message}"
    if isinstance(error, RuntimeConflict):
        return AttemptFailure.RUNTIME_CONFLICT, str(error)
    return AttemptFailure.INTERNAL_ERROR, f"internal error ({type(error).__name__}); see the worker log"


class OperationExecutor:
    def __init__(self, store: Store, runtime: Substrate, claim_lifetime: float, *, keep_jobs: bool = False) -> None:
        self.store = store
        self.runtime = runtime
        self.claim_lifetime = claim_lifetime
        self.keep_jobs = keep_jobs  # jobs.retention > 0: a completed job is kept as succeeded
        self._workload_secret: str | None = None

    async def _actor_env(self, session: Session) -> dict[str, str]:
        if session.kind == RowKind.SANDBOX:
            # a Sandbox takes no turns: no workload credential (the task store is out of its reach)
            return {"SESSIONQ_SANDBOX_ID": str(session.id)}
        if self._workload_secret is None:
            self._workload_secret = await self.store.secret("workload")
        return {
            "SESSIONQ_SESSION_ID": str(session.id),
            workload.ENV: workload.token_for(self._workload_secret, session.id),
        }

    async def run(
        self, session_id: UUID, job_id: int | None = None, begun: tuple[UUID, float, OperationStart] | None = None
    ) -> Outcome:
        """Execute the Session's current operation. `job_id` is the execute_operation job running
        it, if any: a completion ends that job in its own transaction (its status is then
        "completed"). `begun`: the operation was begun already, by the statement that fetched the
        job (sessionq.fetch_job_begun): the executor id it began as, when that statement was sent
        (time.monotonic()) and begin_operation's answer."""
        lifetime = self.claim_lifetime
        if begun is not None:
            executor, started, start = begun
        else:
            executor = uuid4()
            started = time.monotonic()
            # the Session and its revision; a first attempt at a plain creation is claimed right
            # here, its preparation (a READY revision) decided in the same statement
            start = await self.store.begin_operation(session_id, executor, lifetime)
        session, revision = start.session, start.revision
        if session is None or session.operation == OperationKind.NONE or session.operation_id is None:
            return Outcome(OutcomeStatus.NOTHING, session)
        generation = session.operation_id
        log_extra = {"session_id": str(session_id), "operation_id": str(generation)}

        claim = start.claim
        if claim is None:
            # 1. read-only preparation
            try:
                await self._prepare(session, revision)
            except PreparationFailed as e:
                log.warning("operation preparation failed: %s", e.message, extra=log_extra)
                try:
                    failed = await self.store.fail_preparation(session_id, generation, e.reason, e.message)
                except errors.SessionqError:
                    return Outcome(OutcomeStatus.SUPERSEDED)  # claimed or superseded meanwhile: not ours to fail
                metrics.OPERATIONS.labels(kind=session.operation, outcome=OutcomeStatus.FAILED_PREPARATION).inc()
                return Outcome(OutcomeStatus.FAILED_PREPARATION, failed)

            # 2. the execution claim
            started = time.monotonic()
            claim = await self.store.claim_operation(session_id, generation, executor, lifetime)
        if claim.status != ClaimStatus.CLAIMED:
            metrics.CLAIM_CONFLICTS.labels(status=claim.status).inc()
        if claim.status == ClaimStatus.BUSY:
            return Outcome(OutcomeStatus.BUSY, claim.session, claim.expires_at)
        if claim.status != ClaimStatus.CLAIMED:
            return Outcome(_UNCLAIMED[claim.status], claim.session)
        assert claim.session is not None
        log.info(
            "claimed %s operation", claim.session.operation.lower(), extra={**log_extra, "executor_id": str(executor)}
        )

        # 3. runtime I/O, bounded by the claim lifetime, no transaction open
        uncertain = claim.previous_executor is not None
        try:
            async with asyncio.timeout_at(asyncio.get_running_loop().time() + lifetime - (time.monotonic() - started)):
                result = await self._execute(claim.session, revision, generation, executor, uncertain)
        except BaseException as e:
            error: BaseException = e
            if isinstance(e, TimeoutError):
                error = SubstrateError(Code.DEADLINE_EXCEEDED, "the attempt exceeded its claim lifetime")
            reason, message = (None, None) if isinstance(e, asyncio.CancelledError) else attempt_failure(error)
            try:
                await detached(
                    with_db_retry(
                        lambda: self.store.release_operation(session_id, generation, executor, reason, message)
                    )
                )
            except Exception:
                log.exception("could not release the claim", extra=log_extra)
            metrics.OPERATIONS.labels(kind=claim.session.operation, outcome="failed_attempt").inc()
            if error is not e:
                raise error from e
            raise

        # 4. completion, atomically, by the claim holder
        completed = await detached(
            with_db_retry(
                lambda: self.store.complete_operation(
                    session_id, generation, executor, result, job_id, keep_job=self.keep_jobs and job_id is not None
                )
            )
        )
        metrics.OPERATIONS.labels(kind=claim.session.operation, outcome=OutcomeStatus.COMPLETED).inc()
        log.info("completed %s operation", claim.session.operation.lower(), extra=log_extra)
        return Outcome(OutcomeStatus.COMPLETED, completed)

    # -- preparation --------------------------------------------------------------------------

    async def _prepare(self, session: Session, revision: Revision | None) -> None:
        """Read-only checks before the claim; `revision` is the Session's pinned revision (read
        together with the Session)."""
        if session.operation == OperationKind.CREATE:
            if revision is None or revision.state != RevisionState.READY:
                raise PreparationFailed(
                    PreparationFailure.REVISION_UNAVAILABLE, f"revision {session.revision_id} is not prepared"
                )
            if session.source_checkpoint_id is not None:
                await self._prepare_fork(session)
        if session.operation == OperationKind.CREATE and session.actor_uid is None and session.executor_id is None:
            return  # nothing was ever issued: there is no Actor to inspect yet
        # read the Actor as the runtime reports it (read-only); transient errors are retried
        actor = await self._inspect_with_retries(session)
        if actor is not None and session.actor_uid and actor.uid != session.actor_uid:
            raise PreparationFailed(
                PreparationFailure.ACTOR_REPLACED,
                f"actor {session.actor_atespace}/{session.actor_name} has uid {actor.uid}, "
                f"not the recorded {session.actor_uid}; it is never adopted",
            )

    async def _prepare_fork(self, session: Session) -> None:
        """A fork loads its checkpoint from PostgreSQL; the tag must still hold exactly the
        checkpoint's snapshot (also on every retry)."""
        assert session.source_checkpoint_id is not None
        checkpoint = await self.store.checkpoint_by_id(session.source_checkpoint_id)
        if checkpoint is None or checkpoint.state != CheckpointState.READY:
            raise PreparationFailed(
                PreparationFailure.CHECKPOINT_UNAVAILABLE, f"checkpoint {session.source_checkpoint_id} is not ready"
            )
        try:
            tag = await self.runtime.get_tag(checkpoint.actor_atespace, checkpoint.tag_name)
        except SubstrateError as e:
            code = PreparationFailure.CHECKPOINT_UNAVAILABLE
            if e.code in TRANSIENT:
                code = PreparationFailure.RUNTIME_UNAVAILABLE
            raise PreparationFailed(code, f"cannot read tag {checkpoint.tag_name}: {e.message}") from e
        # the tag holds its own copy of the snapshot: compare with the copy's URI recorded when the
        # checkpoint was made (rows made before it was recorded hold the Actor snapshot's URI)
        tag_uri = checkpoint.tag_snapshot_uri if checkpoint.tag_snapshot_uri is not None else checkpoint.snapshot_uri
        if tag.snapshot_generation != checkpoint.snapshot_generation:
            raise PreparationFailed(
                PreparationFailure.CHECKPOINT_MISMATCH,
                f"tag {checkpoint.tag_name} holds snapshot generation {tag.snapshot_generation}, "
                f"not the checkpoint's {checkpoint.snapshot_generation}",
            )
        if tag.snapshot_uri != tag_uri:
            raise PreparationFailed(
                PreparationFailure.CHECKPOINT_MISMATCH,
                # the URIs are the runtime's storage: not quoted to the caller
                f"tag {checkpoint.tag_name} holds another snapshot copy than the one the checkpoint recorded",
            )

    async def _inspect_with_retries(self, session: Session) -> Actor | None:
        for attempt in range(PREPARATION_ATTEMPTS):
            try:
                return await self.runtime.get_actor(session.actor_atespace, session.actor_name)
            except SubstrateError as e:
                if e.code == Code.NOT_FOUND:
                    return None
                if e.code not in TRANSIENT or attempt == PREPARATION_ATTEMPTS - 1:
                    raise PreparationFailed(
                        PreparationFailure.RUNTIME_UNAVAILABLE, f"cannot inspect the actor: {e.message}"
                    ) from e
                await asyncio.sleep(0.1 * 2**attempt)
        return None

    # -- execution ------------------------------------------------------------------------------

    async def _execute(
        self, session: Session, revision: Revision | None, generation: UUID, executor: UUID, uncertain: bool
    ) -> dict[str, Any]:
        if session.operation == OperationKind.CREATE:
            assert revision is not None
            return await self._create(session, revision, generation, executor, uncertain)
        if session.operation == OperationKind.SUSPEND:
            return await self._suspend(session)
        if session.operation == OperationKind.RESUME:
            return await self._resume(session)
        if session.operation == OperationKind.DELETE:
            return await self._delete(session)
        raise AssertionError(f"unknown operation {session.operation}")

    async def _get_actor(self, session: Session) -> Actor | None:
        try:
            actor = await self.runtime.get_actor(session.actor_atespace, session.actor_name)
        except SubstrateError as e:
            if e.code == Code.NOT_FOUND:
                return None
            raise
        if session.actor_uid and actor.uid != session.actor_uid:
            raise RuntimeConflict(
                f"actor {session.actor_name} was replaced (uid {actor.uid}, recorded {session.actor_uid})"
            )
        return actor

    async def _create(
        self, session: Session, revision: Revision, generation: UUID, executor: UUID, uncertain: bool
    ) -> dict[str, Any]:
        actor: Actor | None = None
        if session.actor_uid or uncertain:
            # an earlier attempt may have created it: continue from what exists
            actor = await self._get_actor(session)
            if actor is not None and actor.template != session.actor_template:
                raise RuntimeConflict(
                    f"actor {session.actor_name} exists with template {actor.template}, "
                    f"not {session.actor_template}; it is never adopted"
                )
        if actor is None:
            env = await self._actor_env(session)
            try:
                actor = await self.runtime.create_actor(
                    session.actor_atespace,
                    session.actor_name,
                    session.actor_template,
                    from_tag=await self._source_tag(session),
                    env=env,
                )
            except SubstrateError as e:
                if e.code == Code.ALREADY_EXISTS and not uncertain:
                    # nothing of ours was ever issued: an existing Actor is not ours to adopt
                    raise RuntimeConflict(
                        f"actor {session.actor_name} already exists; an unissued creation never adopts it"
                    ) from e
                raise
        if not session.actor_uid:
            await with_db_retry(lambda: self.store.record_actor(session.id, generation, executor, actor.uid))
        await self._ensure_egress(session, actor, egress_rules(revision), fresh=not (session.actor_uid or uncertain))
        if session.kind == RowKind.SANDBOX:
            # a READY Sandbox runs (commands and files reach it); a Session's Actor waits suspended
            # for its first turn. Resuming a running Actor changes nothing, so a retry repeats it.
            await self.runtime.resume_actor(session.actor_atespace, session.actor_name, actor.uid)
        return {"actor_uid": actor.uid}

    async def _source_tag(self, session: Session) -> str | None:
        # the tag lives in the checkpoint's atespace, which is the fork's (both use the revision's);
        # its name is checkpoint-<id>, or turn-<pin id> for a checkpoint that took a turn pin over
        if session.source_checkpoint_id is None:
            return None
        checkpoint = await self.store.checkpoint_by_id(session.source_checkpoint_id)
        if checkpoint is None:
            raise PreparationFailed(
                PreparationFailure.CHECKPOINT_UNAVAILABLE, f"checkpoint {session.source_checkpoint_id} is gone"
            )
        return checkpoint.tag_name

    async def _ensure_egress(self, session: Session, actor: Actor, rules: list[EgressRule], *, fresh: bool) -> None:
        """Apply the persisted egress policy before the Actor ever runs; a retry finishes this step
        instead of repeating it. A fresh Actor (created by this attempt) has no policy yet."""
        if fresh:
            try:
                await self.runtime.create_egress_policy(session.actor_atespace, session.actor_name, actor.uid, rules)
                return
            except SubstrateError as e:
                if e.code != Code.ALREADY_EXISTS:
                    raise
        try:
            current = await self.runtime.get_egress_policy(session.actor_atespace, session.actor_name)
        except SubstrateError as e:
            if e.code != Code.NOT_FOUND:
                raise
            await self.runtime.create_egress_policy(session.actor_atespace, session.actor_name, actor.uid, rules)
            return
        if frozenset(current.rules) != frozenset(rules):
            await self.runtime.update_egress_policy(session.actor_atespace, session.actor_name, actor.uid, rules)

    async def _suspend(self, session: Session) -> dict[str, Any]:
        actor = await self._get_actor(session)
        if actor is None:
            raise RuntimeConflict(f"actor {session.actor_name} does not exist")
        if actor.state != ActorState.SUSPENDED:
            actor = await self.runtime.suspend_actor(
                session.actor_atespace, session.actor_name, actor.uid, SnapshotFidelity.VOLUMES
            )
        return {"snapshot": pick_snapshot(actor.snapshots)}

    async def _resume(self, session: Session) -> dict[str, Any]:
        actor = await self._get_actor(session)
        if actor is None:
            raise RuntimeConflict(f"actor {session.actor_name} does not exist")
        started = time.monotonic()
        await self.runtime.resume_actor(session.actor_atespace, session.actor_name, actor.uid)
        await self.store.record_resume(session.id, time.monotonic() - started)  # usage (45_usage.sql)
        return {}

    async def _delete(self, session: Session) -> dict[str, Any]:
        actor = await self._get_actor(session)
        if actor is None:
            return {}
        if actor.state not in (ActorState.SUSPENDED, ActorState.CRASHED, ActorState.DELETING):
            await self.runtime.suspend_actor(
                session.actor_atespace, session.actor_name, actor.uid, SnapshotFidelity.VOLUMES
            )
        try:
            await self.runtime.delete_actor(session.actor_atespace, session.actor_name, actor.uid)
        except SubstrateError as e:
            if e.code != Code.NOT_FOUND:  # already gone counts as done
                raise
        return {}
