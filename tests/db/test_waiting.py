"""How a mutation's caller waits for its generation: NOTIFY payloads and the keyed listener.

The Session row's NOTIFY carries its id, state, operation and generation (sessionq.db.notify), and
when no operation is pending the row itself. A waiter reads the row only when its generation may have
finished and the notification did not say how; a waiter that subscribes just after its own
admission still learns of a completion whose notification arrived in between.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import apply_agent
from lifecycle import AGENT

from sessionq.db import notify
from sessionq.db.connection import Listener
from sessionq.db.notify import Channel
from sessionq.db.store import Store
from sessionq.domain.operations import OperationExecutor
from sessionq.models import Observation


class CountingStore(Store):
    """The real store, counting its reads of the row (instrumentation, not a mock)."""

    observed = 0

    async def observe(self, session_id: Any, generation: Any) -> Observation:
        self.observed += 1
        return await super().observe(session_id, generation)


@pytest.fixture
async def counting(database_url: str) -> Any:
    store = await CountingStore.open(database_url, pool_size=4)
    try:
        yield store
    finally:
        await store.close()


async def ready_session_via(store: Store, sim: Any, request_id: str) -> Any:
    await apply_agent(store, sim)
    adm = await store.admit_create("alice", request_id, "kagent", AGENT, "")
    out = await OperationExecutor(store, sim, 120).run(adm.session.id)
    assert out.session is not None and out.session.state == "READY"
    return out.session


async def settled_payload(listener: Listener, key: str, timeout: float = 5.0) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        payload = listener.recent(Channel.SESSION, key)
        if payload is not None and notify.session_change(payload).operation == "NONE":
            return payload
        await asyncio.sleep(0.01)
    raise AssertionError(f"no settled notification for {key}")


async def test_payload_names_state_operation_and_generation(counting: CountingStore, sim: Any) -> None:
    await apply_agent(counting, sim)
    adm = await counting.admit_create("alice", "w-1", "kagent", AGENT, "")
    assert counting.listener is not None
    key = str(adm.session.id)
    await OperationExecutor(counting, sim, 120).run(adm.session.id)
    payload = await settled_payload(counting.listener, key)
    change = notify.session_change(payload)
    head, row = [change.session, change.state, change.operation, change.generation], change.row
    assert row is not None
    assert head == [key, "READY", "NONE", str(adm.generation)]
    assert row["id"] == key and row["state"] == "READY" and row["operation_id"] == str(adm.generation)
    assert row["actor_uid"] and row["executor_id"] is None


async def test_pending_payload_carries_no_row(counting: CountingStore, sim: Any) -> None:
    s = await ready_session_via(counting, sim, "w-6")
    assert counting.listener is not None
    key = str(s.id)
    sus = await counting.admit_operation(s.id, "alice", None, "SUSPEND")
    # the admission notifies (operation and generation changed) while the operation is pending
    for _ in range(500):
        payload = counting.listener.recent(Channel.SESSION, key)
        if payload is not None and notify.session_change(payload).operation == "SUSPEND":
            break
        await asyncio.sleep(0.01)
    assert payload is not None
    assert notify.session_change(payload) == notify.SessionChange(key, False, "READY", "SUSPEND", str(sus.generation))


async def test_completion_between_admission_and_wait_is_seen_without_polling(counting: CountingStore, sim: Any) -> None:
    """The completion's NOTIFY arrives before the caller subscribes: the listener remembers it, so
    the caller reads the row once and returns at once instead of sleeping until its poll."""
    await apply_agent(counting, sim)
    adm = await counting.admit_create("alice", "w-2", "kagent", AGENT, "")
    assert counting.listener is not None
    await OperationExecutor(counting, sim, 120).run(adm.session.id)
    await settled_payload(counting.listener, str(adm.session.id))
    counting.observed = 0
    loop = asyncio.get_running_loop()
    started = loop.time()
    obs = await counting.wait_for_generation(adm.session.id, adm.generation, 30, admission=adm)
    assert obs.status == "done" and obs.session is not None and obs.session.state == "READY"
    assert obs.session.operation_id == adm.generation and obs.session.actor_uid
    assert counting.observed == 0  # the remembered notification carried the row
    # far below the listener's 1 s fallback poll: it was not what returned the answer
    assert loop.time() - started < 0.9


async def test_pending_waiter_reads_only_when_its_generation_finishes(counting: CountingStore, sim: Any) -> None:
    await apply_agent(counting, sim)
    adm = await counting.admit_create("alice", "w-3", "kagent", AGENT, "")
    counting.observed = 0
    waiter = asyncio.create_task(counting.wait_for_generation(adm.session.id, adm.generation, 30, admission=adm))
    await asyncio.sleep(0.05)
    assert not waiter.done() and counting.observed == 0  # pending at admission: nothing to read yet
    # the claim and the Actor's recording notify nothing; the completion wakes the waiter with the row
    out = await OperationExecutor(counting, sim, 120).run(adm.session.id)
    obs = await asyncio.wait_for(waiter, 10)
    assert obs.status == "done" and counting.observed == 0
    assert obs.session == out.session  # the row as completion committed it


async def test_superseded_generation_is_read_not_taken_from_a_payload(counting: CountingStore, sim: Any) -> None:
    """Only the completion of the waiter's own generation answers from a payload: another
    generation's completion (here the Delete that superseded an unclaimed creation) is read."""
    await apply_agent(counting, sim)
    adm = await counting.admit_create("alice", "w-7", "kagent", AGENT, "")
    counting.observed = 0
    waiter = asyncio.create_task(counting.wait_for_generation(adm.session.id, adm.generation, 30, admission=adm))
    await asyncio.sleep(0.05)
    dele = await counting.admit_operation(adm.session.id, "alice", None, "DELETE")
    await OperationExecutor(counting, sim, 120).run(adm.session.id)
    obs = await asyncio.wait_for(waiter, 10)
    assert obs.status == "superseded" and counting.observed >= 1
    assert obs.session is not None and obs.session.operation_id == dele.generation


