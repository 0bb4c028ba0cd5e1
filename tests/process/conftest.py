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

FIXTURE = str(Path(__file__).with_name("fixture_process.py"))
ATESPACE = "kagent"


def argv(mode: str = "sleep") -> list[str]:
    return [sys.executable, FIXTURE, mode]


@pytest.fixture
def process_root(tmp_path: Path) -> Path:
    return tmp_path / "runtime"


@pytest.fixture
async def runtime(database_url: str, process_root: Path) -> AsyncIterator[ProcessSubstrate]:
    """A runtime with no warm interpreter: every process exec'd for its Actor (test_warm.py runs the
    same checks on a warm one)."""
    rt = ProcessSubstrate(database_url, ProcessConfig(root=process_root, slots=4, stop_grace=2.0, warm_interpreters=0))
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


async def wait_for(predicate, timeout: float = 15.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_ready(rt: ProcessSubstrate, uid: str) -> Path:
    """Wait until the Actor's current process has written `ready`; returns its durable directory."""
    data = rt.data_dir(uid)
    pid = rt.pid_of(uid)
    assert pid is not None

    def ready() -> bool:
        try:
            return (data / "ready").read_text() == str(pid)
        except OSError:
            return False

    await wait_for(ready, what="the process to be ready")
    return data
