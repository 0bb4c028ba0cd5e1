"""An Actor's program that calls the agent kit's tools (sessionq.agentkit.tools) as the test asks:
``call.json`` in its durable directory ({"tool": ..., "args": {...}}), the result in ``result.json``
({"ok": value} or {"error": "ValueError: ..."}). At its first start it also leaves a process running
in the background and a marker in its workspace (RT-8: suspension keeps the files, not the process)."""

import asyncio
import dataclasses
import json
import os
import pathlib
import subprocess

from sessionq.agentkit import tools

data = pathlib.Path(os.environ["SESSIONQ_DATA_DIR"])
marker = tools.workspace() / "background-started"
if not marker.exists():
    subprocess.Popen(["sleep", "1000"], start_new_session=True)
    marker.write_text("yes")


async def call(request: dict) -> object:
    tool, args = request["tool"], request.get("args", {})
    if tool == "bash":
        return dataclasses.asdict(await tools.bash(**args))
    return getattr(tools, tool)(**args) if tool != "write_file" else str(tools.write_file(**args))


async def main() -> None:
    (data / "ready").write_text(str(os.getpid()))
    request_file, answer = data / "call.json", data / "result.json"
    while True:
        if request_file.exists():
            request = json.loads(request_file.read_text())
            request_file.unlink()
            try:
                result = {"ok": await call(request)}
            except Exception as exc:
                result = {"error": f"{type(exc).__name__}: {exc}"}
            tmp = data / "result.tmp"
            tmp.write_text(json.dumps(result))
            tmp.rename(answer)
        await asyncio.sleep(0.05)


asyncio.run(main())
