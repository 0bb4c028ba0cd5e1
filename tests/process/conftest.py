"""Fixtures of the process runtime's tests: a ProcessSubstrate on the test's database, with its
directories under the test's tmp_path, and helpers that read the process table."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sessionq.runtime.process import ProcessConfig, ProcessSubstrate
from sessionq.runtime.process.sandbox import Isolation, actor_uid, unavailable

FIXTURE = str(Path(__file__).with_name("fixture_process.py"))
ATESPACE = "kagent"


def argv(mode: str = "sleep") -> list[str]:
    return [sys.executable, FIXTURE, mode]


@pytest.fixture
def process_root(tmp_path: Path) -> Path:
    return tmp_path / "runtime"


TESTS = str(Path(__file__).resolve().parent.parent)  # the test programs a sandbox must show


def level(value: Isolation) -> object:
    """A parameter of an isolation level, skipped with the reason when this machine lacks it."""
    reason = unavailable(value)
    return pytest.param(value, id=value.value, marks=[pytest.mark.skipif(reason is not None, reason=reason or "")])


LEVELS = [level(v) for v in Isolation]


@pytest.fixture(params=LEVELS)
def isolation(request: pytest.FixtureRequest) -> Isolation:
    """Each isolation level this machine has (the others are skipped, saying why)."""
    return request.param  # type: ignore[no-any-return]


def config(root: Path, isolation: Isolation = Isolation.NONE, **kwargs: object) -> ProcessConfig:
    """A ProcessConfig for tests: the given level, the test programs visible inside a sandbox."""
    return ProcessConfig(root=root, isolation=isolation, sandbox_paths=(TESTS,), **kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def runtime(database_url: str, process_root: Path, isolation: Isolation) -> AsyncIterator[ProcessSubstrate]:
    """A runtime with no warm interpreter at each isolation level: every process exec'd for its Actor
    (test_warm.py runs the same checks on a warm one)."""
    rt = ProcessSubstrate(database_url, config(process_root, isolation, slots=4, stop_grace=2.0, warm_interpreters=0))
    await rt.open()
    yield rt
    await rt.close()


def alive(pid: int) -> bool:
    """True while the pid names a process that is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def proc_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2]


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose command line or environment mentions `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if (marker.encode() in cmd or marker.encode() in env) and alive(int(entry)):
            found.append(int(entry))
    return found


def sandbox_processes(rt: ProcessSubstrate, uid: str) -> list[int]:
    """Live host processes of an Actor's sandbox: its user's, and those whose command line or
    environment names the runtime's root (bwrap, runsc and gVisor's own processes)."""
    user = actor_uid(uid)
    found = set(processes_with(str(rt.root)))
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            uids = next((line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")), [])
            if str(user) in uids and alive(int(entry)):
                found.add(int(entry))
    return sorted(found)


async def wait_for(predicate, timeout: float = 15.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_ready(rt: ProcessSubstrate, uid: str) -> Path:
    """Wait until the Actor's current process has written `ready`; returns its durable directory.
    Without a sandbox `ready` holds the process's pid; in one (its own pid namespace) the file is
    the current start's when changed after the process started (the runtime gave every file of the
    directory to the Actor's user just before)."""
    data = rt.data_dir(uid)
    pid = rt.pid_of(uid)
    assert pid is not None
    since = rt.started_at(uid) or 0.0

    def ready() -> bool:
        try:
            if rt.isolation != Isolation.NONE:
                return (data / "ready").stat().st_ctime >= since and (data / "ready").read_text() != ""
            return (data / "ready").read_text() == str(pid)
        except OSError:
            return False

    await wait_for(ready, what="the process to be ready")
    return data
