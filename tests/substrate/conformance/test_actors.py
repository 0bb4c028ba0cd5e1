"""Conformance: Actors - creation, identity, versions, reads, listings, preconditions, deletion,
pause, workers."""

from __future__ import annotations

import uuid

from sessionq.runtime.base import ActorState, Code, InvokeRequest, SnapshotFidelity

from .conftest import WORKERS, Subject
from .helpers import NS, OTHER_NS, OTHER_UID, refused, running


async def test_a_new_actor_is_suspended_with_a_server_assigned_uid(subject: Subject) -> None:
    rt = subject.runtime
    template = await subject.template(NS, "t")
    a = await rt.create_actor(NS, "a", template)
    b = await rt.create_actor(NS, "b", template)
    assert (a.atespace, a.name, a.template) == (NS, "a", template)
    assert a.state == ActorState.SUSPENDED and a.worker is None and a.snapshots == ()
    assert a.version >= 1 and a.updated_at >= a.created_at
    assert str(uuid.UUID(a.uid)) == a.uid.lower() and a.uid != b.uid  # a fresh UUID each


async def test_get_reads_what_create_made(subject: Subject) -> None:
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    got = await rt.get_actor(NS, "a")
    assert (got.uid, got.version, got.state, got.template) == (made.uid, made.version, made.state, made.template)
    assert got.created_at == made.created_at


async def test_a_duplicate_name_is_already_exists_and_changes_nothing(subject: Subject) -> None:
    rt = subject.runtime
    template = await subject.template(NS, "t")
    made = await rt.create_actor(NS, "a", template)
    await refused(Code.ALREADY_EXISTS, rt.create_actor(NS, "a", template))
    got = await rt.get_actor(NS, "a")
    assert (got.uid, got.version) == (made.uid, made.version)
    # the same name in another atespace is another Actor
    other = await rt.create_actor(OTHER_NS, "a", template)
    assert other.uid != made.uid


async def test_a_missing_actor_or_template_is_not_found(subject: Subject) -> None:
    rt = subject.runtime
    template = await subject.template(NS, "t")
    await refused(Code.NOT_FOUND, rt.get_actor(NS, "ghost"))
    for call in (rt.resume_actor(NS, "ghost", OTHER_UID), rt.suspend_actor(NS, "ghost", OTHER_UID),
                 rt.pause_actor(NS, "ghost", OTHER_UID), rt.delete_actor(NS, "ghost", OTHER_UID),
                 rt.create_tag(NS, "tag", "ghost", OTHER_UID), rt.get_egress_policy(NS, "ghost"),
                 rt.create_egress_policy(NS, "ghost", OTHER_UID, []),
                 rt.cancel_turn(NS, "ghost", OTHER_UID, "session", "task"),
                 rt.invoke(NS, "ghost", OTHER_UID, InvokeRequest("session", "dispatch", {"parts": []}))):
        await refused(Code.NOT_FOUND, call)
    await refused(Code.NOT_FOUND, rt.create_actor(NS, "a", f"{NS}/no-such-template"))
    await refused(Code.NOT_FOUND, rt.create_actor(NS, "a", template, from_tag="no-such-tag"))
    await refused(Code.NOT_FOUND, rt.get_actor(NS, "a"))  # nothing was made


