"""Warm interpreters (runtime.process.warmInterpreters): an Actor handed to a pre-started
interpreter sees what an Actor whose process was exec'd for it sees, crashes the same way, pauses,
resumes and snapshots the same way; other commands start cold; a dead interpreter is replaced; no interpreter
outlives its runtime. Real processes: each check runs the same command on a runtime with no
interpreter (cold) and on one with an interpreter (warm) and compares what the process wrote about itself."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from sessionq import config
from sessionq.runtime.base import ActorState
from sessionq.runtime.process import ProcessConfig, ProcessSubstrate
from sessionq.runtime.process.sandbox import Isolation
from sessionq.runtime.process.substrate import INHERITED_ENV
from tests.process.conftest import ATESPACE, alive, proc_state, processes_with, wait_for

PROBE = str(Path(__file__).with_name("probe_process.py"))
FIXTURE = str(Path(__file__).with_name("fixture_process.py"))


async def _open(url: str, root: Path, interpreters: int) -> ProcessSubstrate:
    # warm interpreters serve isolation none only (docs/runtime.md, "Warm interpreters and sandboxes")
    rt = ProcessSubstrate(url, ProcessConfig(root=root, slots=4, stop_grace=2.0, warm_interpreters=interpreters,
                                             isolation=Isolation.NONE))
    await rt.open()
    if interpreters:
        await rt.warm_ready(120)
    return rt


async def _template(rt: ProcessSubstrate, name: str, command: list[str], env: dict[str, str] | None = None) -> None:
    await rt.create_actor_template(ATESPACE, name, "local/probe:1", command=command[:1], args=command[1:], env=env)


async def _ready(rt: ProcessSubstrate, uid: str) -> Path:
    data = rt.data_dir(uid)
    pid = rt.pid_of(uid)

    def ready() -> bool:
        try:
            return (data / "ready").read_text() == str(pid)
        except OSError:
            return False

    await wait_for(ready, timeout=60, what="the process to be ready")
    return data


async def _crashed(rt: ProcessSubstrate, name: str) -> Any:
    async def state() -> Any:
        return await rt.get_actor(ATESPACE, name)

    for _ in range(1000):
        actor = await state()
        if actor.state == ActorState.CRASHED:
            return actor
        await asyncio.sleep(0.02)
    raise AssertionError(f"{name} did not crash")


def _normalised(seen: dict[str, Any], rt: ProcessSubstrate, uid: str) -> dict[str, Any]:
    """What the probe wrote, with what differs between any two Actors (their directories, the
    listening socket's descriptor and port) replaced by names."""
    text = json.dumps(seen)
    text = text.replace(str(rt.data_dir(uid)), "<DATA>").replace(str(rt.root), "<ROOT>").replace(uid, "<UID>")
    out = json.loads(text)
    fd = out["env"].pop("SESSIONQ_A2A_FD")
    out["env"].pop("SESSIONQ_A2A_PORT")
    ready = out["env"].pop("SESSIONQ_READY_FD")
    out["env"].pop("SESSIONQ_READY_PORT")
    out["fds"] = ["A2A" if str(f) == fd else "READY" if str(f) == ready else f for f in out["fds"]]
    return out


async def _probe(rt: ProcessSubstrate, name: str, template: str, env: dict[str, str]) -> tuple[dict[str, Any], str]:
    actor = await rt.create_actor(ATESPACE, name, f"{ATESPACE}/{template}", env=env)
    await rt.resume_actor(ATESPACE, name, actor.uid)
    data = await _ready(rt, actor.uid)
    return json.loads((data / "probe.json").read_text()), actor.uid


@pytest.mark.clause("WARM-1")
async def test_an_actor_from_a_warm_interpreter_sees_exactly_what_a_cold_one_sees(database_url: str, tmp_path: Path) -> None:
    seen: dict[str, dict[str, Any]] = {}
    for kind, interpreters in (("cold", 0), ("warm", 1)):
        rt = await _open(database_url, tmp_path / kind, interpreters)
        try:
            await _template(rt, f"script-{kind}", [sys.executable, PROBE, "plant"], env={"FROM_AGENT": "a"})
            raw, uid = await _probe(rt, f"script-{kind}", f"script-{kind}", {"FROM_ACTOR": "b"})
            assert rt.started_warm(uid) is (kind == "warm")
            # the environment is exactly the one the runtime composes: nothing of the test's leaks
            given = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
            given.update({
                "FROM_AGENT": "a",
                "FROM_ACTOR": "b",
                "SESSIONQ_DATA_DIR": str(rt.data_dir(uid)),
                "SESSIONQ_ACTOR": f"{ATESPACE}/script-{kind}",
                "SESSIONQ_A2A_FD": raw["env"]["SESSIONQ_A2A_FD"],
                "SESSIONQ_A2A_PORT": str((await rt.endpoint(ATESPACE, f"script-{kind}", uid)).rsplit(":", 1)[1]),
                "SESSIONQ_READY_FD": raw["env"]["SESSIONQ_READY_FD"],
                "SESSIONQ_READY_PORT": raw["env"]["SESSIONQ_READY_PORT"],
            })
            assert raw["env"] == given
            assert raw["parent"] == os.getpid() and raw["own_group"]
            seen[f"script-{kind}"] = _normalised(raw, rt, uid)
            # `-m module`: a fork of the first Actor (its directory holds probe_mod.py)
            await rt.suspend_actor(ATESPACE, f"script-{kind}", uid)
            await rt.create_tag(ATESPACE, f"planted-{kind}", f"script-{kind}", uid)
            if interpreters:
                await rt.warm_ready(120)
            await _template(rt, f"module-{kind}", [sys.executable, "-m", "probe_mod", "sleep", "x y"])
            fork = await rt.create_actor(ATESPACE, f"module-{kind}", f"{ATESPACE}/module-{kind}", from_tag=f"planted-{kind}")
            await rt.resume_actor(ATESPACE, f"module-{kind}", fork.uid)
            assert rt.started_warm(fork.uid) is (kind == "warm")
            data = await _ready(rt, fork.uid)
            seen[f"module-{kind}"] = _normalised(json.loads((data / "probe.json").read_text()), rt, fork.uid)
        finally:
            await rt.close()
    for mode in ("script", "module"):
        cold, warm = seen[f"{mode}-cold"], seen[f"{mode}-warm"]
        cold["env"].pop("SESSIONQ_ACTOR")
        warm["env"].pop("SESSIONQ_ACTOR")
        assert warm == cold, mode
    assert seen["script-warm"]["argv"] == [PROBE, "plant"] and seen["script-warm"]["cwd"] == "<DATA>"
    assert seen["script-warm"]["path"][0] == str(Path(PROBE).parent)
    assert seen["module-warm"]["argv"] == ["<DATA>/probe_mod.py", "sleep", "x y"]
    assert seen["module-warm"]["path"][0] == "<DATA>" and seen["module-warm"]["spec"] == "probe_mod"
    assert seen["script-warm"]["fds"] == [0, 1, 2, 3, "A2A", "READY"], "no descriptor of the interpreter is left open"
    assert seen["script-warm"]["stdin"] == "/dev/null"


@pytest.mark.clause("WARM-1")
async def test_a_crash_from_a_warm_interpreter_reads_like_a_cold_one(database_url: str, tmp_path: Path) -> None:
    messages: dict[str, list[tuple[int | None, str]]] = {}
    for kind, interpreters in (("cold", 0), ("warm", 1)):
        rt = await _open(database_url, tmp_path / kind, interpreters)
        got = messages.setdefault(kind, [])
        try:
            cases = [("raise", [PROBE, "raise"]), ("exit", [PROBE, "exit", "3"]), ("missing", ["no-such-script.py"])]
            for case, args in cases:
                name = f"{case}-{kind}"
                await _template(rt, name, [sys.executable, *args])
                actor = await rt.create_actor(ATESPACE, name, f"{ATESPACE}/{name}")
                if interpreters:
                    await rt.warm_ready(120)
                await rt.resume_actor(ATESPACE, name, actor.uid)
                assert rt.started_warm(actor.uid) in (kind == "warm", None)  # None: already ended
                crashed = await _crashed(rt, name)
                text = (crashed.crash_message or "").replace(str(rt.root), "<ROOT>")
                got.append((crashed.crash_exit_status, text.replace(actor.uid, "<UID>")))
        finally:
            await rt.close()
    assert messages["warm"] == messages["cold"]
    (raised, raise_text), (exited, exit_text), (missing, missing_text) = messages["warm"]
    lines = Path(PROBE).read_text().splitlines()  # noqa: ASYNC240
    call, throw = lines.index("    fail()") + 1, lines.index('        raise ValueError("the probe failed on purpose")') + 1
    assert raised == 1 and raise_text.endswith(
        f'stderr: to stderr\nTraceback (most recent call last):\n  File "{PROBE}", line {call}, in <module>\n'
        f'    fail()\n  File "{PROBE}", line {throw}, in fail\n    raise ValueError("the probe failed on purpose")\n'
        "ValueError: the probe failed on purpose"
    ), raise_text
    assert exited == 3 and exit_text == "the process exited with status 3"
    assert missing == 2 and "can't open file '<ROOT>/actors/<UID>/data/no-such-script.py': [Errno 2]" in missing_text


@pytest.mark.clause("WARM-1")
async def test_a_process_that_ends_before_its_start_is_recorded_reads_as_a_crash_after_it(
        database_url: str, tmp_path: Path) -> None:
    """A warm start is quick: the process may end before the runtime has recorded its start. The
    resume still succeeds and the crash follows it, as for a process that ends later (the runtime's
    record of the start is held back here until the process has ended)."""
    rt = await _open(database_url, tmp_path / "rt", 1)
    call = rt._db.call

    async def slow_start(statement: str, params: Any = None) -> Any:
        if "finish_resume" in statement:
            await asyncio.wait_for(rt._children[params[0]].exited.wait(), 30)  # the process has ended
            await asyncio.sleep(0.2)  # and its watcher has had the time to record a crash
        return await call(statement, params)

    try:
        await _template(rt, "quick", [sys.executable, PROBE, "exit", "3"])
        actor = await rt.create_actor(ATESPACE, "quick", f"{ATESPACE}/quick")
        rt._db.call = slow_start  # type: ignore[method-assign]
        await rt.resume_actor(ATESPACE, "quick", actor.uid)
        crashed = await _crashed(rt, "quick")
        assert crashed.crash_exit_status == 3 and crashed.crash_message == "the process exited with status 3"
    finally:
        await rt.close()


async def test_a_crash_message_of_a_warm_actor_quotes_no_secret(database_url: str, tmp_path: Path) -> None:
    rt = await _open(database_url, tmp_path / "rt", 1)
    try:
        await _template(rt, "leak", [sys.executable, FIXTURE, "leak"], env={"API_KEY": "sk-live-0123456789"})
        actor = await rt.create_actor(ATESPACE, "leak", f"{ATESPACE}/leak", env={
            "SESSIONQ_WORKLOAD_TOKEN": "sqw.0190b2c4-8f5e-7a10-9b2d-3c4d5e6f7a8b." + "cd" * 32})
        await rt.resume_actor(ATESPACE, "leak", actor.uid)
        assert rt.started_warm(actor.uid) in (True, None)
        crashed = await _crashed(rt, "leak")
        message = crashed.crash_message or ""
        assert crashed.crash_exit_status == 4 and "fatal: leaked on purpose" in message
        assert "sk-live-0123456789" not in message and "cd" * 32 not in message and "<redacted>" in message
    finally:
        await rt.close()


@pytest.mark.clause("WARM-1")
async def test_a_warm_actor_pauses_resumes_snapshots_and_dies_like_a_cold_one(database_url: str, tmp_path: Path) -> None:
    rt = await _open(database_url, tmp_path / "rt", 1)
    try:
        await _template(rt, "t", [sys.executable, FIXTURE, "sleep"])
        actor = await rt.create_actor(ATESPACE, "a", f"{ATESPACE}/t")
        await rt.resume_actor(ATESPACE, "a", actor.uid)
        assert rt.started_warm(actor.uid) is True
        data = await _ready(rt, actor.uid)
        pid = rt.pid_of(actor.uid)
        assert pid is not None and os.getpgid(pid) == pid
        (data / "memory.txt").write_text("kept")
        await rt.pause_actor(ATESPACE, "a", actor.uid)
        await wait_for(lambda: proc_state(pid) == "T", what="the process to stop")
        resumed, _ = await rt.resume_actor(ATESPACE, "a", actor.uid)
        assert resumed.state == ActorState.RUNNING
        await wait_for(lambda: proc_state(pid) != "T", what="the process to continue")
        suspended = await rt.suspend_actor(ATESPACE, "a", actor.uid)
        assert suspended.state == ActorState.SUSPENDED and suspended.snapshots and not alive(pid)
        await rt.warm_ready(120)
        await rt.resume_actor(ATESPACE, "a", actor.uid)
        assert rt.started_warm(actor.uid) is True and rt.pid_of(actor.uid) != pid
        data = await _ready(rt, actor.uid)
        assert (data / "memory.txt").read_text() == "kept" and (data / "starts").read_text() == "2"
        second = rt.pid_of(actor.uid)
        assert second is not None
        os.kill(second, signal.SIGKILL)
        crashed = await _crashed(rt, "a")
        assert crashed.crash_exit_status == -9 and "killed by SIGKILL" in (crashed.crash_message or "")
    finally:
        await rt.close()


@pytest.mark.clause("WARM-2")
async def test_commands_a_warm_interpreter_does_not_run_start_cold(database_url: str, tmp_path: Path) -> None:
    rt = await _open(database_url, tmp_path / "rt", 1)
    try:
        interpreter = rt.warm_pids()
        assert len(interpreter) == 1
        cases = {
            "not-python": ["sleep", "1000"],
            "options": [sys.executable, "-u", FIXTURE, "sleep"],
            "other-python": ["/bin/sh", "-c", f"exec {sys.executable} {FIXTURE} sleep"],
        }
        for name, command in cases.items():
            await _template(rt, name, command)
        await _template(rt, "startup-env", [sys.executable, FIXTURE, "sleep"], env={"PYTHONUNBUFFERED": "1"})
        for name in [*cases, "startup-env"]:
            actor = await rt.create_actor(ATESPACE, name, f"{ATESPACE}/{name}")
            await rt.resume_actor(ATESPACE, name, actor.uid)
            assert rt.started_warm(actor.uid) is False, name
            assert (await rt.get_actor(ATESPACE, name)).state == ActorState.RUNNING
        assert rt.warm_pids() == interpreter, "the interpreter still waits"
    finally:
        await rt.close()
    # warmInterpreters 0: no interpreter, every Actor cold
    rt = await _open(database_url, tmp_path / "off", 0)
    try:
        await _template(rt, "python", [sys.executable, FIXTURE, "sleep"])
        actor = await rt.create_actor(ATESPACE, "off", f"{ATESPACE}/python")
        await rt.resume_actor(ATESPACE, "off", actor.uid)
        assert rt.started_warm(actor.uid) is False and rt.warm_pids() == []
        assert processes_with(str(tmp_path / "off")) == [rt.pid_of(actor.uid)]
    finally:
        await rt.close()


@pytest.mark.clause("WARM-3")
async def test_a_dead_warm_interpreter_is_replaced_and_the_actor_still_starts(database_url: str, tmp_path: Path) -> None:
    rt = await _open(database_url, tmp_path / "rt", 1)
    try:
        await _template(rt, "t", [sys.executable, FIXTURE, "sleep"])
        (first,) = rt.warm_pids()
        os.kill(first, signal.SIGKILL)
        await wait_for(lambda: rt.warm_pids() not in ([], [first]), timeout=30, what="a replacement interpreter")
        await rt.warm_ready(120)
        actor = await rt.create_actor(ATESPACE, "a", f"{ATESPACE}/t")
        await rt.resume_actor(ATESPACE, "a", actor.uid)
        assert rt.started_warm(actor.uid) is True
        await _ready(rt, actor.uid)
        # an interpreter killed just before it is handed an Actor: the Actor starts anyway (cold)
        await rt.warm_ready(120)
        (second,) = rt.warm_pids()
        other = await rt.create_actor(ATESPACE, "b", f"{ATESPACE}/t")
        os.kill(second, signal.SIGKILL)
        await rt.resume_actor(ATESPACE, "b", other.uid)
        assert rt.pid_of(other.uid) != second
        await _ready(rt, other.uid)
        assert (await rt.get_actor(ATESPACE, "b")).state == ActorState.RUNNING
    finally:
        await rt.close()


@pytest.mark.clause("WARM-3")
async def test_no_warm_interpreter_outlives_the_runtime(database_url: str, tmp_path: Path) -> None:
    rt = await _open(database_url, tmp_path / "rt", 2)
    interpreters = rt.warm_pids()
    assert len(interpreters) == 2 and all(os.getpgid(p) == p for p in interpreters), "each interpreter leads its own group"
    assert sorted(processes_with(str(tmp_path / "rt"))) == sorted(interpreters), "the process table shows them"
    await rt.close()
    assert not any(alive(p) for p in interpreters)
    assert processes_with(str(tmp_path / "rt")) == []


def test_warm_interpreters_is_a_validated_key() -> None:
    assert config.defaults().runtime.process.warm_interpreters == 1
    assert config.load(None, env={"SESSIONQ_RUNTIME__PROCESS__WARM_INTERPRETERS": "0"}).runtime.process.warm_interpreters == 0
    with pytest.raises(config.ConfigError, match=r"runtime\.process\.warmInterpreters"):
        config.load(None, env={"SESSIONQ_RUNTIME__PROCESS__WARM_INTERPRETERS": "-1"})
