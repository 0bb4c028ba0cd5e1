"""The process runtime with real processes and real files: start, suspend to a snapshot, resume
from it, pause, tags and forks, delete, crashes, the size limit, an interrupted snapshot."""

from __future__ import annotations

import asyncio
import os
import signal
import tarfile
from pathlib import Path

import pytest

from sessionq.runtime.base import ActorState, Code, SnapshotFidelity, SnapshotStatus, SubstrateError
from sessionq.runtime.process import ProcessConfig, ProcessSubstrate, children
from sessionq.runtime.process.sandbox import Isolation
from tests.process.conftest import ATESPACE, alive, argv, proc_state, sandbox_processes, wait_for, wait_ready


async def _actor(rt: ProcessSubstrate, name: str = "a1", mode: str = "sleep", template: str = "t1") -> str:
    try:
        await rt.get_actor_template(ATESPACE, template)
    except SubstrateError:
        cmd = argv(mode)
        await rt.create_actor_template(ATESPACE, template, "local/fixture:1", command=cmd[:1], args=cmd[1:])
    actor = await rt.create_actor(ATESPACE, name, f"{ATESPACE}/{template}", env={"GREETING": "hello"})
    assert actor.state == ActorState.SUSPENDED and actor.worker is None
    return actor.uid


async def test_resume_starts_a_process_in_its_own_group_with_its_durable_directory(runtime: ProcessSubstrate) -> None:
    uid = await _actor(runtime)
    actor, resumed = await runtime.resume_actor(ATESPACE, "a1", uid)
    assert resumed and actor.state == ActorState.RUNNING and actor.worker is not None
    data = await wait_ready(runtime, uid)
    pid = runtime.pid_of(uid)
    assert pid is not None and os.getpgid(pid) == pid, "each Actor's process leads its own process group"
    if runtime.isolation == Isolation.NONE:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")  # noqa: ASYNC240
        assert f"SESSIONQ_DATA_DIR={data}".encode() in environ
        assert b"GREETING=hello" in environ
        assert not any(e.startswith(b"SESSIONQ_DATABASE_URL=") for e in environ), "the runtime's own env does not leak"
    # (in a sandbox the environment is checked from inside: tests/sandboxes/test_escape.py)
    assert (data / "env-actor").read_text() == f"{ATESPACE}/a1"
    # resuming a running Actor changes nothing
    again, resumed = await runtime.resume_actor(ATESPACE, "a1", uid)
    assert not resumed and runtime.pid_of(uid) == pid and again.version == actor.version


async def test_suspend_archives_the_directory_and_resume_restores_it_into_a_fresh_one(
    runtime: ProcessSubstrate,
) -> None:
    uid = await _actor(runtime)
    await runtime.resume_actor(ATESPACE, "a1", uid)
    data = await wait_ready(runtime, uid)
    pid = runtime.pid_of(uid)
    assert pid is not None
    (data / "memory.json").write_text('{"remembered": 7}')
    (data / "notes").mkdir()
    (data / "notes" / "a.txt").write_text("first")
    actor = await runtime.suspend_actor(ATESPACE, "a1", uid)
    assert actor.state == ActorState.SUSPENDED and actor.worker is None
    assert not alive(pid), "a suspended Actor holds no process"
    assert not data.exists(), "the live directory is gone once archived"
    [snap] = actor.snapshots
    assert snap.generation == 1 and snap.status == SnapshotStatus.COMPLETED
    archive = Path(snap.uri.removeprefix("file://"))
    with tarfile.open(archive) as tar:
        assert {"memory.json", "notes/a.txt", "starts"} <= set(tar.getnames())
    assert not [p for p in archive.parent.iterdir() if ".partial-" in p.name]
    # suspending again is a no-op
    assert (await runtime.suspend_actor(ATESPACE, "a1", uid)).version == actor.version

    actor, resumed = await runtime.resume_actor(ATESPACE, "a1", uid)
    assert resumed and actor.state == ActorState.RUNNING
    data = await wait_ready(runtime, uid)
    assert runtime.pid_of(uid) != pid
    assert (data / "memory.json").read_text() == '{"remembered": 7}'
    assert (data / "notes" / "a.txt").read_text() == "first"
    assert (data / "starts").read_text() == "2", "the process saw its restored directory"
    actor = await runtime.suspend_actor(ATESPACE, "a1", uid)
    assert [s.generation for s in actor.snapshots] == [1, 2]


