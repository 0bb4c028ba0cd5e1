"""The runtime server restarted while Actors run: no child outlives it, and the next server
reconciles (an Actor recorded with a process of the old server is CRASHED). Checked with the
process table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sessionq.runtime.base import ActorState
from sessionq.runtime.process import ProcessConfig, ProcessSubstrate
from sessionq.runtime.process.sandbox import Isolation
from tests.process.conftest import ATESPACE, LEVELS, alive, config, processes_with, wait_for

SERVER = str(Path(__file__).with_name("runtime_server.py"))


def _start_server(
    database_url: str, root: Path, count: int, isolation: Isolation = Isolation.NONE
) -> tuple[subprocess.Popen[str], dict[str, int], list[int]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, SERVER, database_url, str(root), str(count), isolation.value],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the runtime server did not start"
    interpreters = proc.stdout.readline()
    assert interpreters, "the runtime server started no warm interpreter"
    return proc, {uid: int(pid) for uid, pid in json.loads(line).items()}, [int(p) for p in json.loads(interpreters)]


async def test_a_runtime_killed_with_sigkill_leaves_no_process_and_the_next_one_reconciles(
    database_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "runtime"
    server, pids, interpreters = _start_server(database_url, root, 3)
    assert interpreters and all(alive(p) for p in interpreters)
    marker = str(root)  # every Actor process has its durable directory (under root) in its environment
    for pid in pids.values():
        await wait_for(lambda pid=pid: (root / "actors").exists() and alive(pid), what="the actors to run")
    grandchildren: list[int] = []
    for uid in pids:
        path = root / "actors" / uid / "data" / "grandchild"
        await wait_for(path.exists, what="the grandchild")
        grandchildren.append(int(path.read_text()))
    assert all(alive(p) for p in grandchildren)
    server.send_signal(signal.SIGKILL)
    server.wait(timeout=10)
    # the kernel kills each direct child with its parent (PR_SET_PDEATHSIG)
    await wait_for(lambda: not any(alive(p) for p in pids.values()), what="the actors to die with their runtime")
    await wait_for(lambda: not any(alive(p) for p in interpreters), what="its warm interpreters to die with it")

    rt = ProcessSubstrate(database_url, ProcessConfig(root=root, slots=3, isolation=Isolation.NONE))
    await rt.open()  # reconciles: kills what is left of each recorded group
    try:
        await wait_for(lambda: not any(alive(p) for p in grandchildren), what="the groups' survivors to be killed")
        await rt.warm_ready(120)  # the new runtime's warm interpreter (its command line names the root too)
        left = [p for p in processes_with(marker) if p not in rt.warm_pids()]
        assert left == [], "no process of the old runtime (Actor or warm interpreter) is left"
        for uid in pids:
            actors = (await rt.list_actors(ATESPACE, 0, "")).items
            actor = next(a for a in actors if a.uid == uid)
            assert actor.state == ActorState.CRASHED and actor.worker is None
            assert "runtime restarted" in (actor.crash_message or "")
        assert all(w.actor is None for w in (await rt.list_workers(0, "")).items)
        # a crashed Actor runs again on the new runtime
        actor = (await rt.list_actors(ATESPACE, 0, "")).items[0]
        actor, resumed = await rt.resume_actor(ATESPACE, actor.name, actor.uid)
        assert resumed and actor.state == ActorState.RUNNING
    finally:
        await rt.close()
    assert processes_with(marker) == [], "closing the runtime stops its children"


@pytest.mark.parametrize("isolation", [p for p in LEVELS if p.values[0] != Isolation.NONE])  # type: ignore[attr-defined]
async def test_a_runtime_killed_with_sigkill_leaves_no_sandbox(
    isolation: Isolation, database_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "runtime"
    server, pids, _ = _start_server(database_url, root, 2, isolation)
    for uid in pids:
        await wait_for((root / "actors" / uid / "data" / "grandchild").exists, what="the grandchild")
    marker = str(root)  # on the command line of bwrap and of every gVisor process
    assert processes_with(marker)
    server.send_signal(signal.SIGKILL)
    server.wait(timeout=10)
    await wait_for(lambda: processes_with(marker) == [], what="every sandbox to die with its runtime")
    rt = ProcessSubstrate(database_url, config(root, isolation, slots=2))
    await rt.open()
    try:
        actors = (await rt.list_actors(ATESPACE, 0, "")).items
        assert {a.state for a in actors} == {ActorState.CRASHED}
        actor, resumed = await rt.resume_actor(ATESPACE, actors[0].name, actors[0].uid)
        assert resumed and actor.state == ActorState.RUNNING
    finally:
        await rt.close()
    assert processes_with(marker) == []


async def test_only_one_runtime_server_per_database(database_url: str, tmp_path: Path) -> None:
    first = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "one"))
    await first.open()
    try:
        second = ProcessSubstrate(database_url, ProcessConfig(root=tmp_path / "two"))
        try:
            await second.open()
        except Exception as exc:
            assert "another process runtime server" in str(exc)
        else:
            await second.close()
            raise AssertionError("a second runtime server opened on the same database")
    finally:
        await first.close()