async def test_another_uid_is_failed_precondition_and_changes_nothing(subject: Subject) -> None:
    """Every mutation of an existing Actor takes the UID the caller recorded: a same-name
    replacement is never acted upon."""
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    for call in (rt.resume_actor(NS, "a", OTHER_UID), rt.pause_actor(NS, "a", OTHER_UID),
                 rt.suspend_actor(NS, "a", OTHER_UID), rt.delete_actor(NS, "a", OTHER_UID),
                 rt.create_tag(NS, "tag", "a", OTHER_UID), rt.create_egress_policy(NS, "a", OTHER_UID, []),
                 rt.cancel_turn(NS, "a", OTHER_UID, "session", "task")):
        await refused(Code.FAILED_PRECONDITION, call)
    await rt.create_egress_policy(NS, "a", made.uid, [])
    await refused(Code.FAILED_PRECONDITION, rt.update_egress_policy(NS, "a", OTHER_UID, []))
    running_actor = await running(rt, made)
    for call in (rt.suspend_actor(NS, "a", OTHER_UID), rt.pause_actor(NS, "a", OTHER_UID),
                 rt.delete_actor(NS, "a", OTHER_UID, any_state=True)):
        await refused(Code.FAILED_PRECONDITION, call)
    got = await rt.get_actor(NS, "a")
    assert (got.uid, got.state, got.version) == (made.uid, ActorState.RUNNING, running_actor.version)
    await refused(Code.NOT_FOUND, rt.get_tag(NS, "tag"))


async def test_the_version_rises_on_every_mutation(subject: Subject) -> None:
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    seen = [made.version]
    resumed = await running(rt, made)
    paused = await rt.pause_actor(NS, "a", made.uid)
    assert paused.state == ActorState.PAUSED and (await rt.get_actor(NS, "a")).state == ActorState.PAUSED
    continued, changed = await rt.resume_actor(NS, "a", made.uid)
    assert changed and continued.state == ActorState.RUNNING
    suspended = await rt.suspend_actor(NS, "a", made.uid)
    for actor in (resumed, paused, continued, suspended):
        assert actor.version > seen[-1], f"{actor.state}: version {actor.version} after {seen[-1]}"
        assert (await rt.get_actor(NS, "a")).version >= actor.version
        seen.append(actor.version)
    assert suspended.updated_at >= made.updated_at


async def test_resume_and_suspend_are_idempotent(subject: Subject) -> None:
    """A repeated resume answers resumed=False and a repeated suspend writes no snapshot: neither
    changes the Actor (a retried call after an uncertain outcome relies on it)."""
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    never_ran = await rt.suspend_actor(NS, "a", made.uid)
    assert never_ran.state == ActorState.SUSPENDED and never_ran.version == made.version
    assert never_ran.snapshots == ()
    first = await running(rt, made)
    assert first.state == ActorState.RUNNING and first.worker
    again, changed = await rt.resume_actor(NS, "a", made.uid)
    assert not changed and again.version == first.version and again.worker == first.worker
    suspended = await rt.suspend_actor(NS, "a", made.uid)
    repeated = await rt.suspend_actor(NS, "a", made.uid)
    assert repeated.version == suspended.version and repeated.snapshots == suspended.snapshots
    paused_twice = await rt.pause_actor(NS, "a", (await running(rt, made)).uid)
    paused_again = await rt.pause_actor(NS, "a", made.uid)
    assert paused_again.state == ActorState.PAUSED and paused_again.version == paused_twice.version


async def test_state_preconditions(subject: Subject) -> None:
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    await refused(Code.FAILED_PRECONDITION, rt.pause_actor(NS, "a", made.uid))  # SUSPENDED cannot pause
    await refused(Code.FAILED_PRECONDITION,
                  rt.invoke(NS, "a", made.uid, InvokeRequest("session", "dispatch", {"parts": []})))
    await rt.cancel_turn(NS, "a", made.uid, "session", "task")  # not running: nothing to stop, no error
    await running(rt, made)
    await refused(Code.FAILED_PRECONDITION, rt.delete_actor(NS, "a", made.uid))  # RUNNING needs any_state
    await refused(Code.FAILED_PRECONDITION, rt.create_tag(NS, "tag", "a", made.uid))  # only SUSPENDED
    before = await rt.get_actor(NS, "a")
    await refused(Code.INVALID_ARGUMENT, rt.suspend_actor(NS, "a", made.uid, SnapshotFidelity.ROOTFS))
    after = await rt.get_actor(NS, "a")
    assert (after.state, after.version, after.snapshots) == (ActorState.RUNNING, before.version, before.snapshots)