@pytest.mark.clause("SNAP-2")
async def test_only_volumes_snapshots(runtime: ProcessSubstrate) -> None:
    uid = await _actor(runtime)
    await runtime.resume_actor(ATESPACE, "a1", uid)
    for fidelity in (SnapshotFidelity.ROOTFS, SnapshotFidelity.MEMORY):
        with pytest.raises(SubstrateError) as e:
            await runtime.suspend_actor(ATESPACE, "a1", uid, fidelity)
        assert e.value.code == Code.INVALID_ARGUMENT and "VOLUMES" in e.value.message
    assert (await runtime.get_actor(ATESPACE, "a1")).state == ActorState.RUNNING


async def test_sigterm_ignored_is_killed_after_the_grace_period(database_url: str, tmp_path: Path) -> None:
    rt = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "rt", slots=2, stop_grace=0.5))
    await rt.open()
    try:
        uid = await _actor(rt, mode="ignore-term")
        await rt.resume_actor(ATESPACE, "a1", uid)
        await wait_ready(rt, uid)
        pid = rt.pid_of(uid)
        assert pid is not None
        actor = await rt.suspend_actor(ATESPACE, "a1", uid)
        assert actor.state == ActorState.SUSPENDED and not alive(pid)
    finally:
        await rt.close()


async def test_pause_stops_the_process_and_keeps_its_slot(runtime: ProcessSubstrate) -> None:
    uid = await _actor(runtime)
    await runtime.resume_actor(ATESPACE, "a1", uid)
    await wait_ready(runtime, uid)
    pid = runtime.pid_of(uid)
    assert pid is not None
    actor = await runtime.pause_actor(ATESPACE, "a1", uid)
    assert actor.state == ActorState.PAUSED and actor.worker is not None
    await wait_for(lambda: proc_state(pid) == "T", what="SIGSTOP")
    actor, resumed = await runtime.resume_actor(ATESPACE, "a1", uid)
    assert resumed and actor.state == ActorState.RUNNING and runtime.pid_of(uid) == pid
    await wait_for(lambda: proc_state(pid) in "SR", what="SIGCONT")
    # a paused Actor suspends too (continued so that it can act on SIGTERM)
    await runtime.pause_actor(ATESPACE, "a1", uid)
    actor = await runtime.suspend_actor(ATESPACE, "a1", uid)
    assert actor.state == ActorState.SUSPENDED and not alive(pid)


async def test_slots_are_fixed(database_url: str, tmp_path: Path) -> None:
    rt = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "rt", slots=1))
    await rt.open()
    try:
        one = await _actor(rt, "one")
        two = await _actor(rt, "two")
        await rt.resume_actor(ATESPACE, "one", one)
        with pytest.raises(SubstrateError) as e:
            await rt.resume_actor(ATESPACE, "two", two)
        assert e.value.code == Code.RESOURCE_EXHAUSTED
        assert (await rt.get_actor(ATESPACE, "two")).state == ActorState.SUSPENDED
        workers = (await rt.list_workers(0, "")).items
        assert [w.actor for w in workers] == [f"{ATESPACE}/one"]
        await rt.suspend_actor(ATESPACE, "one", one)
        await rt.resume_actor(ATESPACE, "two", two)
    finally:
        await rt.close()


