"""The Actor's tools (sessionq.agentkit.tools) called by a real Actor's program (tools_process.py) at
every isolation level: the workspace in the durable directory (surviving suspend, resume and a fork),
file tools, and `bash` (a fresh shell, the environment, the working directory and skills on
PYTHONPATH, timeouts, 64 KiB of output, the process group killed), with bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sessionq.agentkit.tools import OUTPUT_LIMIT, TRUNCATED
from sessionq.runtime.process import ProcessSubstrate
from sessionq.runtime.process.sandbox import Isolation
from tests.process.conftest import ATESPACE, config, sandbox_processes, wait_for, wait_ready

TOOLS = str(Path(__file__).with_name("tools_process.py"))


async def _call(rt: ProcessSubstrate, uid: str, tool: str, **args: Any) -> dict[str, Any]:
    data = rt.data_dir(uid)
    answer = data / "result.json"
    answer.unlink(missing_ok=True)
    (data / "call.json").write_text(json.dumps({"tool": tool, "args": args}))
    # the tool's own time limit and then some (a fork storm under gVisor may use all of its 90 s)
    limit = args.get("timeout_seconds")
    wait = max(60.0, limit + 30.0) if isinstance(limit, int) and 0 < limit <= 600 else 60.0
    await wait_for(answer.exists, timeout=wait, what=f"the {tool} call's result")
    return json.loads(answer.read_text())  # type: ignore[no-any-return]


async def _bash(rt: ProcessSubstrate, uid: str, command: str, **args: Any) -> dict[str, Any]:
    result = await _call(rt, uid, "bash", command=command, **args)
    assert "ok" in result, result
    return result["ok"]  # type: ignore[no-any-return]


@pytest.mark.clause("RT-5")
@pytest.mark.clause("RT-6")
@pytest.mark.clause("RT-7")
@pytest.mark.clause("RT-8")
@pytest.mark.timeout(300)
@pytest.mark.slow
async def test_the_tools_of_an_actor(isolation: Isolation, database_url: str, tmp_path: Path) -> None:
    rt = ProcessSubstrate(database_url, config(tmp_path / "rt", isolation, slots=3, stop_grace=1.0,
                                               warm_interpreters=0))
    await rt.open()
    try:
        await rt.create_actor_template(ATESPACE, "t", "local/tools:1", command=[sys.executable], args=[TOOLS],
                                       env={"GREETING": "hello"})
        uid = (await rt.create_actor(ATESPACE, "a", f"{ATESPACE}/t")).uid
        await rt.resume_actor(ATESPACE, "a", uid)
        data = await wait_ready(rt, uid)
        inside = "/data" if isolation != Isolation.NONE else str(data)
        (data / "skills").mkdir(exist_ok=True)
        (data / "skills" / "helper.py").write_text("WORD = 'from a skill'\n")

        # RT-6: a fresh shell with the Actor's environment, in the workspace, skills on PYTHONPATH
        out = await _bash(rt, uid, 'pwd; echo "$GREETING"; echo "$PYTHONPATH"; export LEFT=1; '
                                   f'{sys.executable} -c "import helper; print(helper.WORD)"')
        assert out["exit_code"] == 0, out
        assert out["output"].splitlines() == [
            f"{inside}/workspace", "hello", f"{inside}/workspace:{inside}/skills", "from a skill"], out
        assert (await _bash(rt, uid, 'echo "[$LEFT]"'))["output"] == "[]\n", "each call starts a fresh shell"

        # RT-5: the workspace, relative and absolute paths
        await _call(rt, uid, "write_file", path="notes/a.txt", text="kept")
        assert (await _call(rt, uid, "read_file", path=f"{inside}/workspace/notes/a.txt")) == {"ok": "kept"}
        assert (await _call(rt, uid, "list_files", path="notes")) == {"ok": ["a.txt"]}
        assert (data / "workspace" / "notes" / "a.txt").read_text() == "kept"

        # RT-7: 64 KiB of 10 MB, the marker; a timeout kills the group; background work ends with the call
        big = await _bash(rt, uid, "head -c 10000000 /dev/zero | tr '\\0' a")
        assert big["truncated"] and big["output"] == "a" * OUTPUT_LIMIT + TRUNCATED
        slow = await _bash(rt, uid, "echo started; sleep 30", timeout_seconds=1)
        assert slow["timed_out"] and slow["exit_code"] is None and slow["output"].startswith("started\n"), slow
        background = await _bash(rt, uid, "sleep 300 & echo $!")
        pid = background["output"].strip()
        gone = await _bash(rt, uid, f"sleep 0.2; grep -qv ' Z ' /proc/{pid}/stat 2>/dev/null && echo alive || echo gone")
        assert gone["output"] == "gone\n", "the call's process group was killed when it finished"

        # bad input: clear errors, nothing run
        for bad in (601, -1):
            refused = await _call(rt, uid, "bash", command="touch ran", timeout_seconds=bad)
            assert refused == {"error": "ValueError: timeout_seconds: between 1 and 600"}, refused
        assert not (data / "workspace" / "ran").exists()
        missing = await _bash(rt, uid, "no-such-command-in-the-sandbox")
        assert missing["exit_code"] == 127 and "not found" in missing["output"], missing
        if isolation != Isolation.NONE:
            # processes are bounded in a sandbox: a fork storm stops at the limit, the call ends it
            # (gVisor forks slowly: on a machine loaded 10 times over its cores 512 of them took
            # more than 30 s)
            storm = await _bash(rt, uid, "for i in $(seq 700); do sleep 60 & done; echo done",
                                timeout_seconds=90 if isolation == Isolation.GVISOR else 10)
            assert "Resource temporarily unavailable" in storm["output"] or "retry" in storm["output"], \
                storm["output"][-500:]
            # (gVisor's old coreutils `ls` of a directory fails with EINVAL: Python lists it)
            count = await _bash(rt, uid, sys.executable + " -c \"import os; print(sum(p.isdigit() for p in "
                                         "os.listdir('/proc')))\"")
            assert int(count["output"].strip()) < 20, count

        # RT-8 and RT-5: suspend keeps the files, not the processes; a fork starts from the files
        await rt.suspend_actor(ATESPACE, "a", uid)
        if isolation != Isolation.NONE:
            assert sandbox_processes(rt, uid) == []
        await rt.resume_actor(ATESPACE, "a", uid)
        await wait_ready(rt, uid)
        assert (await _call(rt, uid, "read_file", path="notes/a.txt")) == {"ok": "kept"}
        sleeping = await _bash(rt, uid, sys.executable + " -c \"import os; print(sum(1 for p in os.listdir('/proc') "
                                        "if p.isdigit() and open(f'/proc/{p}/comm').read().strip() == 'sleep'))\"")
        if isolation != Isolation.NONE:  # (without a sandbox /proc shows the whole machine's)
            assert sleeping["output"].strip() == "0", "the background process did not survive the suspension"
        await rt.suspend_actor(ATESPACE, "a", uid)
        await rt.create_tag(ATESPACE, "cp", "a", uid)
        fork = await rt.create_actor(ATESPACE, "fork", f"{ATESPACE}/t", from_tag="cp")
        await rt.resume_actor(ATESPACE, "fork", fork.uid)
        await wait_ready(rt, fork.uid)
        assert (await _call(rt, fork.uid, "read_file", path="notes/a.txt")) == {"ok": "kept"}
    finally:
        await rt.close()
