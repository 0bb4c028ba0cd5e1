"""Conformance: VOLUMES snapshots, their contents across suspend and resume, tags that pin them and
Actors forked from a tag."""

from __future__ import annotations

import pytest

from sessionq.runtime.base import ActorState, Code, SnapshotFidelity, SnapshotStatus

from .conftest import Subject
from .helpers import NS, refused, running


async def test_every_suspend_writes_a_new_generation(subject: Subject) -> None:
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    generations = []
    for _ in range(3):
        await running(rt, made)
        suspended = await rt.suspend_actor(NS, "a", made.uid, SnapshotFidelity.VOLUMES)
        assert suspended.state == ActorState.SUSPENDED and suspended.worker is None
        gens = [s.generation for s in suspended.snapshots]
        assert gens == sorted(gens) and len(set(gens)) == len(gens), "ascending, each once"
        latest = suspended.snapshots[-1]
        assert latest.fidelity == SnapshotFidelity.VOLUMES and latest.status == SnapshotStatus.COMPLETED
        assert latest.uri and latest.generation >= 1
        generations.append(latest.generation)
        got = await rt.get_actor(NS, "a")
        assert got.snapshots[-1].generation == latest.generation
    assert generations == sorted(generations) and len(set(generations)) == 3


async def test_the_durable_directory_survives_suspend_and_resume(subject: Subject) -> None:
    if subject.durable is None:
        pytest.skip(f"{subject.kind}: no durable directory to look into")
    rt, durable = subject.runtime, subject.durable
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    await running(rt, made)
    assert "memory" not in await durable.read(NS, "a", made.uid)  # a first resume starts empty
    await durable.write(NS, "a", made.uid, {"memory": "first turn"})
    await rt.suspend_actor(NS, "a", made.uid)
    await running(rt, made)
    assert (await durable.read(NS, "a", made.uid))["memory"] == "first turn"
    await durable.write(NS, "a", made.uid, {"memory": "second turn"})
    await rt.pause_actor(NS, "a", made.uid)
    await rt.suspend_actor(NS, "a", made.uid)  # from PAUSED too
    await running(rt, made)
    assert (await durable.read(NS, "a", made.uid))["memory"] == "second turn"


async def test_a_tag_names_the_latest_snapshot(subject: Subject) -> None:
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    await refused(Code.FAILED_PRECONDITION, rt.create_tag(NS, "tag", "a", made.uid))  # no snapshot yet
    await running(rt, made)
    suspended = await rt.suspend_actor(NS, "a", made.uid)
    tag = await rt.create_tag(NS, "tag", "a", made.uid)
    assert (tag.atespace, tag.name, tag.actor_name) == (NS, "tag", "a")
    assert tag.actor_uid == made.uid
    assert tag.snapshot_generation == suspended.snapshots[-1].generation
    assert tag.status == SnapshotStatus.COMPLETED and tag.snapshot_uri
    got = await rt.get_tag(NS, "tag")
    assert (got.name, got.actor_name, got.snapshot_generation, got.snapshot_uri, got.status) == (
        tag.name, tag.actor_name, tag.snapshot_generation, tag.snapshot_uri, tag.status)
    assert got.actor_uid in (made.uid, "")  # "": a runtime that does not say (a real Substrate's GetTag)
    await refused(Code.ALREADY_EXISTS, rt.create_tag(NS, "tag", "a", made.uid))
    await rt.delete_tag(NS, "tag")
    await refused(Code.NOT_FOUND, rt.get_tag(NS, "tag"))
    await refused(Code.NOT_FOUND, rt.delete_tag(NS, "tag"))
    again = await rt.create_tag(NS, "tag", "a", made.uid)  # the name is free again
    assert again.snapshot_generation == tag.snapshot_generation