async def test_tags_copy_and_forks_start_from_the_copy_and_delete_keeps_tags(runtime: ProcessSubstrate) -> None:
    uid = await _actor(runtime, "source")
    await runtime.resume_actor(ATESPACE, "source", uid)
    data = await wait_ready(runtime, uid)
    (data / "memory.json").write_text("tagged")
    await runtime.suspend_actor(ATESPACE, "source", uid)
    with pytest.raises(SubstrateError) as e:
        await runtime.create_tag(ATESPACE, "cp-1", "source", "another-uid")
    assert e.value.code == Code.FAILED_PRECONDITION
    tag = await runtime.create_tag(ATESPACE, "cp-1", "source", uid)
    assert tag.snapshot_generation == 1
    with pytest.raises(SubstrateError) as e:
        await runtime.create_tag(ATESPACE, "cp-1", "source", uid)
    assert e.value.code == Code.ALREADY_EXISTS

    # the source moves on and is deleted: its own snapshots go, the tag's copy stays
    await runtime.resume_actor(ATESPACE, "source", uid)
    data = await wait_ready(runtime, uid)
    (data / "memory.json").write_text("later")
    await runtime.suspend_actor(ATESPACE, "source", uid)
    await runtime.delete_actor(ATESPACE, "source", uid)
    assert not (runtime.root / "snapshots" / uid).exists()
    assert not (runtime.root / "actors" / uid).exists()
    copies = list((runtime.root / "tags" / ATESPACE).iterdir())
    assert len(copies) == 1 and copies[0].stat().st_size > 0, "the tag's own copy stays"

    fork = await runtime.create_actor(ATESPACE, "fork", f"{ATESPACE}/t1", from_tag="cp-1")
    assert [s.status for s in fork.snapshots] == [SnapshotStatus.COMPLETED]
    await runtime.resume_actor(ATESPACE, "fork", fork.uid)
    data = await wait_ready(runtime, fork.uid)
    assert (data / "memory.json").read_text() == "tagged", "the fork starts from the tag's files"
    # deleting the tag leaves the fork's own copy
    await runtime.delete_tag(ATESPACE, "cp-1")
    await runtime.suspend_actor(ATESPACE, "fork", fork.uid)
    await runtime.resume_actor(ATESPACE, "fork", fork.uid)
    data = await wait_ready(runtime, fork.uid)
    assert (data / "memory.json").read_text() == "tagged"


async def test_delete_any_state_kills_the_group_and_removes_everything(runtime: ProcessSubstrate) -> None:
    uid = await _actor(runtime, mode="grandchild")
    await runtime.resume_actor(ATESPACE, "a1", uid)
    data = await wait_ready(runtime, uid)
    pid = runtime.pid_of(uid)
    grandchild = int((data / "grandchild").read_text())
    sandboxed = runtime.isolation != Isolation.NONE  # then the grandchild's pid is its namespace's
    assert pid is not None and (sandboxed or alive(grandchild))
    if sandboxed:
        assert sandbox_processes(runtime, uid)
    with pytest.raises(SubstrateError) as e:
        await runtime.delete_actor(ATESPACE, "a1", uid)
    assert e.value.code == Code.FAILED_PRECONDITION
    await runtime.delete_actor(ATESPACE, "a1", uid, any_state=True)
    assert not alive(pid)
    if sandboxed:
        await wait_for(lambda: not sandbox_processes(runtime, uid), what="the sandbox's processes to die")
    else:
        await wait_for(lambda: not alive(grandchild), what="the grandchild to die with its group")
    assert not (runtime.root / "actors" / uid).exists()
    with pytest.raises(SubstrateError) as e:
        await runtime.get_actor(ATESPACE, "a1")
    assert e.value.code == Code.NOT_FOUND
    assert all(w.actor is None for w in (await runtime.list_workers(0, "")).items)


async def test_a_process_that_exits_makes_the_actor_crashed_with_status_and_stderr(runtime: ProcessSubstrate) -> None:
    uid = await _actor(runtime, mode="crash")
    await runtime.resume_actor(ATESPACE, "a1", uid)

    async def crashed() -> bool:
        return (await runtime.get_actor(ATESPACE, "a1")).state == ActorState.CRASHED

    for _ in range(500):
        if await crashed():
            break
        await __import__("asyncio").sleep(0.02)
    actor = await runtime.get_actor(ATESPACE, "a1")
    assert actor.state == ActorState.CRASHED and actor.worker is None
    assert actor.crash_exit_status == 3
    assert actor.crash_message is not None
    assert "exited with status 3" in actor.crash_message and "boom: the fixture process failed" in actor.crash_message
    # a crashed Actor resumes from its latest completed snapshot (none: an empty directory) and can be deleted
    await runtime.delete_actor(ATESPACE, "a1", uid)