async def test_waiter_without_admission_snapshot_reads_first(counting: CountingStore, sim: Any) -> None:
    """A caller that did not admit (no `admission`) and has heard nothing of the generation reads
    the row first: it may already be done."""
    await apply_agent(counting, sim)
    adm = await counting.admit_create("alice", "w-4", "kagent", AGENT, "")
    counting.observed = 0
    waiter = asyncio.create_task(counting.wait_for_generation(adm.session.id, adm.generation, 30))
    await asyncio.sleep(0.05)
    assert counting.observed == 1 and not waiter.done()  # read at once; still pending
    await OperationExecutor(counting, sim, 120).run(adm.session.id)
    obs = await asyncio.wait_for(waiter, 10)
    assert obs.status == "done" and counting.observed == 1


async def test_keyed_listener_calls_back_per_key_and_remembers(database_url: str) -> None:
    import psycopg

    listener = Listener(database_url, ["sq_test_keyed"], keyed=("sq_test_keyed",), remember=2)
    await listener.start()
    got: list[str | None] = []
    unsubscribe = listener.subscribe_key("sq_test_keyed", "a", got.append)
    try:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            for payload in ("a 1", "b 1", "a 2", "c 1", "d 1"):
                key, n = payload.split()
                await conn.execute("SELECT sessionq.notify('sq_test_keyed', jsonb_build_object('key', %s::text, 'n', %s::int))",
                                   (key, int(n)))
        for _ in range(500):
            if listener.recent("sq_test_keyed", "d") is not None:
                break
            await asyncio.sleep(0.01)
        def short(payload: str | None) -> str | None:  # '{"key": "a", "n": 1}' -> "a 1"
            data = json.loads(payload) if payload is not None else None
            return f"{data['key']} {data['n']}" if data is not None else None

        assert [short(p) for p in got] == ["a 1", "a 2"]
        # only the two most recent keys are remembered
        assert listener.recent("sq_test_keyed", "a") is None
        assert short(listener.recent("sq_test_keyed", "c")) == "c 1"
        assert short(listener.recent("sq_test_keyed", "d")) == "d 1"
    finally:
        unsubscribe()
        await listener.stop()


async def test_admission_before_a_listener_reconnect_reads_first(counting: CountingStore, sim: Any,
                                                                 database_url: str) -> None:
    """Notifications sent while LISTEN was down are lost: a waiter whose admission predates the
    reconnect must read the row instead of trusting that it would have been told."""
    import psycopg

    await apply_agent(counting, sim)
    listener = counting.listener
    assert listener is not None and listener.connected
    adm = await counting.admit_create("alice", "w-5", "kagent", AGENT, "")
    assert adm.listen_epoch == listener.epoch
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'"
        )
    for _ in range(500):
        if listener.connected and listener.epoch > adm.listen_epoch:
            break
        await asyncio.sleep(0.01)
    assert listener.epoch > adm.listen_epoch
    counting.observed = 0
    waiter = asyncio.create_task(counting.wait_for_generation(adm.session.id, adm.generation, 30, admission=adm))
    await asyncio.sleep(0.05)
    assert counting.observed == 1 and not waiter.done()  # read at once; still pending
    await OperationExecutor(counting, sim, 120).run(adm.session.id)
    obs = await asyncio.wait_for(waiter, 10)
    assert obs.status == "done" and counting.observed == 1  # the completion's payload answered