async def test_tags_are_listed_by_atespace_in_pages(subject: Subject) -> None:
    """list_tags: the tags of one atespace by name (or of every atespace), in keyset pages."""
    rt = subject.runtime
    made = await rt.create_actor(NS, "a", await subject.template(NS, "t"))
    await running(rt, made)
    suspended = await rt.suspend_actor(NS, "a", made.uid)
    names = [f"tag-{i}" for i in range(5)]
    for name in reversed(names):
        await rt.create_tag(NS, name, "a", made.uid)
    listed, token = [], ""
    while True:
        page = await rt.list_tags(NS, 2, token)
        assert len(page.items) <= 2
        listed.extend(page.items)
        token = page.next_page_token
        if not token:
            break
    assert [t.name for t in listed] == names
    assert {t.snapshot_generation for t in listed} == {suspended.snapshots[-1].generation}
    assert {t.actor_name for t in listed} == {"a"}
    everywhere = await rt.list_tags(None, 100, "")
    assert [t.name for t in everywhere.items if t.atespace == NS] == names
    await rt.delete_tag(NS, "tag-2")
    assert [t.name for t in (await rt.list_tags(NS, 100, "")).items] == [n for n in names if n != "tag-2"]
    assert (await rt.list_tags("elsewhere", 100, "")).items == []


async def test_a_fork_from_a_tag_starts_from_the_tagged_snapshot(subject: Subject) -> None:
    rt, durable = subject.runtime, subject.durable
    template = await subject.template(NS, "t")
    made = await rt.create_actor(NS, "a", template)
    await running(rt, made)
    if durable is not None:
        await durable.write(NS, "a", made.uid, {"memory": "tagged"})
    await rt.suspend_actor(NS, "a", made.uid)
    await rt.create_tag(NS, "tag", "a", made.uid)
    fork = await rt.create_actor(NS, "fork", template, from_tag="tag")
    assert fork.state == ActorState.SUSPENDED and fork.uid != made.uid
    assert [s.status for s in fork.snapshots][-1:] == [SnapshotStatus.COMPLETED]
    await running(rt, fork)
    if durable is not None:
        assert (await durable.read(NS, "fork", fork.uid))["memory"] == "tagged"
    fork_suspended = await rt.suspend_actor(NS, "fork", fork.uid)
    assert fork_suspended.snapshots[-1].generation > fork.snapshots[-1].generation
    # the fork is an Actor of its own: the source is untouched
    source = await rt.get_actor(NS, "a")
    assert source.state == ActorState.SUSPENDED and source.uid == made.uid


async def test_a_tag_pins_its_snapshot(subject: Subject) -> None:
    """Later generations and the source Actor's deletion never take the tagged snapshot away."""
    rt, durable = subject.runtime, subject.durable
    template = await subject.template(NS, "t")
    made = await rt.create_actor(NS, "a", template)
    await running(rt, made)
    if durable is not None:
        await durable.write(NS, "a", made.uid, {"memory": "generation one"})
    await rt.suspend_actor(NS, "a", made.uid)
    tag = await rt.create_tag(NS, "tag", "a", made.uid)
    for turn in range(3):  # more generations than any runtime keeps of an Actor's own
        await running(rt, made)
        if durable is not None:
            await durable.write(NS, "a", made.uid, {"memory": f"later {turn}"})
        await rt.suspend_actor(NS, "a", made.uid)
    await rt.delete_actor(NS, "a", made.uid)
    got = await rt.get_tag(NS, "tag")
    assert got.snapshot_generation == tag.snapshot_generation and got.status == SnapshotStatus.COMPLETED
    fork = await rt.create_actor(NS, "fork", template, from_tag="tag")
    await running(rt, fork)
    if durable is not None:
        assert (await durable.read(NS, "fork", fork.uid))["memory"] == "generation one"
    await rt.delete_tag(NS, "tag")
    # the fork holds its own copy: it outlives the tag
    await rt.suspend_actor(NS, "fork", fork.uid)
    await running(rt, fork)
    if durable is not None:
        assert (await durable.read(NS, "fork", fork.uid))["memory"] == "generation one"
