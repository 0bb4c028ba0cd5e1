"""A process that runs the process runtime keeps the configuration's credentials from its Actors,
which run as its user: not in their environment, not in /proc/<runtime pid>/environ, and its
memory is closed to them (non-dumpable)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import QUICK_RECONNECT, stop_process

from sessionq.runtime.ateapi.client import SubstrateClient, SubstrateOptions
from tests.process.conftest import FIXTURE, wait_for
from tests.process.test_served import free_port

NS = "kagent"
TOKEN = "bearer-token-not-for-agents"
CURSOR_KEY = "cursor-key-not-for-agents"


def _secrets(database_url: str) -> dict[str, str]:
    return {"SESSIONQ_DATABASE__URL": database_url, "SESSIONQ_DATABASE__DIRECT_URL": database_url,
            "SESSIONQ_AUTH__TOKENS": f"{TOKEN}=alice", "SESSIONQ_INVENTORY__CURSOR_SECRET": CURSOR_KEY}


def _leaks(seen: bytes, database_url: str) -> list[str]:
    return [s for s in (database_url, TOKEN, CURSOR_KEY, "SESSIONQ_DATABASE__URL", "SESSIONQ_AUTH__TOKENS")
            if s.encode() in seen]


@pytest.mark.timeout(180)
async def test_an_actor_reads_no_secret_of_the_runtime(database_url: str, tmp_path: Path) -> None:
    port, actor_port = free_port(), free_port()
    root = tmp_path / "process-runtime"
    env = {**os.environ, **_secrets(database_url), "SESSIONQ_LOGGING__FORMAT": "text",
           "SESSIONQ_RUNTIME__PROCESS__ROOT": str(root), "SESSIONQ_RUNTIME__PROCESS__SLOTS": "2"}
    proc = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-m", "sessionq.cli.main", "runtime", "serve", "--process",
         "--address", f"127.0.0.1:{port}", "--actor-address", f"127.0.0.1:{actor_port}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    client = SubstrateClient(SubstrateOptions(
        address=f"127.0.0.1:{port}", uid_preflight=False, call_timeout=30.0, extra_channel_options=QUICK_RECONNECT,
        actor_address_pattern=f"http://127.0.0.1:{actor_port}/actors/{{atespace}}/{{name}}"))
    try:
        await client.open()
        deadline = time.monotonic() + 60
        while (problem := await client.check_health()) is not None:
            assert time.monotonic() < deadline, problem
            await asyncio.sleep(0.1)
        await client.create_actor_template(NS, "t1", "local/fixture:1", command=[sys.executable],
                                           args=[FIXTURE, "environ"])
        for name in ("cold", "warm"):  # the second may come from a warm interpreter: both are checked
            actor = await client.create_actor(NS, name, f"{NS}/t1")
            await client.resume_actor(NS, name, actor.uid)
            data = root / "actors" / actor.uid / "data"
            await wait_for(lambda: (data / "ready").exists(), 60, "the actor to start")  # noqa: B023
            own = (data / "own-environ").read_bytes()
            assert _leaks(own, database_url) == [], "the actor's own environment"
            runtime_seen = (data / "runtime-environ").read_bytes()
            assert _leaks(runtime_seen, database_url) == [], "/proc/<runtime>/environ as the actor read it"
        # the runtime still reaches its database: the secrets were taken after it read them
        assert (await client.get_actor(NS, "cold")).uid
        assert _leaks(Path(f"/proc/{proc.pid}/environ").read_bytes(), database_url) == []  # noqa: ASYNC240
    finally:
        await client.close()
        stop_process(proc, 20)


def test_withholding_secrets_wipes_the_started_environment_and_closes_the_process(database_url: str) -> None:
    """In one process: the variables leave os.environ and the block /proc shows, other variables
    stay, children get none, and the process is non-dumpable (its user's other processes cannot
    read its memory or /proc entries, nor ptrace it)."""
    code = (
        "import ctypes, os, pathlib, subprocess, sys\n"
        "from sessionq.app.runtimes import withheld_environment, withhold_secrets\n"
        "taken = withhold_secrets()\n"
        "print(sorted(taken) == sorted(withheld_environment()) and len(taken) == 4)\n"
        "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))\n"  # PR_GET_DUMPABLE
        "sys.stdout.buffer.write(pathlib.Path('/proc/self/environ').read_bytes() + b'\\n')\n"
        "sys.stdout.buffer.write(subprocess.run(['env'], capture_output=True).stdout.replace(b'\\n', b' ') + b'\\n')\n"
        "print(os.environ.get('KEPT'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **_secrets(database_url), "KEPT": "yes"},
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    taken, dumpable, started, child, kept = done.stdout.split(b"\n")[:5]
    assert taken == b"True" and dumpable == b"0" and kept == b"yes"
    assert b"KEPT=yes" in started and _leaks(started, database_url) == []
    assert b"KEPT=yes" in child and _leaks(child, database_url) == []