async def test_a_crash_message_never_quotes_the_workload_credential_or_the_environment(
    runtime: ProcessSubstrate,
) -> None:
    """An agent that prints its secrets to stderr and crashes: the crash message (what operator
    views show) has its workload credential, any other credential and the values of its
    environment replaced by a marker, and is bounded (the end of stderr, cut after the redaction)."""
    token = "sqw.01a23304-5f1c-7779-b7b1-d5ea70e399aa." + "f" * 64  # as sessionq.domain.workload issues them
    api_key = "sk-live-0123456789abcdef"
    cmd = argv("leak")
    await runtime.create_actor_template(ATESPACE, "leaky", "local/fixture:1", command=cmd[:1], args=cmd[1:],
                                        env={"API_KEY": api_key})
    actor = await runtime.create_actor(ATESPACE, "a1", f"{ATESPACE}/leaky",
                                       env={"SESSIONQ_WORKLOAD_TOKEN": token, "GREETING": "hello there"})
    await runtime.resume_actor(ATESPACE, "a1", actor.uid)

    for _ in range(750):
        got = await runtime.get_actor(ATESPACE, "a1")
        if got.state == ActorState.CRASHED:
            break
        await asyncio.sleep(0.02)
    message = got.crash_message or ""
    assert got.crash_exit_status == 4 and message.startswith("the process exited with status 4; stderr: \u2026")
    assert "fatal: leaked on purpose" in message, message  # the end of stderr is quoted
    for secret in (token, token[:40], token[-40:], api_key, "hello there", "sqw."):
        assert secret not in message, (secret, message)
    assert "env: API_KEY=<redacted> GREETING=<redacted>" in message, message
    assert "another session's credential: <redacted>" in message and "Bearer <redacted>" in message, message
    assert len(message) <= len("the process exited with status 4; stderr: \u2026") + children.STDERR_TAIL, len(message)
    # the full stderr stays in the Actor's log file, for whoever may read the machine's files
    assert token in (runtime.root / "logs" / f"{actor.uid}.stderr").read_text()


async def test_a_secret_cut_by_the_tail_is_not_half_quoted(tmp_path: Path) -> None:
    secret = "s3cr3t-" + "9" * 40
    log = tmp_path / "err"
    log.write_text("head\n" + secret + "\n" + "y" * 30)
    tail = children.stderr_tail(log, limit=40, secrets=[secret])
    assert tail == "\u2026" + ("<redacted>\n" + "y" * 30)[-40:], tail
    assert "9999" not in tail and "s3cr3t" not in tail
    assert children.redact("a b abcd", ["abcd", "b"]) == "a b <redacted>"  # values under MIN_SECRET characters stay


async def test_a_process_killed_by_a_signal_is_crashed_and_resumes(runtime: ProcessSubstrate) -> None:
    uid = await _actor(runtime)
    await runtime.resume_actor(ATESPACE, "a1", uid)
    data = await wait_ready(runtime, uid)
    (data / "memory.json").write_text("kept")
    await runtime.suspend_actor(ATESPACE, "a1", uid)
    await runtime.resume_actor(ATESPACE, "a1", uid)
    data = await wait_ready(runtime, uid)
    (data / "memory.json").write_text("lost with the crash")
    pid = runtime.pid_of(uid)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    await runtime.wait_exited(uid)
    await wait_for(lambda: runtime.pid_of(uid) is None, what="the crash to be recorded")
    actor = await runtime.get_actor(ATESPACE, "a1")
    assert actor.state == ActorState.CRASHED and actor.crash_exit_status == -signal.SIGKILL
    assert "killed by SIGKILL" in (actor.crash_message or "")
    actor, resumed = await runtime.resume_actor(ATESPACE, "a1", uid)
    assert resumed and actor.state == ActorState.RUNNING and actor.crash_message is None
    data = await wait_ready(runtime, uid)
    assert (data / "memory.json").read_text() == "kept", "a crashed Actor restarts from its latest completed snapshot"


async def test_a_command_that_does_not_exist_is_crashed_with_the_os_error(runtime: ProcessSubstrate) -> None:
    await runtime.create_actor_template(ATESPACE, "missing", "local/x:1", command=["/nonexistent/agent-binary"])
    actor = await runtime.create_actor(ATESPACE, "a1", f"{ATESPACE}/missing")
    with pytest.raises(SubstrateError) as e:
        await runtime.resume_actor(ATESPACE, "a1", actor.uid)
    assert e.value.code == Code.FAILED_PRECONDITION
    assert "No such file or directory" in e.value.message and "/nonexistent/agent-binary" in e.value.message
    actor = await runtime.get_actor(ATESPACE, "a1")
    assert actor.state == ActorState.CRASHED and actor.worker is None
    assert "No such file or directory" in (actor.crash_message or "")


