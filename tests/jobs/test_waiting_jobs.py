"""A job that waits for another attempt's claim to lapse never outlives the reason it waits.

A job that finds a live claim queues itself, under the work's queueing lock, for when that claim
would expire (a crashed executor's claim lapses at most sessions.claimLifetime later). While it
waits it holds the queueing lock, so a later defer of the same work inserts nothing. A newer
generation, a client's retry, the holder's completion and a released claim must each make the
waiting job due now (sessionq.run_waiting_job), and wake the workers; otherwise the Session's next
operation stalls for up to two minutes (issue "Close the holes an attack found", item 1).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from lifecycle import ready_checkpoint, ready_session, turn_by_store
from procrastinate import App
from sessionq.jobs.app import build_app

from sessionq.db.store import Store
from sessionq.domain.quiescence import QuiescencePool, claim_and_quiesce

LATER = dt.timedelta(seconds=100)


@pytest.fixture
async def app(database_url: str) -> Any:
    app = build_app(database_url, expiry=False)
    async with app.open_async():
        yield app


async def waiting(store: Store, lock: str) -> dict[str, Any] | None:
    """The todo job holding `lock`: its id and whether it is due now."""
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT id, scheduled_at, (scheduled_at IS NULL OR scheduled_at <= now()) AS due"
            " FROM procrastinate_jobs WHERE queueing_lock = %s AND status = 'todo'",
            (lock,),
        )
        return await cur.fetchone()


async def start_job(app: App, lock: str) -> int:
    """A worker fetches the job holding `lock` (status doing), as the holder of a claim would run it
    (older jobs of the queue are fetched on the way)."""
    worker = await app.job_manager.register_worker()
    while True:
        job = await app.job_manager.fetch_job(queues=["operations"], worker_id=worker)
        assert job is not None and job.id is not None, f"no job holds {lock}"
        if job.queueing_lock == lock:
            return job.id


async def wait_for_claim_expiry(store: Store, session_id: UUID) -> int:
    """What a job that found a live claim does: queue itself for the claim's expiry."""
    await store.queue_operation(session_id, dt.datetime.now(dt.UTC) + LATER)
    job = await waiting(store, f"operation:{session_id}")
    assert job is not None and not job["due"]
    return int(job["id"])


async def claimed_suspend(store: Store, sim: Any, app: App) -> tuple[UUID, UUID, UUID]:
    """A READY Session whose SUSPEND is claimed by a running job; returns (session, generation, executor)."""
    session = await ready_session(store, sim)
    adm = await store.admit_operation(session.id, "alice", None, "SUSPEND")
    assert adm.outcome == "admitted"
    await start_job(app, f"operation:{session.id}")
    executor = uuid4()
    claim = await store.claim_operation(session.id, adm.generation, executor, 120)
    assert claim.status == "claimed"
    return session.id, adm.generation, executor


@pytest.fixture
async def wakeups(database_url: str) -> Any:
    """The job ids announced on procrastinate's channel (what wakes idle workers)."""
    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    await conn.execute("LISTEN procrastinate_any_queue_v1")

    async def announced(job_id: int, timeout: float = 2.0) -> bool:
        try:
            async with asyncio.timeout(timeout):
                async for note in conn.notifies():
                    if json.loads(note.payload).get("job_id") == job_id:
                        return True
        except TimeoutError:
            return False
        return False

    yield announced
    await conn.close()


async def test_completion_makes_the_waiting_job_due_now(store: Store, sim: Any, app: App, wakeups: Any) -> None:
    sid, generation, executor = await claimed_suspend(store, sim, app)
    job = await wait_for_claim_expiry(store, sid)
    await store.complete_operation(sid, generation, executor, {}, None)
    after = await waiting(store, f"operation:{sid}")
    assert after is not None and after["id"] == job and after["due"]
    assert await wakeups(job)


@pytest.mark.clause("OP-10")
async def test_a_released_claim_makes_the_waiting_job_due_now(store: Store, sim: Any, app: App, wakeups: Any) -> None:
    sid, generation, executor = await claimed_suspend(store, sim, app)
    job = await wait_for_claim_expiry(store, sid)
    await store.release_operation(sid, generation, executor)
    after = await waiting(store, f"operation:{sid}")
    assert after is not None and after["id"] == job and after["due"]
    assert await wakeups(job)


