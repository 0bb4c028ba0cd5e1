"""A process runtime in a process of its own, for the restart tests: it starts `count` Actors
running the fixture process (grandchild mode), prints their pids as one JSON line and its warm
interpreters' pids as another, then serves until it is killed. A fourth argument names the isolation
level (default none; the test programs' directory is shown to a sandbox)."""

import asyncio
import json
import sys
from pathlib import Path

from sessionq.runtime.process import ProcessConfig, ProcessSubstrate

FIXTURE = str(Path(__file__).with_name("fixture_process.py"))
TESTS = str(Path(__file__).resolve().parent.parent)  # shown to a sandbox


async def main(url: str, root: str, count: int, isolation: str) -> None:
    rt = ProcessSubstrate(url, ProcessConfig(root=Path(root), slots=count, isolation=isolation,
                                             sandbox_paths=(TESTS,)))
    await rt.open()
    await rt.create_actor_template(
        "kagent", "t", "local/fixture:1", command=[sys.executable], args=[FIXTURE, "grandchild"]
    )
    pids = {}
    for i in range(count):
        actor = await rt.create_actor("kagent", f"a{i}", "kagent/t")
        await rt.resume_actor("kagent", f"a{i}", actor.uid)
        pids[actor.uid] = rt.pid_of(actor.uid)
    print(json.dumps(pids), flush=True)
    await rt.warm_ready(120)
    print(json.dumps(rt.warm_pids()), flush=True)  # the warm interpreters (one was taken by an Actor)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "none"))