async def test_a_template_without_a_command_runs_the_default_agent_or_is_refused(
    runtime: ProcessSubstrate, database_url: str, tmp_path: Path
) -> None:
    import sys

    default = await runtime.create_actor_template(ATESPACE, "t", "local/x:1")
    assert default.command == (sys.executable, "-m", "sessionq.agentkit.first_agent")
    with pytest.raises(SubstrateError) as e:
        await runtime.create_actor_template(ATESPACE, "t2", "local/x:1", command=["a"], env={"A=B": "x"})
    assert e.value.code == Code.INVALID_ARGUMENT
    await runtime.close()  # one runtime per database: this one refuses templates without a command
    strict = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "strict", default_command=()))
    await strict.open()
    try:
        with pytest.raises(SubstrateError) as e:
            await strict.create_actor_template(ATESPACE, "t3", "local/x:1")
        assert e.value.code == Code.INVALID_ARGUMENT and "needs a command" in e.value.message
    finally:
        await strict.close()
        await runtime.open()


async def test_a_directory_over_the_limit_is_not_snapshotted_and_the_previous_snapshot_serves(
    database_url: str, tmp_path: Path
) -> None:
    rt = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "rt", slots=2, max_directory_bytes=64 * 1024))
    await rt.open()
    try:
        uid = await _actor(rt)
        await rt.resume_actor(ATESPACE, "a1", uid)
        data = await wait_ready(rt, uid)
        (data / "small").write_text("generation one")
        first = (await rt.suspend_actor(ATESPACE, "a1", uid)).snapshots[-1]
        first_bytes = Path(first.uri.removeprefix("file://")).read_bytes()  # noqa: ASYNC240
        await rt.resume_actor(ATESPACE, "a1", uid)
        data = await wait_ready(rt, uid)
        (data / "big").write_bytes(os.urandom(100 * 1024))
        with pytest.raises(SubstrateError) as e:
            await rt.suspend_actor(ATESPACE, "a1", uid)
        assert e.value.code == Code.FAILED_PRECONDITION
        assert "over the limit of 65536 bytes" in e.value.message and "previous snapshot is kept" in e.value.message
        actor = await rt.get_actor(ATESPACE, "a1")
        assert actor.state == ActorState.CRASHED and "over the limit" in (actor.crash_message or "")
        assert [(s.generation, s.status) for s in actor.snapshots] == [(1, SnapshotStatus.COMPLETED)]
        kept = Path(first.uri.removeprefix("file://")).read_bytes()  # noqa: ASYNC240
        assert kept == first_bytes, "nothing of it was lost"
        await rt.resume_actor(ATESPACE, "a1", uid)
        data = await wait_ready(rt, uid)
        assert (data / "small").read_text() == "generation one" and not (data / "big").exists()
    finally:
        await rt.close()


async def test_a_snapshot_interrupted_before_its_rename_never_counts(runtime: ProcessSubstrate) -> None:
    uid = await _actor(runtime)
    await runtime.resume_actor(ATESPACE, "a1", uid)
    data = await wait_ready(runtime, uid)
    (data / "memory.json").write_text("generation one")
    await runtime.suspend_actor(ATESPACE, "a1", uid)
    await runtime.resume_actor(ATESPACE, "a1", uid)
    data = await wait_ready(runtime, uid)
    (data / "memory.json").write_text("generation two, never renamed")
    seen: list[Path] = []

    def interrupt(tmp: Path) -> None:
        seen.append(tmp)
        actor_state = tmp  # the archive is fully written under its temporary name here
        assert actor_state.stat().st_size > 0
        raise OSError("the runtime died between write and rename")

    runtime.before_rename = interrupt
    with pytest.raises(SubstrateError) as e:
        await runtime.suspend_actor(ATESPACE, "a1", uid)
    runtime.before_rename = None
    assert e.value.code == Code.INTERNAL and "generation 2" in e.value.message
    assert seen and not seen[0].exists(), "the temporary archive is removed"
    assert not (runtime.root / "snapshots" / uid / "2.tar.gz").exists()
    actor = await runtime.get_actor(ATESPACE, "a1")
    assert [(s.generation, s.status) for s in actor.snapshots] == [(1, SnapshotStatus.COMPLETED)]
    await runtime.resume_actor(ATESPACE, "a1", uid)
    data = await wait_ready(runtime, uid)
    assert (data / "memory.json").read_text() == "generation one", "the previous generation still serves"
    # the next suspend takes a new generation number (generation 2 was assigned once)
    actor = await runtime.suspend_actor(ATESPACE, "a1", uid)
    assert [s.generation for s in actor.snapshots] == [1, 3]