async def test_a_client_retry_of_the_pending_operation_makes_it_due_now(store: Store, sim: Any, app: App) -> None:
    sid, generation, _ = await claimed_suspend(store, sim, app)
    job = await wait_for_claim_expiry(store, sid)
    again = await store.admit_operation(sid, "alice", None, "SUSPEND")
    assert again.outcome == "joined" and again.generation == generation
    after = await waiting(store, f"operation:{sid}")
    assert after is not None and after["id"] == job and after["due"]


async def test_a_newer_generation_makes_the_waiting_job_due_now(store: Store, sim: Any, app: App, wakeups: Any) -> None:
    sid, generation, executor = await claimed_suspend(store, sim, app)
    await store.complete_operation(sid, generation, executor, {}, None)
    # the busy job re-queued itself just after the holder completed (the race the attack found)
    job = await wait_for_claim_expiry(store, sid)
    resume = await store.admit_operation(sid, "alice", None, "RESUME")
    assert resume.outcome == "admitted"
    after = await waiting(store, f"operation:{sid}")
    assert after is not None and after["id"] == job and after["due"]
    assert await wakeups(job)


async def test_a_later_defer_never_postpones_a_waiting_job(store: Store, sim: Any, app: App) -> None:
    session = await ready_session(store, sim)
    adm = await store.admit_operation(session.id, "alice", None, "SUSPEND")
    assert adm.outcome == "admitted"
    before = await waiting(store, f"operation:{session.id}")
    assert before is not None and before["due"]
    await store.queue_operation(session.id, dt.datetime.now(dt.UTC) + LATER)
    after = await waiting(store, f"operation:{session.id}")
    assert after is not None and after["id"] == before["id"] and after["due"] and after["scheduled_at"] is None


async def test_a_checkpoint_job_waiting_for_a_claim_runs_when_the_claim_ends(store: Store, sim: Any, app: App) -> None:
    """The same trap on checkpoints: finish, release and a client's retry make the waiting job due."""
    cp = await ready_checkpoint(store, sim)  # READY: admit a deletion to get a job with a claim again
    lock = f"checkpoint:{cp.id}"

    async def claimed() -> UUID:
        await start_job(app, lock)
        executor = uuid4()
        claim = await store.claim_checkpoint(cp.id, executor, 120)
        assert claim.status == "claimed"
        await store.queue_checkpoint(cp.id, dt.datetime.now(dt.UTC) + LATER)
        job = await waiting(store, lock)
        assert job is not None and not job["due"]
        return executor

    deleting = await store.admit_checkpoint_delete(cp.id, "alice")
    assert deleting.state == "DELETING"
    executor = await claimed()
    await store.release_checkpoint(cp.id, executor)
    job = await waiting(store, lock)
    assert job is not None and job["due"]

    # the due job is the next attempt: it claims, and another job waits for that claim
    executor = await claimed()
    await store.admit_checkpoint_delete(cp.id, "alice")  # the client retries its DeleteCheckpoint
    job = await waiting(store, lock)
    assert job is not None and job["due"]

    # that job ran, found the claim still live and waits again; then the holder finishes
    await start_job(app, lock)
    await store.queue_checkpoint(cp.id, dt.datetime.now(dt.UTC) + LATER)
    job = await waiting(store, lock)
    assert job is not None and not job["due"]
    assert await store.finish_checkpoint(cp.id, executor, None) is None  # deleted: the tag is gone
    job = await waiting(store, lock)
    assert job is not None and job["due"]  # it runs now and ends ("gone") instead of waiting two minutes


async def test_a_retried_create_checkpoint_joins_and_drives_the_creation(store: Store, sim: Any, app: App) -> None:
    session = await ready_session(store, sim, "cp-src")
    head = await turn_by_store(store, sim, session)
    pool = QuiescencePool(store, sim, "", listen=False)
    while await claim_and_quiesce(pool):
        pass
    cp = await store.admit_checkpoint(session.id, "alice", "cp-1", head)
    assert cp.state == "CREATING"
    await start_job(app, f"checkpoint:{cp.id}")
    executor = uuid4()
    assert (await store.claim_checkpoint(cp.id, executor, 120)).status == "claimed"
    await store.queue_checkpoint(cp.id, dt.datetime.now(dt.UTC) + LATER)
    again = await store.admit_checkpoint(session.id, "alice", "cp-1", head)
    assert again.id == cp.id
    job = await waiting(store, f"checkpoint:{cp.id}")
    assert job is not None and job["due"]