async def test_list_actors_pages_over_one_atespace_or_all(subject: Subject) -> None:
    rt = subject.runtime
    template = await subject.template(NS, "t")
    names = ["a1", "a2", "a3", "a4", "a5"]
    for name in names:
        await rt.create_actor(NS, name, template)
    await rt.create_actor(OTHER_NS, "b1", template)

    async def walk(atespace: str | None, size: int) -> list[tuple[str, str]]:
        seen, token = [], ""
        for _ in range(20):
            page = await rt.list_actors(atespace, size, token)
            assert len(page.items) <= size
            seen += [(a.atespace, a.name) for a in page.items]
            token = page.next_page_token
            if not token:
                return seen
        raise AssertionError("the listing never ended")

    one = await walk(NS, 2)
    assert sorted(one) == [(NS, n) for n in names] and len(set(one)) == len(one)
    everything = await walk(None, 2)
    assert sorted(everything) == sorted([*one, (OTHER_NS, "b1")]) and len(set(everything)) == len(everything)
    page = await rt.list_actors(NS, 0, "")  # 0: the runtime's default page size
    assert {a.name for a in page.items} == set(names)
    listed = next(a for a in page.items if a.name == "a1")
    assert listed.uid == (await rt.get_actor(NS, "a1")).uid
    assert (await rt.list_actors("conf-empty", 10, "")).items == []
    await refused(Code.INVALID_ARGUMENT, rt.list_actors(NS, 10, "not a token the runtime made"))
    await refused(Code.INVALID_ARGUMENT, rt.list_actors(NS, -1, ""))


async def test_workers_are_held_while_running_and_run_out(subject: Subject) -> None:
    rt = subject.runtime
    template = await subject.template(NS, "t")
    actors = [await rt.create_actor(NS, f"a{i}", template) for i in range(WORKERS + 1)]
    held = [await running(rt, a) for a in actors[:WORKERS]]
    assert len({a.worker for a in held}) == WORKERS
    await refused(Code.RESOURCE_EXHAUSTED, rt.resume_actor(NS, actors[-1].name, actors[-1].uid))
    assert (await rt.get_actor(NS, actors[-1].name)).state == ActorState.SUSPENDED
    workers = (await rt.list_workers(100, "")).items
    holders = {w.name: w.actor for w in workers}
    assert len(workers) == WORKERS
    for a in held:
        assert holders[a.worker] == f"{NS}/{a.name}"
    suspended = await rt.suspend_actor(NS, held[0].name, held[0].uid)
    assert suspended.worker is None
    last = await running(rt, actors[-1])
    assert last.worker == held[0].worker  # the freed worker


async def test_delete(subject: Subject) -> None:
    rt = subject.runtime
    template = await subject.template(NS, "t")
    made = await rt.create_actor(NS, "a", template)
    await rt.create_egress_policy(NS, "a", made.uid, [])
    await rt.delete_actor(NS, "a", made.uid)
    await refused(Code.NOT_FOUND, rt.get_actor(NS, "a"))
    await refused(Code.NOT_FOUND, rt.get_egress_policy(NS, "a"))
    await refused(Code.NOT_FOUND, rt.delete_actor(NS, "a", made.uid))
    assert [a.name for a in (await rt.list_actors(NS, 10, "")).items] == []
    # the name is free again, for a new Actor with a new UID and no egress policy
    again = await rt.create_actor(NS, "a", template)
    assert again.uid != made.uid and again.state == ActorState.SUSPENDED
    await refused(Code.NOT_FOUND, rt.get_egress_policy(NS, "a"))
    # a running Actor goes with any_state, and releases its worker
    busy = await running(rt, again)
    await rt.delete_actor(NS, "a", again.uid, any_state=True)
    await refused(Code.NOT_FOUND, rt.get_actor(NS, "a"))
    assert all(w.actor is None for w in (await rt.list_workers(100, "")).items if w.name == busy.worker)