async def test_concurrent_resumes_never_share_a_slot(database_url: str, tmp_path: Path) -> None:
    """Many racers, fewer slots: exactly as many Actors run as there are slots, each on its own."""
    import asyncio

    rt = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "rt", slots=3))
    await rt.open()
    try:
        uids = {f"r{i}": await _actor(rt, f"r{i}") for i in range(8)}
        results = await asyncio.gather(
            *(rt.resume_actor(ATESPACE, name, uid) for name, uid in uids.items()), return_exceptions=True
        )
        running = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, SubstrateError)]
        assert len(running) == 3 and len(refused) == 5, results
        assert all(e.code == Code.RESOURCE_EXHAUSTED for e in refused)
        workers = {a.worker for a, _ in running}
        assert len(workers) == 3, "every running Actor holds a slot of its own"
        pids = [rt.pid_of(a.uid) for a, _ in running]
        assert all(p is not None and alive(p) for p in pids)
        held = [w for w in (await rt.list_workers(0, "")).items if w.actor is not None]
        assert len(held) == 3
    finally:
        await rt.close()


async def test_egress_policies_are_stored_and_returned_not_enforced(runtime: ProcessSubstrate) -> None:
    from sessionq.runtime.base import EgressRule

    uid = await _actor(runtime)
    rules = [EgressRule("https", "api.example.com", 443, {"Authorization": "Bearer x"})]
    made = await runtime.create_egress_policy(ATESPACE, "a1", uid, rules)
    assert made.actor_uid == uid and made.version == 1 and list(made.rules) == rules
    with pytest.raises(SubstrateError) as e:
        await runtime.create_egress_policy(ATESPACE, "a1", uid, rules)
    assert e.value.code == Code.ALREADY_EXISTS
    updated = await runtime.update_egress_policy(ATESPACE, "a1", uid, [EgressRule("http", "b.example.com", 80)])
    assert updated.version == 2
    got = await runtime.get_egress_policy(ATESPACE, "a1")
    assert list(got.rules) == [EgressRule("http", "b.example.com", 80)] and got.version == 2
    with pytest.raises(SubstrateError) as e:
        await runtime.update_egress_policy(ATESPACE, "a1", "other-uid", rules)
    assert e.value.code == Code.FAILED_PRECONDITION


async def test_listings_page_with_keyset_tokens(runtime: ProcessSubstrate) -> None:
    for i in range(5):
        await _actor(runtime, f"p{i}")
    names, token = [], ""
    while True:
        page = await runtime.list_actors(ATESPACE, 2, token)
        names += [a.name for a in page.items]
        if not page.next_page_token:
            break
        token = page.next_page_token
    assert names == [f"p{i}" for i in range(5)]
    everywhere = await runtime.list_actors(None, 0, "")
    assert [a.name for a in everywhere.items] == names
    workers = await runtime.list_workers(3, "")
    assert len(workers.items) == 3 and workers.next_page_token
    rest = await runtime.list_workers(3, workers.next_page_token)
    assert len(rest.items) == 1 and not rest.next_page_token


async def test_cancel_turn_checks_the_actor_and_is_a_no_op_without_a_process(runtime: ProcessSubstrate) -> None:
    uid = await _actor(runtime)
    await runtime.cancel_turn(ATESPACE, "a1", uid, "session-1", "task-1")  # suspended: nothing to stop
    with pytest.raises(SubstrateError) as e:
        await runtime.cancel_turn(ATESPACE, "a1", "another-uid", "session-1", "task-1")
    assert e.value.code == Code.FAILED_PRECONDITION
    with pytest.raises(SubstrateError) as e:
        await runtime.cancel_turn(ATESPACE, "missing", uid, "session-1", "task-1")
    assert e.value.code == Code.NOT_FOUND
